"""Pieces of testing/localcluster/components.py and e2e/components/build.sh that need no cluster."""

from __future__ import annotations

import base64
import ipaddress
import os
import shutil
import subprocess

import pytest
import yaml
from cryptography import x509

from testing.localcluster import COMPONENTS, MissingBinariesError, fake_node, find_component_binaries
from testing.localcluster.binaries import COMPONENTS_VERSION, LocalClusterError, components_version, repo_root
from testing.localcluster.certs import generate_pki, issue_serving_cert
from testing.localcluster.components import (KUEUE_CONFIG_API_VERSION, kueue_base_configuration,
                                             kueue_webhook_configurations, merge_kueue_configuration)

ROOT = repo_root()
BUILD = ROOT / "e2e" / "components" / "build.sh"


def test_version_key_matches_versions_txt():
    assert components_version() == COMPONENTS_VERSION == "kueue-v0.17.0_nfd-master-v0.19.0_kwok-v0.8.0"
    assert COMPONENTS == ("kwok", "nfd-master", "kueue")


def test_versions_txt_with_a_short_line_is_refused(tmp_path):
    bad = tmp_path / "versions.txt"
    bad.write_text("# comment\nsigs.k8s.io/kwok v0.8.0 ./cmd/kwok\n")
    with pytest.raises(LocalClusterError, match=r"versions.txt:2: expected '<module> <version>"):
        components_version(bad)


