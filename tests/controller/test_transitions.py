"""The state-transition Events (runtime/controller/transitions.py, issue 14 item 3): built from the
pass's derived state and written actions, reasons and messages from rules/pools/derivation.yaml.

Snapshots: the seed cluster (tests/fixtures/seed/common) converged in memory (tests/controller/test_plan.py)
and the Workloads of tests/controller/test_workload_checks_plan.py.
"""
from __future__ import annotations

from datetime import datetime, timezone

from runtime.controller.plan import Action, Verb
from runtime.controller.transitions import TransitionEvents, pool_changes
from runtime.controller.workloadchecks import plan_workload_checks
from runtime.engine.pools.derive import derive
from tests.controller.test_plan import A10G_CPU_FLAVOR, A10G_FLAVOR, MemCluster, _unmanage, common_objects, converge
from tests.controller.test_workload_checks_plan import NOW, RETRY_A10G, _named, _with
from tests.engine.test_admissioncheck import workload

A10G_TYPE = "gpustack--nvidia-a10g-linux-amd64"
STAMP = "66170938d3400"  # NOW (2026-11-29T21:00:00Z) in microseconds, hex: unique Event names


def _event(kind, api, name, namespace, uid, reason, message):
    return {"apiVersion": "v1", "kind": "Event", "type": "Normal", "reason": reason, "message": message,
            "metadata": {"namespace": namespace or "default", "name": f"{name}.{reason.lower()}.{STAMP}"},
            "involvedObject": {k: v for k, v in (("apiVersion", api), ("kind", kind), ("name", name),
                                                 ("namespace", namespace), ("uid", uid)) if v},
            "source": {"component": "accelpolicy"}, "reportingComponent": "accelpolicy",
            "firstTimestamp": "2026-11-29T21:00:00Z", "lastTimestamp": "2026-11-29T21:00:00Z", "count": 1}


def _pool_events(policy, events: TransitionEvents, cluster: MemCluster) -> list[dict]:
    snapshot = cluster.snapshot()
    return events.pool_events(policy, derive(policy, snapshot, live=True).node_flavors, snapshot, NOW)


def test_pool_changes_lists_left_and_joined_flavors_per_node():
    before = {"a": ["f1", "f2"], "b": ["f1"]}
    after = {"a": ["f2", "f3"], "c": ["f1"]}
    assert pool_changes(before, after) == [("a", ["f1"], ["f3"]), ("b", ["f1"], []), ("c", [], ["f1"])]
    assert pool_changes(after, after) == []


def test_node_leaves_and_rejoins_its_pool_once_per_transition(policy):
    cluster = MemCluster(common_objects())
    converge(policy, cluster)
    events = TransitionEvents()
    assert _pool_events(policy, events, cluster) == []  # the first pass is the baseline
    assert _pool_events(policy, events, cluster) == []
    _unmanage(cluster)
    uid = cluster.objects[("Node", "", "node-a10g")]["metadata"].get("uid")
    flavors = f"{A10G_FLAVOR}, {A10G_CPU_FLAVOR}"  # name order
    assert _pool_events(policy, events, cluster) == [_event(
        "Node", "v1", "node-a10g", None, uid, "NodeLeftPool",
        f"node node-a10g left the pool: no longer contributes to ResourceFlavors {flavors}")]
    assert _pool_events(policy, events, cluster) == []  # still out: no second Event
    nf = cluster.objects[("NodeFeature", "gpustack-system", "node-a10g-gpustack-worker")]
    nf["spec"]["labels"]["gpustack.ai/managed"] = "true"
    assert _pool_events(policy, events, cluster) == [_event(
        "Node", "v1", "node-a10g", None, uid, "NodeJoinedPool",
        f"node node-a10g joined the pool: contributes to ResourceFlavors {flavors}")]


def test_queue_delete_of_a_deleting_type_is_its_draining_event(policy):
    cluster = MemCluster(common_objects())
    converge(policy, cluster)
    delete = Action(Verb.DELETE, "ClusterQueue", A10G_TYPE)
    assert TransitionEvents().after_action(policy, delete, cluster.snapshot(), {}, NOW) is None  # not deleting
    typ = cluster.objects[("InstanceType", "", A10G_TYPE)]
    typ["metadata"]["deletionTimestamp"] = "2026-11-29T20:59:00Z"
    typ["metadata"]["uid"] = "uid-a10g-type"
    assert TransitionEvents().after_action(policy, delete, cluster.snapshot(), {}, NOW) == _event(
        "InstanceType", "worker.gpustack.ai/v1", A10G_TYPE, None, "uid-a10g-type", "InstanceTypeDraining",
        f"InstanceType {A10G_TYPE} is being deleted: its ClusterQueue {A10G_TYPE} drains (HoldAndDrain) "
        "and is deleted")
    patch = Action(Verb.PATCH, "ClusterQueue", A10G_TYPE, body={"spec": {"stopPolicy": "HoldAndDrain"}})
    assert TransitionEvents().after_action(policy, patch, cluster.snapshot(), {}, NOW) is None


def test_retry_answer_is_an_event_on_the_workload_with_the_checks_message(policy):
    two = _named(workload(A10G_FLAVOR, {"nvidia.com/gpu": "2"}), "two")
    one = _named(workload(A10G_FLAVOR, {"nvidia.com/gpu": "1"}), "one")
    snapshot = _with(policy, [two, one])
    checks = plan_workload_checks(policy, snapshot, NOW)
    got = [TransitionEvents().after_action(policy, a, snapshot, checks.verdicts, NOW) for a in checks.actions]
    assert [a.name for a in checks.actions] == ["one", "two"]
    assert got == [None, _event("Workload", "kueue.x-k8s.io/v1beta2", "two", "default", "uid-two",
                                "AdmissionCheckRetry",
                                f"admission check gpustack-node-devices answered Retry: {RETRY_A10G}")]
