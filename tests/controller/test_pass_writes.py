"""A reconcile pass reports its own writes only (docs/availability.md "Availability: admission through faults, and a start that loses nothing", the reliability flake): a write another
thread makes through the same Applier meanwhile (the background audit's Report, a reload's Event) is
in the process's write log and its metrics, not in the pass's ``writes``. The flake: a restarted
controller's first pass logged ``0 actions, 0 deferred, 1 writes`` (the audit's first Report, applied
while the pass ran) and, as nothing it watches changed, no pass followed to log an idle one."""
from __future__ import annotations

import threading
from pathlib import Path

from runtime.controller.reconciler import Controller
from runtime.engine.policy import Policy
from runtime.kube.applier import Applier, Write
from runtime.rules.loader import load_rules
from runtime.snapshots import load_snapshot
from tests.fakeapi import FakeApi

SEED = Path(__file__).resolve().parents[1] / "fixtures" / "seed" / "common"
REPORT = {"apiVersion": "openreports.io/v1alpha1", "kind": "ClusterReport", "metadata": {"name": "accelpolicy-audit"}}


def seed_api() -> FakeApi:
    objects: dict[str, list[dict]] = {}
    for obj in load_snapshot([SEED]):
        objects.setdefault(obj["kind"], []).append(obj)
    return FakeApi(objects)


def test_recording_keeps_the_writes_of_its_threads_only(policy):
    api = FakeApi({})
    applier = Applier(api, policy)
    with applier.recording() as mine:
        applier.apply(REPORT)                                   # this thread: recorded
        other = threading.Thread(target=applier.apply, args=({**REPORT, "metadata": {"name": "other"}},))
        other.start()
        other.join()                                            # another thread: not recorded

        def worker():                                           # a worker thread joining this log
            with applier.recording(mine):
                applier.merge_patch("Node", "node-a10g", {"metadata": {"labels": {"x": "1"}}})
        helper = threading.Thread(target=worker)
        helper.start()
        helper.join()
        with applier.recording() as inner:                       # nested: both logs get the write
            applier.create({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e", "namespace": "default"}})
    applier.apply(REPORT)                                       # after the block: not recorded
    assert mine == [Write("apply", "ClusterReport", "accelpolicy-audit"), Write("patch", "Node", "node-a10g"),
                    Write("create", "Event", "e", "default")]
    assert inner == [Write("create", "Event", "e", "default")]
    assert [w.name for w in applier.writes] == ["accelpolicy-audit", "other", "node-a10g", "e", "accelpolicy-audit"]


def test_a_pass_does_not_count_a_concurrent_audit_write():
    api = seed_api()
    controller = Controller(api, Policy(load_rules()), env={}, fit_coalesce_seconds=0, tune_gc=False)
    controller.cache.start()
    try:
        assert controller.cache.wait_synced(10)
        first = controller.reconcile()
        assert first.writes and first.errors == []
        snapshot = controller._snapshot

        def snapshot_with_an_audit_write():  # the audit thread writes while the pass runs
            audit = threading.Thread(target=controller.applier.apply, args=(REPORT,))
            audit.start()
            audit.join()
            return snapshot()
        controller._snapshot = snapshot_with_an_audit_write
        logged = len(controller.applier.writes)
        idle = controller.reconcile()
        assert (idle.planned, idle.deferred, idle.writes, idle.errors) == ([], [], [], [])
        assert controller.applier.writes[logged:] == [Write("apply", "ClusterReport", "accelpolicy-audit")]
    finally:
        api.stop.set()
        controller.cache.stop()
