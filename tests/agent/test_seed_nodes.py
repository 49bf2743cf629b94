"""The recorded seed nodes reproduce the seed's NodeFeatures, Node labels/annotations and Devices
(docs/agent.md "Labels, annotations and NodeFeatures" and "The Devices object and its ledger" and "Capacity and fit labels"), against tests/fixtures/seed/common and /work/shared/seed."""
from __future__ import annotations

import pytest

from tests.agent.conftest import fixture_object, seed_object

SEED_NODES = ["node-cpu", "node-a10g", "node-t4-a", "node-t4-b"]


def _node_labels(plan, node) -> dict:
    """Labels the Node ends with: kubelet's os/arch plus the union of the NodeFeatures (NFD merge)."""
    labels = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
    labels.update(plan.worker["spec"]["labels"])
    if plan.device_manager:
        labels.update(plan.device_manager["spec"]["labels"])
    return labels


def test_node_a10g_labels_match_the_shared_seed_node(plan):
    seed = seed_object("step1-node-a10g.yaml")
    labels = _node_labels(plan("node-a10g"), "node-a10g")
    assert len(seed["metadata"]["labels"]) == 16
    assert labels == seed["metadata"]["labels"]


def test_node_a10g_worker_nodefeature_matches_the_shared_seed(plan):
    seed = seed_object("step2-nodefeature-worker-node-a10g.yaml")
    worker = plan("node-a10g").worker
    assert worker["metadata"]["name"] == seed["metadata"]["name"]
    assert worker["metadata"]["namespace"] == seed["metadata"]["namespace"]
    assert worker["metadata"]["labels"] == seed["metadata"]["labels"]
    assert worker["spec"] == seed["spec"]


def test_node_a10g_devices_matches_the_shared_seed(plan):
    seed = seed_object("step1-devices-node-a10g.yaml")
    devices = plan("node-a10g", node_labels={"gpustack.ai/managed": "true"}).devices
    assert devices["apiVersion"] == seed["apiVersion"] and devices["kind"] == seed["kind"]
    assert devices["metadata"]["name"] == seed["metadata"]["name"]
    assert devices["metadata"]["labels"] == seed["metadata"]["labels"]
    assert devices["status"] == seed["status"]


@pytest.mark.parametrize("node", SEED_NODES)
def test_nodefeatures_match_the_fixtures(plan, node):
    p = plan(node)
    want = fixture_object("nodefeatures.yaml", f"{node}-gpustack-worker")
    assert p.worker["metadata"]["labels"] == want["metadata"]["labels"]
    assert p.worker["spec"] == want["spec"]
    if node == "node-cpu":
        assert p.device_manager is None
        with pytest.raises(KeyError):
            fixture_object("nodefeatures.yaml", "node-cpu-gpustack-device-manager")
    else:
        want = fixture_object("nodefeatures.yaml", f"{node}-gpustack-device-manager")
        assert p.device_manager["metadata"]["labels"] == want["metadata"]["labels"]
        assert p.device_manager["spec"] == want["spec"]


@pytest.mark.parametrize("node", SEED_NODES)
def test_node_labels_and_annotations_match_the_fixtures(plan, node):
    p = plan(node)
    want = fixture_object("nodes.yaml", node)
    labels = {k: v for k, v in want["metadata"]["labels"].items() if k != "kubernetes.io/hostname"}
    assert _node_labels(p, node) == labels
    assert p.node_patch["metadata"]["annotations"] == want["metadata"]["annotations"]


