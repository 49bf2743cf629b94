"""Flavor identity never follows health (decision 26, docs/concepts/pools-and-flavors.md "Quota follows the
usable accelerators"): one lost accelerator of a 4-card or an 8-card node leaves the node's
``<aKey>.count`` label, its Devices labels and so its ResourceFlavor's name as they were; only the four
views, the ledger and the ClusterQueue's quota move.

Each case runs the agent's plan (recorded facts, one device lost) and feeds what it would write (the
device-manager NodeFeature, the Devices object) to the controller's derivation next to the seed cluster.
"""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

from runtime.engine.devices.agentplan import plan_node
from runtime.engine.pools import derive
from runtime.engine.snapshot import Snapshot
from runtime.snapshots import load_snapshot
from tests.agent.conftest import facts, seed_node

SEED = [Path("tests/fixtures/seed/common")]
T4 = "acceleratable.feature.gpustack.ai/nvidia-tesla-t4"
T4_POOL = "gpustack--nvidia-tesla-t4-linux-amd64"
T4_4D = "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-4d"
H100 = "acceleratable.feature.gpustack.ai/nvidia-h100-80gb-hbm3"


def _lost(stem: str, index: int):
    f = facts(stem)
    f.accelerators[index].healthy = False
    return f


def _cluster_with(policy, defaults, stem: str, lost_index: int | None, cpu: str | None = None) -> tuple:
    """(the agent's plan, the derived state) of the seed cluster with node ``stem``'s NodeFeature and Devices
    replaced by what its agent writes when accelerator ``lost_index`` is lost (None: none lost)."""
    f = facts(stem) if lost_index is None else _lost(stem, lost_index)
    node = seed_node(f.node, cpu=cpu, labels={"gpustack.ai/managed": "true"})
    plan = plan_node(policy, f, node, defaults)
    objects = [copy.deepcopy(o) for o in load_snapshot(SEED)]
    names = {plan.device_manager["metadata"]["name"], plan.worker["metadata"]["name"]}
    objects = [o for o in objects if not (o["kind"] == "NodeFeature" and o["metadata"]["name"] in names)
               and not (o["kind"] in ("Devices", "Node") and o["metadata"]["name"] == f.node)]
    objects += [plan.worker, plan.device_manager, plan.devices, node]
    return plan, derive(policy, Snapshot.from_objects(objects))


def _flavors(state) -> list[str]:
    return sorted(f["metadata"]["name"] for f in state.resource_flavors)


def _quota(state, queue: str) -> dict[str, str]:
    q = next(q for q in state.cluster_queues if q["metadata"]["name"] == queue)
    return {f["name"]: f["resources"][0]["nominalQuota"] for g in q["spec"]["resourceGroups"] for f in g["flavors"]}


def _status(state, name: str) -> dict:
    return next(it for it in state.instance_types if it["metadata"]["name"] == name)["status"]


def test_one_lost_t4_of_a_four_card_node_keeps_its_count_label_and_flavor(policy, defaults):
    _, before = _cluster_with(policy, defaults, "node-t4-b", None)
    plan, after = _cluster_with(policy, defaults, "node-t4-b", 2)
    labels = plan.device_manager["spec"]["labels"]
    assert labels[f"{T4}.count"] == "4"           # installed, not healthy: decision 26
    assert plan.devices["metadata"]["labels"][T4] == "true"
    assert _flavors(after) == _flavors(before)
    assert T4_4D in _flavors(after)
    assert _quota(after, T4_POOL) == {"gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-1d": "1600k",
                                      T4_4D: "4800k"}
    assert _status(before, T4_POOL)["accelerator"]["capacity"] == "5"
    assert _status(after, T4_POOL)["accelerator"]["capacity"] == "4"
    # the ledger leaves the lost one out
    assert [a["index"] for a in plan.devices["status"]["groups"][0]["accelerators"]] == [0, 1, 3]


def test_one_lost_h100_of_an_eight_card_node_keeps_its_count_label_and_flavor(policy, defaults):
    plan, state = _cluster_with(policy, defaults, "node-h100-mig-off", 5, cpu="224")
    assert plan.device_manager["spec"]["labels"][f"{H100}.count"] == "8"
    flavor = [n for n in _flavors(state) if "nvidia-h100" in n]
    assert flavor == ["gpustack--intel-xeon-platinum-8480--nvidia-h100-80gb-hbm3-linux-amd64-8d"]
    assert _quota(state, "gpustack--nvidia-h100-80gb-hbm3-linux-amd64") == {flavor[0]: "11200k"}
    assert _status(state, "gpustack--nvidia-h100-80gb-hbm3-linux-amd64")["accelerator"]["capacity"] == "7"


@pytest.mark.parametrize("stem, key", [("node-t4-b", T4), ("node-h100-mig-off", H100)])
def test_a_group_with_every_accelerator_lost_keeps_its_labels(policy, defaults, stem, key):
    f = facts(stem)
    for acc in f.accelerators:
        acc.healthy = False
    plan = plan_node(policy, f, seed_node(f.node, cpu="224" if "h100" in stem else None), defaults)
    assert plan.device_manager["spec"]["labels"][f"{key}.count"] == str(len(f.accelerators))
    assert plan.devices["metadata"]["labels"][key] == "true"
    assert plan.devices["status"]["groups"][0]["accelerators"] == []
    assert policy.key("cpuOnly") not in plan.worker["spec"]["labels"]
