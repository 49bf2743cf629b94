"""The controller's garbage collector policy (runtime/controller/gcpolicy.py; docs/performance.md "A pass proportional to what changed") and the
bounded record of passes: what a long-running controller keeps, tried on the process's own collector.

Each test leaves the collector as it found it (thresholds, nothing frozen)."""
from __future__ import annotations

import gc
import threading
from types import SimpleNamespace

import pytest

from runtime.controller import gcpolicy
from runtime.controller.reconciler import KEPT_PASSES, Controller, ReconcileResult


@pytest.fixture
def collector():
    thresholds = gc.get_threshold()
    gc.unfreeze()
    yield
    gcpolicy._saved = None
    gcpolicy._whole = 0
    gc.unfreeze()
    gc.set_threshold(*thresholds)


class _Cycle:
    def __init__(self):
        self.me = self


def _promote(generations: int) -> None:
    """Make the collector run ``generations`` generation-1 collections (the count ``tend`` reads)."""
    for _ in range(generations):
        gc.collect(1)


def test_hold_then_settle_freezes_what_is_alive_and_restores_the_thresholds(collector):
    before = gc.get_threshold()
    assert gcpolicy.hold() is True
    assert gcpolicy.hold() is False   # already held
    assert gc.get_threshold() == (before[0], before[1], gcpolicy.HELD_THRESHOLD)
    kept = [[i] for i in range(1000)]
    assert gcpolicy.tend() is None    # still held: settle() comes first
    frozen = gcpolicy.settle()
    assert frozen > 1000 and _died_since(frozen)
    assert gc.get_threshold() == before
    assert gcpolicy.settle() == 0     # not held any more
    assert len(kept) == 1000


def test_tend_waits_for_enough_promotions_then_freezes_the_survivors_and_collects_young_cycles(collector):
    gcpolicy.hold()
    gcpolicy.settle()
    gc.collect(1)
    assert gc.get_count()[2] < gcpolicy.REFREEZE_AFTER
    assert gcpolicy.tend() is None    # nothing due: no collection, nothing frozen
    survivors = [[i] for i in range(5000)]   # lists: tracked by the collector (atomic-only dicts are not)
    for _ in range(100):
        _Cycle()                      # cyclic garbage among the new objects
    _promote(gcpolicy.REFREEZE_AFTER)
    frozen_before = gc.get_freeze_count()
    what, young, seconds = gcpolicy.tend()
    assert what == "young" and seconds >= 0
    assert young >= 5000 and gc.get_freeze_count() >= frozen_before + 5000
    assert not any(isinstance(o, _Cycle) for o in gc.get_objects())   # collected, not frozen
    assert gc.get_count()[2] == 0 and gcpolicy._added == young
    assert len(survivors) == 5000


def test_tend_collects_everything_once_the_frozen_heap_turned_over(collector):
    gcpolicy.hold()
    base = gcpolicy.settle()
    cycles = [_Cycle() for _ in range(50)]     # frozen while alive ...
    _promote(gcpolicy.REFREEZE_AFTER)
    assert gcpolicy.tend()[0] == "young"
    del cycles                                 # ... then garbage among the frozen: no young collection finds it
    assert len(_frozen_cycles()) == 50
    turnover = [[i] for i in range(int(base * gcpolicy.WHOLE_AFTER_TURNOVER) + 1000)]
    _promote(gcpolicy.REFREEZE_AFTER)
    what, objects, _ = gcpolicy.tend()         # a turnover frozen since settle(): everything collected once
    assert what == "whole" and gcpolicy._added == 0
    assert gcpolicy._whole == objects and _died_since(objects)
    assert _frozen_cycles() == [] and objects > len(turnover)


def _died_since(frozen: int) -> bool:
    """True when the frozen count now is ``frozen`` less at most a few hundred: frozen objects only
    leave (they die; nothing here freezes more), and in a full suite other tests' threads still
    running free some of theirs meanwhile (CI saw 32)."""
    return 0 <= frozen - gc.get_freeze_count() <= 500


def _frozen_cycles() -> list:
    """The _Cycle objects the collector still tracks, frozen ones included."""
    gc.unfreeze()
    try:
        return [o for o in gc.get_objects() if isinstance(o, _Cycle)]
    finally:
        gc.freeze()


class _Caches:
    """What start_caches reads of the watch caches: started once, synced at once."""

    def __init__(self):
        self.started = 0

    def start(self):
        self.started += 1

    def wait_synced(self, timeout):
        return True


def test_a_standby_serving_from_the_caches_is_settled_once_synced_and_held_again_when_it_leads(collector):
    before = gc.get_threshold()
    holder = SimpleNamespace(tune_gc=True, cache=_Caches())
    kept = [[i] for i in range(1000)]
    Controller.start_caches(holder, until_pass=False)   # the webhooks' replica while it waits for the Lease
    assert gcpolicy._saved is None and gc.get_threshold() == before   # full collections on while standing by
    assert gc.get_freeze_count() > len(kept)              # the synced caches frozen
    Controller.start_caches(holder)                       # leading: held until its first pass
    assert gc.get_threshold() == (before[0], before[1], gcpolicy.HELD_THRESHOLD)
    assert holder.cache.started == 2                      # (the cache's own start() is idempotent)


def test_a_term_that_ends_before_its_first_pass_leaves_the_collector_settled(collector):
    before = gc.get_threshold()
    holder = SimpleNamespace(tune_gc=True, cache=_Caches(), _dirty=threading.Event(), fit_writer=None,
                             writer=SimpleNamespace(execute=None), guard=SimpleNamespace(begin=lambda: None),
                             _loop=lambda stop: None)
    Controller.start_caches(holder)                       # leading: held
    assert gcpolicy._saved is not None
    Controller.run(holder, threading.Event())             # the Lease lost before any pass
    assert gcpolicy._saved is None and gc.get_threshold() == before


def test_the_record_of_passes_is_bounded_and_only_the_latest_keeps_its_state():
    holder = SimpleNamespace(reconciles=[])
    states = []
    for i in range(2 * KEPT_PASSES + 1):
        states.append(object())
        Controller._record(holder, ReconcileResult(seconds=float(i), state=states[-1]))
    assert len(holder.reconciles) == KEPT_PASSES
    assert [r.seconds for r in holder.reconciles] == [float(i) for i in range(KEPT_PASSES + 1, 2 * KEPT_PASSES + 1)]
    assert holder.reconciles[-1].state is states[-1]
    assert all(r.state is None for r in holder.reconciles[:-1])