@pytest.mark.parametrize("node", SEED_NODES)
def test_devices_match_the_fixtures_field_by_field(plan, node):
    p = plan(node, node_labels={"gpustack.ai/managed": "true"})
    if node == "node-cpu":
        assert p.devices is None
        return
    want = fixture_object("devices.yaml", node)
    got = p.devices
    assert got["metadata"]["labels"] == want["metadata"]["labels"]
    assert len(got["spec"]["groups"]) == len(want["spec"]["groups"])
    for g_got, g_want in zip(got["spec"]["groups"], want["spec"]["groups"]):
        for field in ("id", "manufacturer", "name", "memory", "cores", "driverVersion", "runtimeVersion",
                      "computeCapability", "family"):
            assert g_got[field] == g_want[field], field
        assert g_got["accelerators"] == g_want["accelerators"]
    assert got["status"] == want["status"]
    assert got["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": node, "uid": f"uid-{node}", "controller": True}]


def test_node_t4_b_labels_as_spec_lists_them(plan):
    p = plan("node-t4-b")
    assert {**p.worker["spec"]["labels"], **p.device_manager["spec"]["labels"]} == {
        "gpustack.ai/managed": "true",
        "general.feature.gpustack.ai/intel": "true",
        "general.feature.gpustack.ai/intel-xeon-platinum-8259cl": "true",
        "general.feature.gpustack.ai/intel-xeon-platinum-8259cl.count": "48",
        "acceleratable.feature.gpustack.ai/nvidia": "true",
        "acceleratable.feature.gpustack.ai/nvidia-tesla-t4": "true",
        "acceleratable.feature.gpustack.ai/nvidia-tesla-t4.count": "4",
        "acceleratable.feature.gpustack.ai/nvidia-tesla-t4.memory": "16Gi",
        "acceleratable.feature.gpustack.ai/nvidia-tesla-t4.cores": "2560",
        "acceleratable.feature.gpustack.ai/nvidia-tesla-t4.family": "Turing",
        "acceleratable.feature.gpustack.ai/nvidia-tesla-t4.product": "Tesla-T4",
        "acceleratable.feature.gpustack.ai/nvidia-tesla-t4.comcap": "7.5",
        "acceleratable.feature.gpustack.ai/nvidia.driver-version": "580.159.03",
        "acceleratable.feature.gpustack.ai/nvidia.runtime-version": "13.0",
    }


def test_node_cpu_labels_as_spec_lists_them(plan):
    p = plan("node-cpu")
    assert p.worker["spec"]["labels"] == {
        "gpustack.ai/managed": "true", "general.feature.gpustack.ai/amd": "true",
        "general.feature.gpustack.ai/amd-epyc-7r13": "true", "general.feature.gpustack.ai/amd-epyc-7r13.count": "16"}
    assert p.devices is None and p.device_manager is None


@pytest.mark.parametrize("node, values", [
    ("node-a10g", ["1600k", "12800", "100", "24576", "0"]),
    ("node-t4-b", ["6400k", "51200", "400", "65536", "0"]),
])
def test_seed_node_capacity_keys(plan, node, values):
    keys = ["nvidia.com/gpu.sliced.units", "nvidia.com/gpu.sliced.cores-percentage",
            "nvidia.com/gpu.sliced.memory-percentage", "nvidia.com/gpu.sliced.memory-mib",
            "nvidia.com/gpu.partitioned.units"]
    status = plan(node).node_patch["status"]
    assert status["capacity"] == dict(zip(keys, values))
    assert status["allocatable"] == status["capacity"]


def test_node_cpu_publishes_no_capacity_keys(plan):
    assert "status" not in plan("node-cpu").node_patch


def test_nodefeatures_are_owned_by_the_node(plan):
    p = plan("node-t4-a")
    for nf in (p.worker, p.device_manager):
        assert nf["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Node", "name": "node-t4-a", "uid": "uid-node-t4-a", "controller": True}]
        assert "blockOwnerDeletion" not in nf["metadata"]["ownerReferences"][0]


@pytest.mark.parametrize("node", SEED_NODES)
def test_node_capacity_matches_the_fixtures(plan, node):
    want = fixture_object("nodes.yaml", node)["status"]
    got = plan(node).node_patch.get("status", {"capacity": {}, "allocatable": {}})
    for part in ("capacity", "allocatable"):
        assert got[part] == {k: v for k, v in want[part].items() if k != "cpu"}
