"""Python's cyclic garbage collector on a large cluster (issue 16).

The controller's heap is mostly long-lived: the watch caches, their snapshot copies and the
incremental derive's memo, about a million tracked objects at 5,000 nodes. A full collection walks
all of them (0.5-1.8 s of CPU at 5,000 nodes, measured with ``gc.callbacks``): several ran while the
caches synced and the first pass derived everything, and one landed now and then in an ordinary pass
(an idle pass of 1.16 s instead of 0.2 s). So:

- :func:`hold` (when the caches start) stops full collections (the generation-2 threshold is raised;
  the young generations are still collected, and with them young cyclic garbage);
- :func:`settle` (after the first pass) moves every object alive then to the permanent generation
  (``gc.freeze()``), which no collection walks again, and restores the thresholds: later full
  collections walk only what came after.

The state is the process's (the garbage collector is); both calls are idempotent.
"""
from __future__ import annotations

import gc
import threading

HELD_THRESHOLD = 1 << 30  # generation-2 threshold while held: no full collection
_lock = threading.Lock()
_saved: tuple[int, ...] | None = None  # the thresholds before hold(), while held


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
    global _saved
    with _lock:
        if _saved is None:
            return 0
        gc.freeze()
        gc.set_threshold(*_saved)
        _saved = None
        return gc.get_freeze_count()
