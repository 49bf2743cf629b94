"""Kueue and NFD for a registry-less cluster (deploy/components/): their own Helm charts from their Go
modules, rendered with local image tags and accelpolicy's Kueue charging, and images made of the
binaries `make controlplane` built. Rendering needs go and helm (skipped without them); the image
checks need the project's docker daemon (skipped without it)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ACCELPOLICY = Path(sys.executable).parent / "accelpolicy"


def _containers(doc: dict) -> list[dict]:
    spec = ((doc.get("spec") or {}).get("template") or {}).get("spec") or {}
    return list(spec.get("containers") or []) + list(spec.get("initContainers") or [])


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, list[dict]]:
    if shutil.which("go") is None:
        pytest.skip("no go on PATH (the charts come from Go's module cache)")
    helm = subprocess.run(["bash", str(REPO / "deploy/tools/build.sh"), "--print", "helm"], capture_output=True,
                          text=True, check=True).stdout.strip()
    if not Path(helm).is_file():
        pytest.skip(f"helm is not built ({helm}): run `make helm`")
    out = tmp_path_factory.mktemp("components")
    proc = subprocess.run([sys.executable, str(REPO / "deploy/components/render.py"), str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return {name: [d for d in yaml.safe_load_all((out / f"{name}.yaml").read_text()) if d] for name in ("kueue", "nfd")}


def test_every_image_is_a_local_tag_never_pulled(rendered):
    images = {(c["image"], c.get("imagePullPolicy")) for docs in rendered.values() for d in docs
              for c in _containers(d)}
    assert images == {("accelpolicy.local/kueue:v0.17.0", "IfNotPresent"),
                      ("accelpolicy.local/node-feature-discovery:v0.19.0", "IfNotPresent")}


def test_kueue_runs_with_accelpolicys_charging_and_the_pod_integration(rendered):
    docs = rendered["kueue"]
    assert docs[0] == {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}}
    (deploy,) = [d for d in docs if d["kind"] == "Deployment"]
    assert deploy["metadata"]["name"] == "kueue-controller-manager"
    assert _containers(deploy)[0]["command"] == ["/manager"]
    (config_map,) = [d for d in docs if d["kind"] == "ConfigMap" and "controller_manager_config.yaml" in d["data"]]
    config = yaml.safe_load(config_map["data"]["controller_manager_config.yaml"])
    fragment = json.loads(subprocess.run([str(ACCELPOLICY), "kueue-config", "-o", "json"], capture_output=True,
                                         text=True, check=True).stdout)
    assert config["resources"] == fragment["resources"]
    assert config["integrations"] == {"frameworks": ["pod"]}
    crds = {d["metadata"]["name"] for d in docs if d["kind"] == "CustomResourceDefinition"}
    assert {"resourceflavors.kueue.x-k8s.io", "clusterqueues.kueue.x-k8s.io", "localqueues.kueue.x-k8s.io",
            "admissionchecks.kueue.x-k8s.io", "workloads.kueue.x-k8s.io"} <= crds


def test_nfd_runs_the_master_only_trusting_the_system_namespace(rendered):
    docs = rendered["nfd"]
    kinds = sorted({d["kind"] for d in docs})
    assert "DaemonSet" not in kinds and "Job" not in kinds   # no worker, no gc, no hooks
    (deploy,) = [d for d in docs if d["kind"] == "Deployment"]
    assert deploy["metadata"]["name"] == "node-feature-discovery-master" and _containers(deploy)[0]["command"] == ["nfd-master"]
    (conf,) = [d for d in docs if d["kind"] == "ConfigMap"]
    master = yaml.safe_load(conf["data"]["nfd-master.conf"])
    assert master["restrictions"]["nodeFeatureNamespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "gpustack-system"}}
    assert {d["metadata"]["name"] for d in docs if d["kind"] == "CustomResourceDefinition"} >= {
        "nodefeatures.nfd.k8s-sigs.io"}


@pytest.fixture(scope="module")
def images() -> list[str]:
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        pytest.skip("no docker daemon: start the guarded one with `bash e2e/kind/dockerd.sh start`")
    proc = subprocess.run(["bash", str(REPO / "deploy/components/images.sh")], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_component_images_run_as_non_root_offline(images):
    assert images == ["accelpolicy.local/kueue:v0.17.0", "accelpolicy.local/node-feature-discovery:v0.19.0"]
    for tag in images:
        user = subprocess.run(["docker", "image", "inspect", "-f", "{{.Config.User}}", tag], capture_output=True,
                              text=True, check=True).stdout.strip()
        assert user == "65532:65532"
    nfd = subprocess.run(["docker", "run", "--rm", "--network", "none", "--read-only", images[1], "-version"],
                         capture_output=True, text=True, timeout=60)
    assert nfd.returncode == 0 and nfd.stdout.strip() == "nfd-master v0.19.0", nfd.stderr
    kueue = subprocess.run(["docker", "run", "--rm", "--network", "none", "--read-only", images[0], "--help"],
                           capture_output=True, text=True, timeout=60)
    assert kueue.returncode == 0 and "-config string" in kueue.stdout + kueue.stderr