def test_build_script_prints_the_same_directory(tmp_path):
    out = subprocess.run(["bash", str(BUILD), "--print-dir"], env=dict(os.environ, ACCELPOLICY_CACHE=str(tmp_path)),
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == str(tmp_path / "bin" / f"components-{COMPONENTS_VERSION}")


def test_build_script_without_go_says_so(tmp_path):
    bin_dir = tmp_path / "bin-no-go"
    bin_dir.mkdir()
    for tool in ("bash", "grep", "dirname", "mkdir", "date", "cat"):
        os.symlink(shutil.which(tool), bin_dir / tool)
    proc = subprocess.run([shutil.which("bash"), str(BUILD)], capture_output=True, text=True,
                          env={"PATH": str(bin_dir), "ACCELPOLICY_CACHE": str(tmp_path / "cache"), "HOME": str(tmp_path)})
    assert proc.returncode == 2
    assert "components: 'go' not found on PATH" in proc.stderr


def test_missing_components_say_run_make_controlplane(tmp_path):
    (tmp_path / "kwok").write_text("#!/bin/sh\n")
    os.chmod(tmp_path / "kwok", 0o755)
    with pytest.raises(MissingBinariesError) as e:
        find_component_binaries(("kwok", "kueue"), tmp_path)
    msg = str(e.value)
    assert f"cluster components missing in {tmp_path}: kueue, kwok-stages/*.yaml, kueue-webhook/manifests.yaml" in msg
    assert "run `make controlplane`" in msg
    with pytest.raises(LocalClusterError, match="unknown component"):
        find_component_binaries(("kube-controller-manager",), tmp_path)


def test_issued_serving_cert_is_signed_by_the_cluster_ca(tmp_path):
    pki = generate_pki(tmp_path)
    issue_serving_cert(pki, tmp_path / "w.crt", tmp_path / "w.key", common_name="kueue")
    ca = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    cert = x509.load_pem_x509_certificate((tmp_path / "w.crt").read_bytes())
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert oct((tmp_path / "w.key").stat().st_mode & 0o777) == "0o600"
    assert oct(pki.ca_key.stat().st_mode & 0o777) == "0o600"


def test_kueue_configuration_merges_policy_over_the_base():
    base = kueue_base_configuration(webhook_port=1, health_port=2, metrics_port=3)
    assert base["apiVersion"] == KUEUE_CONFIG_API_VERSION == "config.kueue.x-k8s.io/v1beta2"
    assert base["internalCertManagement"] == {"enable": False}
    assert base["leaderElection"] == {"leaderElect": False}
    resources = {"excludeResourcePrefixes": ["example.com/"],
                 "transformations": [{"input": "example.com/x", "strategy": "Replace", "outputs": {"y": "1"}}]}
    merged = merge_kueue_configuration(base, {"resources": resources, "integrations": {"frameworks": ["pod", "batch/job"]},
                                              "webhook": {"port": 9}})
    assert merged["resources"] == resources
    assert merged["integrations"] == {"frameworks": ["pod", "batch/job"]}
    assert merged["webhook"] == {"port": 9, "host": "127.0.0.1", "certDir": "/etc/kueue/webhook-certs"}
    assert "resources" not in base and base["webhook"]["port"] == 1
    assert merge_kueue_configuration(base, resources)["resources"] == resources  # a bare resources section
    with pytest.raises(LocalClusterError, match="kueue_configuration apiVersion is 'config.kueue.x-k8s.io/v1beta1'"):
        merge_kueue_configuration(base, {"apiVersion": "config.kueue.x-k8s.io/v1beta1"})
    with pytest.raises(LocalClusterError, match="must be a mapping"):
        merge_kueue_configuration(base, ["resources"])


def test_kueue_webhooks_from_the_module_point_at_loopback():
    from testing.localcluster.crds import KUEUE_MODULE, module_dirs
    try:
        webhook_dir = module_dirs()[KUEUE_MODULE] / "config" / "components" / "webhook"
    except LocalClusterError as e:
        pytest.skip(f"Kueue module not available: {e}")
    hooks = kueue_webhook_configurations(webhook_dir, base_url="https://127.0.0.1:9443", ca_bundle=b"PEM")
    source = [d for d in yaml.safe_load_all((webhook_dir / "manifests.yaml").read_text()) if d]
    assert [h["metadata"]["name"] for h in hooks] == ["kueue-" + d["metadata"]["name"] for d in source]
    assert [len(h["webhooks"]) for h in hooks] == [len(d["webhooks"]) for d in source]
    mutating = {w["name"]: w for w in hooks[0]["webhooks"]}
    assert mutating["mpod.kb.io"]["clientConfig"] == {"url": "https://127.0.0.1:9443/mutate--v1-pod",
                                                      "caBundle": base64.b64encode(b"PEM").decode()}
    assert mutating["mpod.kb.io"]["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", "kueue-system"]
    assert "namespaceSelector" not in mutating["mclusterqueue.kb.io"]


def test_fake_node_is_annotated_for_kwok_with_capacity():
    node = fake_node("n1", {"kubernetes.io/os": "linux"}, {"cpu": "4", "nvidia.com/gpu": "1"})
    assert node["metadata"] == {"name": "n1", "labels": {"kubernetes.io/hostname": "n1", "kubernetes.io/os": "linux"},
                                "annotations": {"kwok.x-k8s.io/node": "fake"}}
    assert node["status"]["capacity"] == {"pods": "110", "cpu": "4", "nvidia.com/gpu": "1"}
    assert node["status"]["allocatable"] == node["status"]["capacity"]


def test_local_cluster_checks_components_before_starting(tmp_path, monkeypatch):
    from testing.localcluster import ControlPlaneBinaries, LocalCluster
    fake = ControlPlaneBinaries(etcd=tmp_path / "etcd", kube_apiserver=tmp_path / "kube-apiserver",
                                kube_scheduler=tmp_path / "kube-scheduler", directory=tmp_path)
    monkeypatch.setenv("ACCELPOLICY_COMPONENTS_BIN", str(tmp_path / "components"))
    with pytest.raises(MissingBinariesError, match=r"cluster components missing in .*components: kueue, "
                                                   r"kueue-webhook/manifests.yaml; run `make controlplane`"):
        LocalCluster(fake, components=("kueue",))
    with pytest.raises(LocalClusterError, match="kueue_configuration given but 'kueue' is not in components"):
        LocalCluster(fake, kueue_configuration={"resources": {}})
    with pytest.raises(LocalClusterError, match="components must be a sequence of names"):
        LocalCluster(fake, components="kueue")
    with pytest.raises(MissingBinariesError, match=r"kube-controller-manager missing in .*; run `make controlplane`"):
        LocalCluster(fake, controller_manager=True)
