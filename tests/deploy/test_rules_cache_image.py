"""The image's pre-built compiled-rules entry serves the chart's rules (docs/performance.md "Fast to start, light to hold"): the rules the
chart mounts (its ConfigMap, each key written where the volume's items put it) have the same cache key
as the rules the wheel ships, which the image build compiles (deploy/image/Dockerfile), so a controller
started by the chart loads them without parsing."""
from __future__ import annotations

import re
from pathlib import Path

from runtime.rules import compiledcache

from runtime.rules.loader import DEFAULT_RULES_DIR, iter_rule_files
from tests.deploy.test_chart import REPO, by_kind, render


def _key(root: Path) -> str:
    files = [(str(p.relative_to(root.parent)), p.read_bytes()) for p in iter_rule_files(root)]
    return compiledcache.RulesCache(root.parent / "unused").key(files)


def test_the_charts_mounted_rules_hit_the_images_entry(tmp_path):
    objects = by_kind(render())
    data = objects[("ConfigMap", "accelpolicy-rules")]["data"]
    deployments = [o for (kind, _), o in objects.items() if kind == "Deployment"]  # controller and admission
    assert len(deployments) == 2
    volumes = [next(v for v in d["spec"]["template"]["spec"]["volumes"] if v["name"] == "rules") for d in deployments]
    assert volumes[0] == volumes[1]   # both mount the same rules
    volume = volumes[0]
    mount = tmp_path / "etc" / "accelpolicy" / "rules"  # the chart's mountPath's last part is "rules" too
    for item in volume["configMap"]["items"]:
        target = mount / item["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(data[item["key"]], encoding="utf-8")
    assert DEFAULT_RULES_DIR.name == mount.name == "rules"
    assert _key(mount) == _key(DEFAULT_RULES_DIR)


def test_the_image_builds_the_entry_and_reads_it_second():
    dockerfile = (REPO / "deploy" / "image" / "Dockerfile").read_text()
    assert "accelpolicy lint --rules-cache /opt/accelpolicy/rules-cache" in dockerfile
    assert "COPY --from=install /opt/accelpolicy/rules-cache /opt/accelpolicy/rules-cache" in dockerfile
    env = re.search(r"ACCELPOLICY_RULES_CACHE=(\S+)", dockerfile).group(1)
    assert env.split(":") == ["/tmp/accelpolicy/rules-cache", "/opt/accelpolicy/rules-cache"]
