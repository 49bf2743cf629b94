"""`accelpolicy audit` on the seed cluster holding hand-edited and policy-violating objects (docs/audit.md "Reports (`-o yaml`)").

tests/fixtures/audit/seed-cluster/ is the seed after the controller's reconcile plus the edits listed
at the top of its edits.yaml; the audit must report exactly those, with the right result kinds."""
from __future__ import annotations

import json

import yaml
from click.testing import CliRunner

from runtime.cli import main

SNAPSHOT = ["--snapshot", "tests/fixtures/seed/common", "--snapshot", "tests/fixtures/audit/seed-cluster"]
FINDINGS = [
    ("fail", "derived-state", "edited", "ClusterQueue", "", "gpustack--nvidia-a10g-linux-amd64", "spec.resourceGroups",
     'spec.resourceGroups was edited by hand ([0].flavors[0].resources[0].nominalQuota: "1600k" -> "3200k"); '
     "the controller writes the derived value back"),
    ("warn", "host-access", "privileged-grant-setting-off", "Instance", "default", "held-privileged", "spec.privileged",
     'holds privileged mode while "instance-privileged-allowed" is off (a held grant stays legal; a new one is '
     "refused)"),
    ("warn", "derived-state", "stale-type", "InstanceType", "", "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64", "",
     "derived InstanceType gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64 matches no pool of the current "
     "derivation (a stale collapsed type after a change of instance-type-aware-cpu-manufacturer?): delete it or "
     "keep it as a custom type"),
    ("fail", "derived-state", "missing", "LocalQueue", "default", "gpustack-fnv64-6b371caa2da0b799", "",
     "LocalQueue gpustack-fnv64-6b371caa2da0b799 is derived from the nodes but missing from the cluster"),
    ("error", "device-ledger", "InvalidAllocation", "Pod", "default", "bad-ledger", "",
     "allocation annotation device.gpustack.ai/accelerator.allocated is not a JSON object of container -> "
     "allocation groups: Expecting value: line 1 column 1 (char 0)"),
    ("fail", "pods-validation", "one-accelerator-family", "Pod", "default", "two-families", "spec",
     "spec: Forbidden: a Pod may request only one accelerator family, found [exclusive shared]"),
    ("fail", "derived-state", "edited", "ResourceFlavor", "", "gpustack--amd-epyc-7r13-linux-amd64-16c",
     "spec.nodeLabels", 'spec.nodeLabels was edited by hand (+kubernetes.io/hostname="node-cpu"); the controller '
     "writes the derived value back"),
    ("fail", "derived-state", "extra", "ResourceFlavor", "", "gpustack--retired-linux-amd64-8c", "",
     "ResourceFlavor gpustack--retired-linux-amd64-8c carries the derived-object label but no node derives it any more"),
]


def _run(*args):
    return CliRunner().invoke(main, ["audit", *SNAPSHOT, *args])


def test_the_audit_reports_exactly_the_edits_and_violations():
    result = _run("-o", "json")
    assert result.exit_code == 1
    found = [(r["result"], r["policy"], r["rule"], r["resource"]["kind"], r["resource"]["namespace"],
              r["resource"]["name"], r["field"], r["message"]) for r in json.loads(result.output)]
    assert [f for f in found if f[0] not in ("pass", "skip")] == FINDINGS
    # skip: the catalog policy guards writes, not the entries (audit: skip in its rule file)
    assert [(f[1], f[5]) for f in found if f[0] == "skip"] == [
        ("instancetypeflavors-validation", "gpustack--generic"), ("instancetypeflavors-validation", "gpustack--nvidia-a10g"),
        ("instancetypeflavors-validation", "gpustack--nvidia-tesla-t4")]
    # the held grant passes the admission rules (UPDATE onto itself): only the audit check warns
    assert ("pass", "instances-validation", "", "Instance", "default", "held-privileged", "",
            "the object passes the policy") in found
    assert sum(1 for f in found if f[0] == "pass") == 12


def test_table_lists_findings_then_counts():
    result = _run()
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[0].split() == ["RESULT", "POLICY", "RULE", "OBJECT", "FIELD", "MESSAGE"]
    assert len(lines) == 1 + len(FINDINGS) + 1
    assert lines[-1] == "12 pass, 5 fail, 2 warn, 1 error, 3 skip"
    assert lines[6].split()[:5] == ["fail", "pods-validation", "one-accelerator-family", "Pod", "default/two-families"]


def test_yaml_is_openreports_report_per_namespace_and_a_cluster_report():
    result = _run("-o", "yaml")
    docs = [d for d in yaml.safe_load_all(result.output) if d]
    assert [(d["apiVersion"], d["kind"], d["metadata"].get("namespace", "")) for d in docs] == [
        ("openreports.io/v1alpha1", "Report", "default"), ("openreports.io/v1alpha1", "ClusterReport", "")]
    assert docs[0]["summary"] == {"pass": 4, "fail": 2, "warn": 1, "error": 1, "skip": 0}
    assert docs[1]["summary"] == {"pass": 8, "fail": 3, "warn": 1, "error": 0, "skip": 3}
    failing = [r for r in docs[0]["results"] if r["result"] == "fail"]
    assert failing[-1] == {
        "source": "accelpolicy", "policy": "pods-validation", "rule": "one-accelerator-family", "result": "fail",
        "message": "spec: Forbidden: a Pod may request only one accelerator family, found [exclusive shared]",
        "scored": True, "resources": [{"apiVersion": "v1", "kind": "Pod", "name": "two-families", "namespace": "default"}],
        "properties": {"operation": "CREATE", "field": "spec"}}


