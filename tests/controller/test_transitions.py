"""The state-transition Events (runtime/controller/transitions.py, docs/observability.md "Events"): built from the
pass's derived state and written actions, reasons and messages from rules/pools/derivation.yaml.

Snapshots: the seed cluster (tests/fixtures/seed/common) converged in memory (tests/controller/test_plan.py)
and the Workloads of tests/controller/test_workload_checks_plan.py.
"""
from __future__ import annotations

from datetime import datetime, timezone

from runtime.controller.transitions import TransitionEvents, pool_changes
from runtime.controller.workloadchecks import plan_workload_checks
from runtime.engine.plan import Action, Verb
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


def test_three_retries_on_one_flavor_while_another_holds_the_node_are_a_reported_loop(policy):
    """The looping pinned-demo of seed step 6 before the pin term (tests/engine/test_node_pin.py): Kueue
    gave its Workload the T4 pool's -1d flavor after every eviction; the third Retry in a row is reported
    once, naming -4d and node-t4-b, and counted until the check answers Ready."""
    from runtime.engine import admissioncheck as ac
    from runtime.engine.snapshot import Snapshot
    from runtime.snapshots import load_snapshot
    from tests.seedfiles import FIXTURES
    t4_1d = "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-1d"
    t4_4d = "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-4d"
    pool = "gpustack--nvidia-tesla-t4-linux-amd64"
    objects = list(load_snapshot([FIXTURES / "seed" / "step1"]))
    state = derive(policy, Snapshot.from_objects(objects))
    wl = _named(workload(t4_1d, {"nvidia.com/gpu": "1"}, node_selector={"kubernetes.io/hostname": "node-t4-b"}),
                "pod-pinned-demo")
    wl["status"]["admission"]["clusterQueue"] = pool
    snapshot = Snapshot.from_objects(objects + state.resource_flavors + state.cluster_queues + [wl])
    events = TransitionEvents()
    answer = Action(Verb.APPLY_CHECK_STATE, "Workload", "pod-pinned-demo", "default")
    retry = {("default", "pod-pinned-demo"): ac.check_workload(policy, snapshot, wl)}
    got = [events.loop_event(policy, answer, snapshot, retry, NOW) for _ in range(4)]
    loop = _event("Workload", "kueue.x-k8s.io/v1beta2", "pod-pinned-demo", "default", "uid-pod-pinned-demo",
                  "FlavorRetryLoop",
                  f"admission check gpustack-node-devices answered Retry on flavor {t4_1d} 3 times in a row, while "
                  f"flavor {t4_4d} of pool {pool} holds node node-t4-b, which can take this Workload: its placement "
                  "does not steer Kueue to that flavor (a pin needs the flavors' label keys: docs/concepts/instances.md)")
    loop["type"] = "Warning"
    assert got == [None, None, loop, None]
    assert events.retry_loops == {("default", "pod-pinned-demo"): pool}
    ready = {("default", "pod-pinned-demo"): ac.Verdict("Ready", "node node-t4-b can hold the request")}
    assert events.loop_event(policy, answer, snapshot, ready, NOW) is None
    assert events.retry_loops == {}
