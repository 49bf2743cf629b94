"""The controller's metrics read what the controller publishes (runtime/controller/metrics.py).

The statuses are the engine's own for the seed's step 3 (tests/fixtures/seed/step3-sliced-demo:
sliced-demo's 20 % slice held by node-a10g's ledger), derived offline as the controller derives them live.
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from runtime.controller.metrics import ControllerMetrics, queue_flavors, view_samples
from runtime.engine.pools.derive import derive
from runtime.snapshots import load_snapshot
from tests.seedfiles import FIXTURES

A10G = "gpustack--nvidia-a10g-linux-amd64"
GENERIC = "gpustack--generic-linux-amd64"


def _step3(policy):
    return derive(policy, load_snapshot([FIXTURES / "seed" / "step3-sliced-demo"]))


def test_view_samples_are_the_published_status_numbers(policy):
    types = {it["metadata"]["name"]: it for it in _step3(policy).instance_types}
    a10g = {(view, number): value for view, number, value in view_samples(types[A10G])}
    assert a10g[("sl", "remaining")] == 80 and a10g[("sl", "capacity")] == 100
    assert a10g[("ex", "remaining")] == 0 and a10g[("ex", "capacity")] == 1
    for (view, number), value in a10g.items():  # each number is the status string, never re-derived
        field = {"ex": "accelerator", "sh": "acceleratorShared", "sl": "acceleratorSliced",
                 "pt": "acceleratorPartitioned"}[view]
        key = {"capacity": "capacity", "remaining": "remaining", "once_max_request": "onceMaxRequest"}[number]
        assert str(int(value)) == types[A10G]["status"][field][key]
    generic = {(view, number): value for view, number, value in view_samples(types[GENERIC])}
    assert {view for view, _ in generic} == {"ex", "sh", "sl", "pt", "cpu"}
    assert generic[("cpu", "remaining")] == int(types[GENERIC]["status"]["cpu"]["remaining"])


def test_a_status_number_that_is_not_an_integer_is_left_out():
    it = {"status": {"acceleratorSliced": {"capacity": "100", "remaining": "lots", "onceMaxRequest": "80"},
                     "cpu": "broken"}}
    assert sorted(view_samples(it)) == [("sl", "capacity", 100.0), ("sl", "once_max_request", 80.0)]
    assert list(view_samples({})) == []


def test_flavors_per_cluster_queue(policy):
    queues = {q["metadata"]["name"]: queue_flavors(q) for q in _step3(policy).cluster_queues}
    assert queues == {GENERIC: 4, A10G: 1, "gpustack--nvidia-tesla-t4-linux-amd64": 2}


def test_unbound_registry_exposes_the_families_without_samples():
    metrics = ControllerMetrics(CollectorRegistry())
    text = generate_latest(metrics.registry).decode()
    for name in ("accelpolicy_instancetype_capacity gauge", "accelpolicy_instancetype_remaining gauge",
                 "accelpolicy_instancetype_once_max_request gauge", "accelpolicy_cache_objects gauge",
                 "accelpolicy_watch_restarts_total counter", "accelpolicy_watch_relists_total counter",
                 "accelpolicy_reconcile_seconds histogram", "accelpolicy_api_writes_total counter",
                 "accelpolicy_leader gauge", "accelpolicy_reconcile_errors_total counter"):
        assert f"# TYPE {name}\n" in text


def test_admission_check_answers_and_their_latency_from_quota_reservation(policy):
    from datetime import timedelta

    from runtime.controller.metrics import check_answers
    from runtime.controller.workloadchecks import plan_workload_checks
    from runtime.kube.applier import Write
    from tests.engine.test_admissioncheck import A10G_FLAVOR, NOW, SEED, snapshot, workload

    held = workload(A10G_FLAVOR, {"nvidia.com/gpu": "1"})
    snap = snapshot(policy, [SEED], edit=lambda objects: objects.append(held))
    planned = plan_workload_checks(policy, snap, NOW).actions
    assert [(a.verb, a.name) for a in planned] == [("apply-check-state", "pod-demo-1a2b3")]
    written = [Write("apply-status", "Workload", "pod-demo-1a2b3", "default")]
    later = NOW + timedelta(seconds=2)
    # quota reserved at 20:59:59, answered at 21:00:02: 3 s
    assert check_answers(planned, written, lambda name, ns: held, later) == [("Ready", 3.0)]
    assert check_answers(planned, [], lambda name, ns: held, later) == []  # the write failed: no answer
    assert check_answers(planned, written, lambda name, ns: None, later) == [("Ready", None)]
