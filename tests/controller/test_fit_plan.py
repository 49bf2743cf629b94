"""Fit labels in the controller's plan (docs/agent.md "Capacity and fit labels"), on the seed fixtures without a server.

The plan patches a Node's labels only where a fit label is missing, differs or is no longer wanted;
other Node labels are never in the patch. Label keys come from rules/labels.yaml (``fitSliced``,
``fitShared`` prefixes) plus the aKey.
"""
from __future__ import annotations

import pytest

from runtime.engine.plan import plan
from runtime.engine.pools.derive import derive
from tests.controller.test_plan import MemCluster, common_objects, converge

A10G = "nvidia-a10g"
T4 = "nvidia-tesla-t4"
NOW = "2026-01-01T00:00:00Z"


@pytest.fixture()
def keys(policy):
    """aKey -> (sliced key, shared key) from the label catalog."""
    return lambda akey: (f"{policy.prefix('fitSliced')}{akey}", f"{policy.prefix('fitShared')}{akey}")


def fit_patches(policy, cluster: MemCluster) -> dict[str, dict]:
    """Node name -> the labels of its planned fit patch."""
    snapshot = cluster.snapshot()
    actions = plan(policy, derive(policy, snapshot, live=True), snapshot, now=NOW)
    return {a.name: a.body["metadata"]["labels"] for a in actions if (a.verb, a.kind) == ("patch", "Node")}


def node_labels(cluster: MemCluster, name: str) -> dict:
    return cluster.objects[("Node", "", name)]["metadata"]["labels"]


def test_idle_seed_gets_the_spec_table_values(policy, keys):
    cluster = MemCluster(common_objects())
    patches = fit_patches(policy, cluster)
    assert patches["node-a10g"] == dict(zip(keys(A10G), ("1600000", "1")))
    assert patches["node-t4-b"] == dict(zip(keys(T4), ("1600000", "4")))
    assert "node-cpu" not in patches  # no Devices, no fit labels, nothing to remove


def test_patch_touches_fit_labels_only_and_a_second_plan_writes_nothing(policy, keys):
    cluster = MemCluster(common_objects())
    before = dict(node_labels(cluster, "node-a10g"))
    history = converge(policy, cluster)
    assert history[-1] == []
    after = node_labels(cluster, "node-a10g")
    assert {k: v for k, v in after.items() if k not in keys(A10G)} == before
    assert fit_patches(policy, cluster) == {}


def _slice20(cluster: MemCluster) -> None:
    """node-a10g's ledger holding the 20 % slice (docs/agent.md "Capacity and fit labels" table)."""
    acc = cluster.objects[("Devices", "", "node-a10g")]["status"]["groups"][0]["accelerators"][0]
    acc.update(mode=3, allocated=320000, remaining=1280000, allocatedSlices=1)


def test_slice_ledger_moves_the_values(policy, keys):
    cluster = MemCluster(common_objects())
    converge(policy, cluster)
    _slice20(cluster)
    assert fit_patches(policy, cluster) == {"node-a10g": dict(zip(keys(A10G), ("1280000", "0")))}
    converge(policy, cluster)
    assert [node_labels(cluster, "node-a10g")[k] for k in keys(A10G)] == ["1280000", "0"]


def test_only_the_changed_value_is_patched(policy, keys):
    cluster = MemCluster(common_objects())
    converge(policy, cluster)
    node_labels(cluster, "node-a10g")[keys(A10G)[1]] = "7"
    assert fit_patches(policy, cluster) == {"node-a10g": {keys(A10G)[1]: "1"}}


def test_unmanaged_node_loses_its_fit_labels(policy, keys):
    cluster = MemCluster(common_objects())
    converge(policy, cluster)
    nf = cluster.objects[("NodeFeature", "gpustack-system", "node-a10g-gpustack-worker")]
    nf["spec"]["labels"]["gpustack.ai/managed"] = "false"
    assert fit_patches(policy, cluster) == {"node-a10g": {k: None for k in keys(A10G)}}
    converge(policy, cluster)
    assert not set(keys(A10G)) & set(node_labels(cluster, "node-a10g"))


def test_node_without_devices_or_model_loses_stale_labels(policy, keys):
    cluster = MemCluster(common_objects())
    converge(policy, cluster)
    del cluster.objects[("Devices", "", "node-t4-b")]
    stale = f"{policy.prefix('fitShared')}nvidia-gone"
    node_labels(cluster, "node-a10g")[stale] = "3"
    node_labels(cluster, "node-cpu")["team"] = "ml"
    assert fit_patches(policy, cluster) == {"node-t4-b": {k: None for k in keys(T4)},
                                            "node-a10g": {stale: None}}
