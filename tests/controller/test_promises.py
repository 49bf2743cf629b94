"""The check counts what it has promised (docs/concepts/out-of-service.md "Promises"): a Workload answered
Ready whose Pod has not started holds its node's accelerators for the next answers, like kube-scheduler's
assumed Pods, until its Pod starts, Kueue lets its quota go, or ``promiseSeconds`` pass.

Snapshot: the seed cluster (tests/fixtures/seed/step1): node-t4-b has four idle T4s.
"""
from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone

from runtime.controller.workloadchecks import plan_workload_checks
from runtime.engine import admissioncheck as ac
from runtime.engine.snapshot import Snapshot
from tests.engine.test_admissioncheck import SEED, T4_4D, snapshot, workload

NOW = datetime(2026, 11, 29, 21, 0, 0, tzinfo=timezone.utc)
PINNED = {"kubernetes.io/hostname": "node-t4-b"}
READY = "node node-t4-b can hold the request"
RETRY = f"no node of flavor {T4_4D} can hold the request now"


def _pinned(name: str, gpus: str = "3", **kw) -> dict:
    wl = copy.deepcopy(workload(T4_4D, {"nvidia.com/gpu": gpus}, node_selector=PINNED, **kw))
    wl["metadata"].update(name=name, uid=f"uid-{name}")
    return wl


def _answered(name: str, at: datetime, pod: str | None = None) -> dict:
    """A Workload the check answered Ready at ``at`` (owned by Pod ``pod`` when given)."""
    wl = _pinned(name, check_state="Ready")
    wl["status"]["admissionChecks"][0].update(message=READY, lastTransitionTime=at.strftime("%Y-%m-%dT%H:%M:%SZ"))
    if pod is not None:
        wl["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": f"uid-{pod}",
                                              "controller": True}]
    return wl


def _pod(name: str, annotated: bool = False) -> dict:
    meta = {"name": name, "namespace": "default", "uid": f"uid-{name}"}
    if annotated:
        meta["annotations"] = {"device.gpustack.ai/accelerator.allocated": "{}"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"nodeName": "node-t4-b"},
            "status": {"phase": "Pending"}}


def _plan(policy, objects: list[dict], now: datetime = NOW):
    return plan_workload_checks(policy, Snapshot.from_objects(list(snapshot(policy, [SEED])) + objects), now)


def _states(plan) -> dict[str, tuple[str, str]]:
    return {name: (v.state, v.message) for (_, name), v in plan.verdicts.items()}


def test_two_pinned_instances_that_do_not_fit_together_get_ready_and_retry(policy):
    plan = _plan(policy, [_pinned("first"), _pinned("second")])
    assert _states(plan) == {"first": ("Ready", READY), "second": ("Retry", RETRY)}


def test_a_ready_answer_of_an_earlier_pass_holds_until_its_pod_starts(policy):
    earlier = _answered("earlier", NOW - timedelta(seconds=20), pod="earlier-pod")
    assert _states(_plan(policy, [earlier, _pod("earlier-pod"), _pinned("next")])) == {"next": ("Retry", RETRY)}
    # its Pod started (the allocation the ledger charges is written): the promise is the ledger's now
    started = [earlier, _pod("earlier-pod", annotated=True), _pinned("next")]
    assert _states(_plan(policy, started)) == {"next": ("Ready", READY)}
    # its Pod is gone: it holds nothing
    assert _states(_plan(policy, [earlier, _pinned("next")])) == {"next": ("Ready", READY)}


def test_a_promise_is_bounded_in_time(policy):
    bound = policy.queues.admissionCheck.promiseSeconds
    young = _answered("young", NOW - timedelta(seconds=bound - 1))
    old = _answered("old", NOW - timedelta(seconds=bound))
    assert _states(_plan(policy, [young, _pinned("next")])) == {"next": ("Retry", RETRY)}
    assert _states(_plan(policy, [old, _pinned("next")])) == {"next": ("Ready", READY)}


def test_an_evicted_or_finished_workload_holds_nothing(policy):
    for kind in ("Evicted", "Finished"):
        gone = _answered("gone", NOW - timedelta(seconds=5))
        gone["status"]["conditions"].append({"type": kind, "status": "True", "reason": kind, "message": "",
                                             "lastTransitionTime": "2026-11-29T20:59:59Z"})
        assert _states(_plan(policy, [gone, _pinned("next")])) == {"next": ("Ready", READY)}, kind


def test_promises_are_charged_oldest_first_and_a_small_one_still_fits(policy):
    first = _answered("first", NOW - timedelta(seconds=30))          # 3 of the 4 T4s
    one = _pinned("one", gpus="1")
    two = _pinned("two", gpus="1")
    assert _states(_plan(policy, [first, one, two])) == {"one": ("Ready", READY), "two": ("Retry", RETRY)}


def test_promised_lists_only_the_waiting_answers(policy):
    waiting = _answered("waiting", NOW - timedelta(seconds=1), pod="p")
    snap = Snapshot.from_objects(list(snapshot(policy, [SEED])) + [waiting, _pod("p"), _pinned("pending")])
    assert [w["metadata"]["name"] for w in ac.promised(policy, snap, NOW)] == ["waiting"]
    assert ac.pod_state(policy, snap, waiting) == "waiting"
