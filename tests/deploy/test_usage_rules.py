"""The showback recording rules (deploy/chart/prometheus/accelpolicy-usage.rules.yaml; docs/tasks/report-usage.md):
Prometheus' own checker accepts them, every expression names exported metrics and their labels, and the
chart ships them as a ConfigMap only behind metrics.recordingRules.enabled."""
from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from tests.deploy.test_chart import CHART, by_kind, render
from tests.deploy.test_dashboard import GROUPING, METRIC, _series

RULES = CHART / "prometheus" / "accelpolicy-usage.rules.yaml"


def _rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def test_promtool_accepts_the_rules():
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian's prometheus package: .ci/run installs it)")
    done = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in done.stdout


@pytest.mark.parametrize("rule", _rules(), ids=lambda r: r["record"])
def test_every_rule_reads_exported_counters_by_their_labels(rule):
    series = _series()
    found = list(METRIC.finditer(rule["expr"]))
    assert found
    for match in found:
        family, kind, labels = series[match.group(1)]
        assert kind == "counter" and family.endswith("_seconds"), match.group(1)
        for group in GROUPING.findall(rule["expr"]):
            assert {g.strip() for g in group.split(",")} <= set(labels), (rule["record"], group)
    assert rule["record"].split(":")[0] == "_".join(GROUPING.findall(rule["expr"])[0].replace(" ", "").split(","))


def test_chart_ships_the_rules_only_behind_their_flag():
    assert ("ConfigMap", "accelpolicy-prometheus-rules") not in by_kind(render())
    objects = by_kind(render("metrics.recordingRules.enabled=true", "metrics.recordingRules.labels.team=platform"))
    configmap = objects[("ConfigMap", "accelpolicy-prometheus-rules")]
    assert configmap["metadata"]["labels"]["team"] == "platform"
    assert yaml.safe_load(configmap["data"]["accelpolicy-usage.rules.yaml"]) == yaml.safe_load(RULES.read_text())
