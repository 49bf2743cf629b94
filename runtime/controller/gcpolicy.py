"""Python's cyclic garbage collector on a large cluster (docs/performance.md "A pass proportional to what
changed").

The controller's heap is mostly long-lived: the watch caches, their snapshot copies and the
incremental derive's memo, about a million tracked objects at 5,000 nodes. A full collection walks
all of them (0.5-1.8 s of CPU at 5,000 nodes, measured with ``gc.callbacks``): several ran while the
caches synced and the first pass derived everything, and one landed now and then in an ordinary pass
(an idle pass of 1.16 s instead of 0.2 s). So:

- :func:`hold` (when the caches start) stops full collections (the generation-2 threshold is raised;
  the young generations are still collected, and with them young cyclic garbage);
- :func:`settle` (after the first pass) moves every object alive then to the permanent generation
  (``gc.freeze()``), which no collection walks again, and restores the thresholds: later full
  collections walk only what came after;
- :func:`tend` (after every later pass, on the loop's thread) keeps that part small. The caches
  replace objects as the cluster changes (6,000 fit label echoes replace 6,000 Nodes); the new ones
  aged into generation 2 unfrozen, and each full collection walked them all: at 10,000 nodes one
  every 2-20 s, 250-370 ms each, landing inside passes (a flip's pass 0.3 -> 0.84 s of CPU;
  docs/performance.md "Fast to start, light to hold"). So once the collector has promoted ``REFREEZE_AFTER``
  batches of survivors since the last full collection, ``tend`` collects what is unfrozen (cyclic garbage
  among the new objects) and freezes the survivors: each walk covers only what came since the last. CPython's
  own full collections stay on (for threads and replicas that run no passes) and walk as little. Cyclic
  garbage among *frozen* objects is never found that way, so once ``tend`` has frozen as many
  objects as the last whole collection left (``WHOLE_AFTER_TURNOVER``: the heap has turned over
  once), it unfreezes, collects everything once and freezes again. At 10,000 nodes a flip every 4 s
  freezes about 11,000 objects a time: a whole collection (0.5-1 s) every few minutes of such churn,
  none while the cluster is quiet. (Counting the frozen population instead walks a million-entry
  list each time: tens of ms (about 60 under py-spy), too much to do after every pass.)

The state is the process's (the garbage collector is); the calls are idempotent.
"""
from __future__ import annotations

import gc
import threading
import time

from loguru import logger

HELD_THRESHOLD = 1 << 30  # generation-2 threshold while held: no full collection
REFREEZE_AFTER = 5  # generation-1 collections since the last full one before tend() collects (CPython's own
# full collection comes after 10: half that, so the loop's, between passes, normally comes first)
# objects frozen since the last whole collection, over its population, before the next
WHOLE_AFTER_TURNOVER = 1.0
_lock = threading.Lock()
_saved: tuple[int, ...] | None = None  # the thresholds before hold(), while held
_whole = 0  # frozen objects after the last whole collection (settle() or tend())
_added = 0  # objects tend() froze since


def hold() -> bool:
    """Stop full collections until :func:`settle`; True when this call held them (not already held)."""
    global _saved
    with _lock:
        if _saved is not None:
            return False
        _saved = gc.get_threshold()
        gc.set_threshold(_saved[0], _saved[1], HELD_THRESHOLD)
        return True


def settle() -> int:
    """When held: freeze every object alive now (``gc.freeze()``) and restore the thresholds; returns
    how many objects are frozen in all (0 when not held: nothing done)."""
    global _saved, _whole, _added
    with _lock:
        if _saved is None:
            return 0
        gc.freeze()
        gc.set_threshold(*_saved)
        _saved = None
        _whole, _added = gc.get_freeze_count(), 0
        return _whole


def tend() -> tuple[str, int, float] | None:
    """After a pass, once settled (see the module docstring): None when nothing was due (or still
    held), else ``(what, objects, seconds)``: ``"young"`` (the unfrozen objects collected, ``objects``
    survivors frozen) or ``"whole"`` (everything collected once and frozen: ``objects`` in all)."""
    global _whole, _added
    with _lock:
        if _saved is not None:
            return None
        if gc.get_count()[2] < REFREEZE_AFTER:
            return None
        t0 = time.perf_counter()
        gc.collect()
        young = len(gc.get_objects())  # the survivors, unfrozen: the few since the last freeze
        gc.freeze()
        _added += young
        if _added < _whole * WHOLE_AFTER_TURNOVER:
            return "young", young, time.perf_counter() - t0
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        _whole, _added = gc.get_freeze_count(), 0  # get_freeze_count walks the whole list: here only
        return "whole", _whole, time.perf_counter() - t0


def after_pass() -> None:
    """What the controller's loop runs after each pass (with ``tune_gc``): :func:`settle` after the
    first, :func:`tend` after each later one; logs what it froze or collected."""
    if frozen := settle():
        logger.info("garbage collector: {} objects of the caches and the first pass frozen", frozen)
    elif (tended := tend()) is not None:
        what, objects, seconds = tended
        if what == "whole":
            logger.info("garbage collector: every object collected once, {} frozen, in {:.3f}s",
                        objects, seconds)
        else:
            logger.debug("garbage collector: the objects since the last freeze collected, {} survivors "
                         "frozen, in {:.3f}s", objects, seconds)
