"""localcluster pieces that need no running control plane."""

from __future__ import annotations

import ipaddress
import os
import stat

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from testing.localcluster import (CONTROLPLANE_VERSION, MissingBinariesError, find_binaries, our_crds,
                                  pinned_version)
from testing.localcluster.binaries import repo_root
from testing.localcluster.certs import generate_pki
from testing.localcluster.testing import parse_table

ROOT = repo_root()


def test_version_constant_matches_go_mod():
    assert pinned_version() == CONTROLPLANE_VERSION == "k8s-v1.37.2_etcd-v3.7.0"


def test_build_script_prints_the_same_directory(tmp_path):
    import subprocess
    out = subprocess.run(["bash", str(ROOT / "e2e/controlplane/build.sh"), "--print-dir"],
                         env=dict(os.environ, ACCELPOLICY_CACHE=str(tmp_path)),
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == str(tmp_path / "bin" / CONTROLPLANE_VERSION)


def test_missing_binaries_say_run_make_controlplane(tmp_path):
    (tmp_path / "etcd").write_text("#!/bin/sh\n")
    os.chmod(tmp_path / "etcd", 0o755)
    with pytest.raises(MissingBinariesError) as e:
        find_binaries(tmp_path)
    assert "kube-apiserver" in str(e.value) and "etcd," not in str(e.value)
    assert "run `make controlplane`" in str(e.value) and str(tmp_path) in str(e.value)
    with pytest.raises(MissingBinariesError):
        find_binaries(tmp_path / "nowhere")


def test_optional_programs_are_found_when_executable(tmp_path):
    for name in ("etcd", "kube-apiserver", "kube-controller-manager"):
        (tmp_path / name).write_text("#!/bin/sh\n")
        os.chmod(tmp_path / name, 0o755)
    found = find_binaries(tmp_path)
    assert found.kube_controller_manager == tmp_path / "kube-controller-manager"
    assert found.kube_scheduler is None
    os.chmod(tmp_path / "kube-controller-manager", 0o644)
    assert find_binaries(tmp_path).kube_controller_manager is None


def test_generated_pki(tmp_path):
    pki = generate_pki(tmp_path)
    ca = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    serving = x509.load_pem_x509_certificate(pki.serving_cert.read_bytes())
    admin = x509.load_pem_x509_certificate(pki.admin_cert.read_bytes())
    for leaf in (serving, admin):
        leaf.verify_directly_issued_by(ca)
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in sans.get_values_for_type(x509.IPAddress)
    assert "localhost" in sans.get_values_for_type(x509.DNSName)
    assert admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:masters"
    assert admin.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value == \
        x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])
    for key in (pki.admin_key, pki.serving_key, pki.sa_private_key):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600


def test_parse_table_keeps_values_with_single_spaces():
    text = ("NAME     ACCELERATOR(EX/SH/SL/PT)   CPU\n"
            "a        1/1 10/10 100/100 0/0      0/0\n"
            "b                                   48/72\n")
    headers, rows = parse_table(text)
    assert headers == ["NAME", "ACCELERATOR(EX/SH/SL/PT)", "CPU"]
    assert rows == [{"NAME": "a", "ACCELERATOR(EX/SH/SL/PT)": "1/1 10/10 100/100 0/0", "CPU": "0/0"},
                    {"NAME": "b", "ACCELERATOR(EX/SH/SL/PT)": "", "CPU": "48/72"}]


