"""``plan_workload_checks`` (runtime/controller/workloadchecks.py, docs/concepts/pools-and-flavors.md "The AdmissionCheck `gpustack-node-devices`"): which Workloads
get an answer in one reconcile, the exact apply body, idempotence and the Retry requeue.

Snapshot: the seed cluster (tests/fixtures/seed/step1) with its derived ResourceFlavors and a few
Workloads in the states Kueue leaves them in.
"""
from __future__ import annotations

import copy
from datetime import datetime, timezone

from runtime.controller.workloadchecks import VERB, plan_workload_checks
from runtime.engine.snapshot import Snapshot
from tests.engine.test_admissioncheck import A10G_FLAVOR, SEED, snapshot, workload

NOW = datetime(2026, 11, 29, 21, 0, 0, tzinfo=timezone.utc)
READY_A10G = "node node-a10g can hold the request"
RETRY_A10G = f"no node of flavor {A10G_FLAVOR} can hold the request now"


def _named(wl: dict, name: str) -> dict:
    wl = copy.deepcopy(wl)
    wl["metadata"]["name"] = name
    wl["metadata"]["uid"] = f"uid-{name}"
    return wl


def _with(policy, workloads: list[dict]) -> Snapshot:
    return Snapshot.from_objects(list(snapshot(policy, [SEED])) + workloads)


def test_only_pending_workloads_with_quota_are_answered(policy):
    pending = _named(workload(A10G_FLAVOR, {"nvidia.com/gpu": "1"}), "pending")
    no_quota = _named(pending, "no-quota")
    del no_quota["status"]["admission"]
    answered = _named(workload(A10G_FLAVOR, {"nvidia.com/gpu": "1"}, check_state="Ready"), "answered")
    # answered longer ago than promiseSeconds: it holds nothing any more (docs/concepts/out-of-service.md)
    answered["status"]["admissionChecks"][0]["lastTransitionTime"] = "2026-11-29T20:50:00Z"
    other_check = _named(pending, "other-check")
    other_check["status"]["admissionChecks"][0]["name"] = "dws-prov"
    plan = plan_workload_checks(policy, _with(policy, [pending, no_quota, answered, other_check]), NOW)
    assert [(a.verb, a.kind, a.namespace, a.name) for a in plan.actions] == [(VERB, "Workload", "default", "pending")]
    assert plan.actions[0].body == {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": "pending", "namespace": "default", "uid": "uid-pending"},
        "status": {"admissionChecks": [{"name": "gpustack-node-devices", "state": "Ready", "message": READY_A10G,
                                        "lastTransitionTime": "2026-11-29T21:00:00Z"}]}}
    assert plan.requeue is None and plan.errors == []


def test_second_pass_plans_nothing(policy):
    pending = _named(workload(A10G_FLAVOR, {"nvidia.com/gpu": "1"}), "pending")
    first = plan_workload_checks(policy, _with(policy, [pending]), NOW)
    pending["status"]["admissionChecks"] = first.actions[0].body["status"]["admissionChecks"]
    again = plan_workload_checks(policy, _with(policy, [pending]), NOW)
    assert again.actions == [] and again.requeue is None


def test_retry_is_written_once_then_looked_at_again_after_30s(policy):
    two = _named(workload(A10G_FLAVOR, {"nvidia.com/gpu": "2"}), "two")
    first = plan_workload_checks(policy, _with(policy, [two]), NOW)
    (action,) = first.actions
    assert action.body["status"]["admissionChecks"] == [{
        "name": "gpustack-node-devices", "state": "Retry", "message": RETRY_A10G,
        "lastTransitionTime": "2026-11-29T21:00:00Z", "requeueAfterSeconds": 30}]
    assert first.requeue == 30
    # Kueue (not running) left the quota in place: 10 s later nothing is due, the loop comes back in 20 s
    two["status"]["admissionChecks"] = action.body["status"]["admissionChecks"]
    later = plan_workload_checks(policy, _with(policy, [two]), NOW.replace(second=10))
    assert later.actions == [] and later.requeue == 20 and later.verdicts == {}
    # 30 s on: judged again, still no room -> nothing written, another 30 s
    due = plan_workload_checks(policy, _with(policy, [two]), NOW.replace(second=30))
    assert due.actions == [] and due.requeue == 30 and due.verdicts[("default", "two")].state == "Retry"
    # the request shrinks to what fits (as if capacity freed): Retry -> Ready, a new transition time
    two["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1"
    ready = plan_workload_checks(policy, _with(policy, [two]), NOW.replace(second=31))
    assert ready.actions[0].body["status"]["admissionChecks"] == [{
        "name": "gpustack-node-devices", "state": "Ready", "message": READY_A10G,
        "lastTransitionTime": "2026-11-29T21:00:31Z"}]


def test_unreadable_request_is_reported_not_answered(policy):
    bad = _named(workload(A10G_FLAVOR, {"nvidia.com/gpu": "lots"}), "bad")
    plan = plan_workload_checks(policy, _with(policy, [bad]), NOW)
    assert plan.actions == []
    assert plan.errors == [
        "Workload default/bad podSet 'main' container 'main' resources[nvidia.com/gpu]: quantities must match the "
        "regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': 'lots'"]