def test_a_clean_seed_cluster_exits_0(tmp_path):
    """The seed after reconcile, without the edits: nothing fails."""
    text = open("tests/fixtures/audit/seed-cluster/cluster.yaml").read()
    (tmp_path / "cluster.yaml").write_text(text)
    derived = CliRunner().invoke(main, ["derive", "--snapshot", "tests/fixtures/seed/common"])
    (tmp_path / "lq.yaml").write_text(derived.output)
    result = CliRunner().invoke(main, ["audit", "--snapshot", "tests/fixtures/seed/common", "--snapshot", str(tmp_path)])
    assert result.exit_code == 0, result.output
    # the three InstanceTypes pass both InstanceType policies; the catalog policy is not audited
    assert result.output == "6 pass, 0 fail, 0 warn, 0 error, 3 skip\n"


def test_bad_input_exits_2(tmp_path):
    assert CliRunner().invoke(main, ["audit"]).exit_code == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Pod\nmetadata: {}\n")
    result = CliRunner().invoke(main, ["audit", "--snapshot", str(bad)])
    assert result.exit_code == 2
    assert "has no metadata.name" in result.output


def test_a_foreign_nodefeature_is_reported(tmp_path):
    """docs/node-facts-robustness.md "NodeFeature trust (decision 20)": a NodeFeature outside the system namespace claiming our keys for a node is
    ignored by the derivation and reported by the audit, naming it."""
    forged = tmp_path / "forged.yaml"
    forged.write_text(yaml.safe_dump({
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeature",
        "metadata": {"name": "node-t4-b-gpustack-device-manager", "namespace": "team-a",
                     "labels": {"nfd.node.kubernetes.io/node-name": "node-t4-b"}},
        "spec": {"labels": {"acceleratable.feature.gpustack.ai/nvidia-tesla-t4.count": "8"}}}))
    result = _run("-o", "json", "--snapshot", str(forged))
    found = [(r["result"], r["policy"], r["rule"], r["resource"]["kind"], r["message"])
             for r in json.loads(result.output) if r["rule"] == "input"]
    assert found == [("error", "derived-state", "input", "Snapshot",
                      "NodeFeature team-a/node-t4-b-gpustack-device-manager: ignored: only NodeFeatures in namespace "
                      "gpustack-system feed the gpustack.ai/, feature.gpustack.ai/, general.feature.gpustack.ai/, "
                      "acceleratable.feature.gpustack.ai/ keys of Node node-t4-b")]


A2 = ["--snapshot", "tests/fixtures/seed/common", "--snapshot", "tests/fixtures/presets/node-a2"]
A2_POOL = "gpustack--nvidia-a2-linux-amd64"


def _presets_line() -> int:
    from runtime.rules.loader import load_rules
    doc = load_rules().all("PresetTable")[0]
    return doc.source.line_of(("spec", "manufacturers", "nvidia"))


def test_a_product_without_a_preset_names_the_fallback_and_the_preset_file():
    """node-a2's NVIDIA A2 matches no preset of rules/pools/presets.yaml: its derived type silently got the
    fallback unit (4/16Gi); the audit says so, on the InstanceType, naming the file:line to edit."""
    result = CliRunner().invoke(main, ["audit", *A2, "-o", "json"])
    found = [(r["result"], r["policy"], r["rule"], r["resource"]["kind"], r["resource"]["name"], r["field"],
              r["message"]) for r in json.loads(result.output) if r["policy"] == "unit-presets"]
    assert found == [(
        "warn", "unit-presets", "fallback-unit", "InstanceType", A2_POOL, "spec.unitResources",
        "no preset matches nvidia product NVIDIA-A2 (no prefix of manufacturers.nvidia starts its normalized name "
        f"a2): pool {A2_POOL} takes the fallback unit cpu 4, ram 16Gi (tier fallback); give the product its tier "
        f"under manufacturers.nvidia at rules/pools/presets.yaml:{_presets_line()}")]
    seed = CliRunner().invoke(main, ["audit", "--snapshot", "tests/fixtures/seed/common", "-o", "json"])
    assert [r for r in json.loads(seed.output) if r["policy"] == "unit-presets"] == []   # every seed product has one


def test_a_unit_the_administrator_gave_is_not_reported_as_the_fallback(tmp_path):
    held = yaml.safe_load(CliRunner().invoke(main, ["get", "instancetypes", A2_POOL, "-o", "yaml", *A2]).output)
    assert held["spec"]["unitResources"] == {"cpu": "4", "ram": "16Gi"}
    held["spec"]["unitResources"] = {"cpu": "6", "ram": "24Gi"}
    (tmp_path / "type.yaml").write_text(yaml.safe_dump(held))
    result = CliRunner().invoke(main, ["audit", *A2, "--snapshot", str(tmp_path), "-o", "json"])
    assert [r for r in json.loads(result.output) if r["policy"] == "unit-presets"] == []