# docs/getting-started.md "Step 1: read the initial pools": plural / singular, short names, categories, printer columns (name, JSONPath, type, priority)
EXPECTED_NAMES = {
    "InstanceType": ("worker.gpustack.ai", "Cluster", "instancetypes", "instancetype", ["instype"]),
    "InstanceTypeFlavor": ("worker.gpustack.ai", "Cluster", "instancetypeflavors", "instancetypeflavor", ["instypeflavor"]),
    "Devices": ("worker.gpustack.ai", "Cluster", "devices", "devices", ["devs"]),
    "Instance": ("worker.gpustack.ai", "Namespaced", "instances", "instance", ["inst"]),
    "InstancePersistentVolume": ("worker.gpustack.ai", "Namespaced", "instancepersistentvolumes",
                                 "instancepersistentvolume", ["instpv"]),
    "Setting": ("gpustack.ai", "Namespaced", "settings", "setting", ["set"]),
    "PolicyException": ("worker.gpustack.ai", "Namespaced", "policyexceptions", "policyexception", ["gpex"]),
    # docs/concepts/out-of-service.md "Maintenance"
    "AcceleratorMaintenance": ("worker.gpustack.ai", "Cluster", "acceleratormaintenances", "acceleratormaintenance",
                               ["accmaint"]),
}
EXPECTED_COLUMNS = {
    "InstanceType": [("Entrance", ".status.entrance", "string", 0),
                     ("Unit(CPU/RAM)/Storage", ".status.summary.unit", "string", 0),
                     ("Accelerator(EX/SH/SL/PT)", ".status.summary.accelerator", "string", 0),
                     ("CPU", ".status.summary.cpu", "string", 0),
                     ("Phase", ".status.phase", "string", 0),
                     ("Partitions", ".status.summary.partitions", "string", 1)],
    "InstanceTypeFlavor": [("GeneralGroup", ".spec.generalGroup", "string", 0),
                           ("AcceleratorGroup", ".spec.acceleratorGroup", "string", 0),
                           ("Acceleratable", ".spec.acceleratable", "boolean", 0),
                           ("Manufacturer", ".spec.manufacturer", "string", 0),
                           ("Product", ".spec.product", "string", 0),
                           ("Memory", ".spec.memory", "string", 0),
                           ("Cores", ".spec.cores", "string", 0),
                           ("Sliceable", ".spec.sliceable", "boolean", 0)],
    "Devices": [("Age", ".metadata.creationTimestamp", "date", 1)],
    "AcceleratorMaintenance": [("Node", ".spec.node", "string", 0), ("Devices", ".status.devices", "string", 0),
                               ("Reason", ".spec.reason", "string", 0), ("Owner", ".spec.owner", "string", 0),
                               ("Expiry", ".spec.expiry", "string", 0), ("State", ".status.state", "string", 0),
                               ("Age", ".metadata.creationTimestamp", "date", 1)],
}


def test_our_crds_match_pools_13():
    crds = {c["spec"]["names"]["kind"]: c for c in our_crds()}
    assert set(crds) == set(EXPECTED_NAMES)
    for kind, (group, scope, plural, singular, short) in EXPECTED_NAMES.items():
        spec = crds[kind]["spec"]
        assert (spec["group"], spec["scope"], spec["names"]["plural"], spec["names"]["singular"],
                spec["names"]["shortNames"], spec["names"]["categories"]) == \
            (group, scope, plural, singular, short, ["gpustack"]), kind
        assert crds[kind]["metadata"]["name"] == f"{plural}.{group}"
        (version,) = spec["versions"]
        assert version["name"] == "v1" and version["served"] and version["storage"]
        if kind != "InstanceTypeFlavor":
            assert version["subresources"] == {"status": {}}, kind
        if kind in EXPECTED_COLUMNS:
            got = [(c["name"], c["jsonPath"], c["type"], c.get("priority", 0))
                   for c in version["additionalPrinterColumns"]]
            assert got == EXPECTED_COLUMNS[kind], kind


def test_our_crds_declare_no_cel_rules_and_preserve_nothing():
    # Value rules with spec-defined messages belong to the webhooks (docs/reference/crds.md "CRD fields").
    text = "".join(p.read_text() for p in sorted((ROOT / "crds").glob("*.yaml")))
    assert "x-kubernetes-validations" not in text
    assert "x-kubernetes-preserve-unknown-fields" not in text
    assert all(yaml.safe_load(p.read_text()) for p in (ROOT / "crds").glob("*.yaml"))


def test_conversion_webhook_is_replaced_by_strategy_none():
    from testing.localcluster.crds import _strip_conversion_webhook
    crd = {"spec": {"conversion": {"strategy": "Webhook", "webhook": {"clientConfig": {
        "service": {"namespace": "system", "name": "webhook-service", "path": "/convert"}}}}}}
    assert _strip_conversion_webhook(crd)["spec"]["conversion"] == {"strategy": "None"}
    plain = {"spec": {"group": "g"}}
    assert _strip_conversion_webhook(plain) == {"spec": {"group": "g"}}


def test_bad_crd_file_is_named(tmp_path):
    from testing.localcluster import LocalClusterError
    (tmp_path / "a.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    with pytest.raises(LocalClusterError, match=r"a\.yaml: expected CustomResourceDefinition, found kind 'ConfigMap'"):
        our_crds(tmp_path)
    (tmp_path / "a.yaml").write_text("kind: [unclosed\n")
    with pytest.raises(LocalClusterError, match=r"a\.yaml: not valid YAML"):
        our_crds(tmp_path)
