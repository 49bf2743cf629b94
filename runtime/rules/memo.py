"""Memo keys and bounded memo tables for pure rule evaluation (docs/webhook-hardening.md "Bounded memory").

Every memo in rule evaluation keys its entries by :func:`fingerprint`, a type-tagged content digest,
and stores them in a :class:`BoundedMemo`, bounded by entries and by bytes. Keys never hold the
objects they describe, so a review's object is freed when the review ends.

Type tags: ``1``, ``True``, ``1.0`` and ``"1"`` get different fingerprints, and so do ``{1: x}``
and ``{"1": x}`` (the digest is taken over the pickle encoding, which records each value's type).
Equal fingerprints mean equal values; the converse does not hold (two equal maps whose keys were
inserted in another order may get two entries), which costs a miss, never a wrong answer.
"""
from __future__ import annotations

import hashlib
import pickle
import sys
from collections import OrderedDict
from typing import Any, Hashable, Optional

_ATOM_TYPES = (str, int, float, bool, type(None))

# The bounds of each memo of rule evaluation: the admission engine's (one per rules generation) and the
# process's CEL memo (one for every expression).
MEMO_ENTRIES = 65536
MEMO_BYTES = 32 * 1024 * 1024


def fingerprint(value: Any) -> Optional[bytes]:
    """A 16-byte type-tagged digest of a JSON-shaped value; None when the value cannot be encoded
    (an unpicklable leaf, or nesting deeper than the interpreter's recursion limit): evaluate
    without the memo then."""
    try:
        blob = pickle.dumps(value, protocol=5)
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError, ValueError):
        return None
    return hashlib.blake2b(blob, digest_size=16).digest()


def size_of(value: Any) -> int:
    """Approximate bytes a memoised result holds: its pickle length (atoms: ``sys.getsizeof``)."""
    if type(value) in _ATOM_TYPES:
        return sys.getsizeof(value)
    try:
        return len(pickle.dumps(value, protocol=5))
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError, ValueError):
        return sys.maxsize


class BoundedMemo:
    """A least-recently-used table bounded by ``max_entries`` and ``max_bytes`` (the sum of
    :func:`size_of` of the values plus a fixed per-entry overhead). A value larger than a quarter of
    ``max_bytes`` is not kept. Not thread-safe: callers serialise access (rule evaluation does)."""

    ENTRY_OVERHEAD = 200  # key tuple, digest bytes and the table's own slot, roughly

    def __init__(self, max_entries: int, max_bytes: int):
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bytes = 0
        self._table: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._table)

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The value stored under ``key`` (marked recently used), or ``default``."""
        hit = self._table.get(key)
        if hit is None:
            return default
        self._table.move_to_end(key)
        return hit[0]

    def put(self, key: Hashable, value: Any) -> None:
        """Store ``value`` under ``key``, evicting the least recently used entries to stay in bounds."""
        size = size_of(value) + self.ENTRY_OVERHEAD
        if size > self.max_bytes // 4:
            return
        old = self._table.pop(key, None)
        if old is not None:
            self.bytes -= old[1]
        self._table[key] = (value, size)
        self.bytes += size
        while len(self._table) > self.max_entries or self.bytes > self.max_bytes:
            _, (_, dropped) = self._table.popitem(last=False)
            self.bytes -= dropped

    def clear(self) -> None:
        """Drop every entry."""
        self._table.clear()
        self.bytes = 0
