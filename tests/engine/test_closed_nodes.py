"""Cordoned and tainted nodes (docs/concepts/out-of-service.md "Cordoned and tainted nodes"), offline on the
seed cluster (tests/fixtures/seed/step1): a closed node keeps its flavor, capacity and quota, offers nothing
as remaining or once-max in any view, and the node-devices check answers Retry naming it; uncordoned, the
seed rows come back. Which taints count is rules/pools/queues.yaml ``closedNodes``.
"""
from __future__ import annotations

import copy

import pytest

from runtime.engine import admissioncheck as ac
from runtime.engine.policy import Policy
from runtime.engine.pools import derive
from runtime.engine.pools.closednodes import closed_reason, tolerates
from runtime.engine.snapshot import Snapshot
from runtime.snapshots import load_snapshot
from tests.engine.test_admissioncheck import SEED, T4_4D, T4B, snapshot, workload

T4_POOL = "gpustack--nvidia-tesla-t4-linux-amd64"
T4_1D = "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-1d"
HOSTNAME = "kubernetes.io/hostname"
CORDONED = "node node-t4-b is cordoned"


def _edited(edit) -> list[dict]:
    objects = [copy.deepcopy(o) for o in load_snapshot([SEED])]
    for obj in objects:
        if obj["kind"] == "Node" and obj["metadata"]["name"] == "node-t4-b":
            edit(obj)
    return objects


def _cordon(node: dict) -> None:
    node.setdefault("spec", {})["unschedulable"] = True
    node["spec"]["taints"] = [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule",
                               "timeAdded": "2026-11-29T21:00:00Z"}]


def _taint(effect: str, key: str = "maintenance.example.com/drain", value: str = "gpu"):
    def edit(node: dict) -> None:
        node.setdefault("spec", {})["taints"] = [{"key": key, "value": value, "effect": effect}]
    return edit


def _t4(policy, objects) -> tuple[dict, dict]:
    state = derive(policy, Snapshot.from_objects(objects))
    it = next(t for t in state.instance_types if t["metadata"]["name"] == T4_POOL)
    queue = next(q for q in state.cluster_queues if q["metadata"]["name"] == T4_POOL)
    quota = {f["name"]: f["resources"][0]["nominalQuota"] for g in queue["spec"]["resourceGroups"]
             for f in g["flavors"]}
    return it["status"], quota


def test_a_cordoned_nodes_free_accelerators_are_not_offered_as_remaining(policy):
    seed_status, seed_quota = _t4(policy, _edited(lambda n: None))
    assert seed_status["summary"]["accelerator"] == "4/5 40/50 100/500 0/0"
    status, quota = _t4(policy, _edited(_cordon))
    # node-t4-a's one T4 is all that is offered; node-t4-b's four stay capacity
    assert status["summary"]["accelerator"] == "1/1 10/10 100/100 0/0"
    assert status["accelerator"] == {"capacity": "5", "onceMaxRequest": "1", "remaining": "1"}
    assert status["acceleratorShared"] == {"capacity": "50", "onceMaxRequest": "10", "remaining": "10"}
    assert status["acceleratorSliced"] == {"capacity": "500", "onceMaxRequest": "100", "remaining": "100"}
    assert quota == seed_quota == {T4_1D: "1600k", T4_4D: "6400k"}   # the cordon keeps the quota


def test_uncordon_gives_the_seed_rows_back(policy):
    def uncordon(node: dict) -> None:
        _cordon(node)
        node["spec"] = {}
    assert _t4(policy, _edited(uncordon)) == _t4(policy, _edited(lambda n: None))


@pytest.mark.parametrize("effect, closed", [("NoSchedule", True), ("NoExecute", True), ("PreferNoSchedule", False)])
def test_which_taints_close_a_node_is_rules_data(policy, effect, closed):
    status, _ = _t4(policy, _edited(_taint(effect)))
    assert status["summary"]["accelerator"] == ("1/1 10/10 100/100 0/0" if closed else "4/5 40/50 100/500 0/0")


def test_a_taint_the_rules_tolerate_closes_nothing(policy):
    from runtime.rules.loader import load_rules
    tolerant = Policy(load_rules())
    tolerant.queues.closedNodes.tolerations.append({"key": "maintenance.example.com/drain", "operator": "Exists"})
    status, _ = _t4(tolerant, _edited(_taint("NoSchedule")))
    assert status["summary"]["accelerator"] == "4/5 40/50 100/500 0/0"


def test_toleration_matching_follows_the_pod_api():
    taint = {"key": "k", "value": "v", "effect": "NoSchedule"}
    assert tolerates({"operator": "Exists"}, taint)
    assert tolerates({"key": "k", "operator": "Exists"}, taint)
    assert tolerates({"key": "k", "value": "v"}, taint)
    assert tolerates({"key": "k", "value": "v", "effect": "NoSchedule"}, taint)
    assert not tolerates({"key": "k", "value": "w"}, taint)
    assert not tolerates({"key": "k", "operator": "Exists", "effect": "NoExecute"}, taint)
    assert not tolerates({"key": "other", "operator": "Exists"}, taint)
    assert not tolerates({"value": "v"}, taint)   # an empty key needs Exists


def test_closed_reason_words(policy):
    node = _edited(_cordon)
    (t4b,) = [o for o in node if o["kind"] == "Node" and o["metadata"]["name"] == "node-t4-b"]
    assert closed_reason(policy, t4b) == CORDONED
    assert closed_reason(policy, t4b, [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
                                        "effect": "NoSchedule"}]) is None
    (tainted,) = [o for o in _edited(_taint("NoExecute")) if o["kind"] == "Node" and o["metadata"]["name"] == "node-t4-b"]
    assert closed_reason(policy, tainted) == "node node-t4-b has the taint maintenance.example.com/drain=gpu:NoExecute"


def _check(policy, edit, wl: dict) -> ac.Verdict:
    def edit_all(objects):
        for obj in objects:
            if obj["kind"] == "Node" and obj["metadata"]["name"] == "node-t4-b":
                edit(obj)
    return ac.check_workload(policy, snapshot(policy, [SEED], edit_all), wl)


def test_the_check_answers_retry_naming_the_cordoned_node(policy):
    two = workload(T4_4D, {"nvidia.com/gpu": "2"}, node_selector={HOSTNAME: "node-t4-b"})
    assert _check(policy, lambda n: None, two).state == "Ready"
    verdict = _check(policy, _cordon, two)
    assert (verdict.state, verdict.message) == (
        "Retry", f"no node of flavor {T4_4D} can hold the request now: {CORDONED}")
    assert verdict.requeue_after_seconds == 30


def test_a_workload_tolerating_the_cordon_is_placed_on_the_node(policy):
    two = workload(T4_4D, {"nvidia.com/gpu": "2"}, node_selector={HOSTNAME: "node-t4-b"})
    two["spec"]["podSets"][0]["template"]["spec"]["tolerations"] = [
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]
    verdict = _check(policy, _cordon, two)
    assert verdict.state == "Ready" and verdict.placements == (ac.Placement("main", "node-t4-b", tuple(T4B[:2])),)
