"""CRDs are Established and discoverable: short names, the gpustack category, Kueue v1beta2, NFD v1alpha1."""

from __future__ import annotations

import json

import pytest

KUEUE_KINDS = ["resourceflavors", "clusterqueues", "localqueues", "admissionchecks", "workloads"]


def test_api_resources_of_our_groups(kubectl):
    out = kubectl.stdout("api-resources", "--api-group=worker.gpustack.ai", "-o", "wide")
    rows = {ln.split()[0]: ln.split() for ln in out.splitlines()[1:]}
    assert set(rows) == {"devices", "instancepersistentvolumes", "instances", "instancetypeflavors", "instancetypes",
                         "policyexceptions", "acceleratormaintenances"}
    assert rows["acceleratormaintenances"][1:5] == ["accmaint", "worker.gpustack.ai/v1", "false",
                                                    "AcceleratorMaintenance"]
    assert rows["policyexceptions"][1:5] == ["gpex", "worker.gpustack.ai/v1", "true", "PolicyException"]
    assert rows["instancetypes"][1:5] == ["instype", "worker.gpustack.ai/v1", "false", "InstanceType"]
    assert rows["devices"][1:5] == ["devs", "worker.gpustack.ai/v1", "false", "Devices"]
    assert rows["instances"][1:5] == ["inst", "worker.gpustack.ai/v1", "true", "Instance"]
    assert all(r[-1] == "gpustack" for r in rows.values())
    out = kubectl.stdout("api-resources", "--api-group=gpustack.ai", "-o", "wide")
    (row,) = [ln.split() for ln in out.splitlines()[1:]]
    assert row[:5] == ["settings", "set", "gpustack.ai/v1", "true", "Setting"] and row[-1] == "gpustack"


def test_category_lists_our_kinds(kubectl):
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "gpustack.ai/v1", "kind": "Setting",
                                                  "metadata": {"name": "category-check", "namespace": "default"}}))
    names = kubectl.stdout("get", "gpustack", "-A", "-o", "name").split()
    assert "setting.gpustack.ai/category-check" in names
    kubectl("delete", "setting", "category-check", "-n", "default")


@pytest.mark.parametrize("plural", KUEUE_KINDS)
def test_kueue_serves_v1beta2(kubectl, plural):
    crd = json.loads(kubectl.stdout("get", "crd", f"{plural}.kueue.x-k8s.io", "-o", "json"))
    served = {v["name"] for v in crd["spec"]["versions"] if v["served"]}
    assert "v1beta2" in served
    assert crd["spec"].get("conversion", {"strategy": "None"})["strategy"] == "None"
    conds = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conds["Established"] == "True"


def test_nfd_nodefeature_v1alpha1(kubectl):
    crd = json.loads(kubectl.stdout("get", "crd", "nodefeatures.nfd.k8s-sigs.io", "-o", "json"))
    assert [v["name"] for v in crd["spec"]["versions"] if v["served"]] == ["v1alpha1"]
