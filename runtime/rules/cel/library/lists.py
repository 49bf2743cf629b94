"""Custom CEL functions on lists and maps: the spellings of the rules' messages, lookup tables, paths
into objects (docs/rule-authoring.md "Run-time budget" prices them).

Pure functions on CEL values. ``flatten`` and ``join`` build results that can be far longer than
their arguments: each declares how long before it runs (``ahead``), so a budget refuses an overlong
one without building it.
"""
from __future__ import annotations

from typing import Any

from celpy import celtypes

from runtime.model import normalize
from runtime.rules.cel.library.declare import cel_function
from runtime.rules.cel.values import json_of, to_cel

_SIZED = (str, bytes, list, dict)


def _flatten_size(items: Any, *_: Any) -> tuple[bool, int]:
    return True, sum(len(sub) for sub in items if isinstance(sub, _SIZED))


def _join_size(items: Any, sep: Any = "", *_: Any) -> tuple[bool, int]:
    texts = [len(item) for item in items if isinstance(item, str)]
    return False, sum(texts) + len(str(sep)) * max(len(items) - 1, 0)


@cel_function(("list",), "list<string>", "arg0", "sort")
def sortedUnique(items) -> celtypes.ListType:  # noqa: N802
    """Sorted, de-duplicated list of strings (families, profiles in messages)."""
    return to_cel(normalize.sorted_unique(str(i) for i in items))


@cel_function(("list", "string"), "string", None, 1, ahead=_join_size)
def join(items, sep) -> celtypes.StringType:
    """Items joined by ``sep`` (`[a b]` spellings in messages)."""
    return celtypes.StringType(str(sep).join(str(json_of(i)) for i in items))


@cel_function(("list",), "list", None, 1, ahead=_flatten_size)
def flatten(items) -> celtypes.ListType:
    """A list of lists -> one list, in order."""
    return celtypes.ListType([x for sub in items for x in sub])


@cel_function(("list", "dyn"), "dyn", None, 1)
def maxOf(items, default) -> Any:  # noqa: N802
    """The largest element of ``items``, or ``default`` when empty."""
    return max(items) if len(items) else default


@cel_function(("list", "dyn"), "dyn", None, 1)
def minOf(items, default) -> Any:  # noqa: N802
    """The smallest element of ``items``, or ``default`` when empty."""
    return min(items) if len(items) else default


@cel_function(("list",), "list", "arg0", 1)
def indexed(items) -> celtypes.ListType:
    """``[{'i': 0, 'v': x0}, ...]``: a list with its indexes (field paths need them)."""
    return celtypes.ListType([celtypes.MapType({celtypes.StringType("i"): celtypes.IntType(i),
                                                celtypes.StringType("v"): v}) for i, v in enumerate(items)])


@cel_function(("list",), "list<int>", "arg0", 1)
def firstIndex(keys) -> celtypes.ListType:  # noqa: N802
    """For each element of ``keys``, the index of the first element equal to it (its own index when
    it is the first): duplicate detection in one linear pass (an Instance's mount paths)."""
    first: dict = {}
    return celtypes.ListType([celtypes.IntType(first.setdefault(k, i)) for i, k in enumerate(keys)])


@cel_function(("list", "list"), "map", "arg0", 1)
def groupBy(keys, values) -> celtypes.MapType:  # noqa: N802
    """``{key: [values whose key it is, in order]}`` for two lists of equal length: a lookup table
    built once, so a rule compares each item with its matches instead of with every item."""
    if len(keys) != len(values):
        raise ValueError(f"groupBy: {len(keys)} keys for {len(values)} values")
    groups: dict = {}
    for k, v in zip(keys, values):
        groups.setdefault(k, []).append(v)
    return celtypes.MapType({k: celtypes.ListType(v) for k, v in groups.items()})


@cel_function(("dyn",), "bool", 1, 0)
def isEmpty(value) -> celtypes.BoolType:  # noqa: N802
    """True for null, '', 0, false, an empty list or an empty map (Go's zero values)."""
    if value is None:
        return celtypes.BoolType(True)
    if isinstance(value, (str, list, dict)):
        return celtypes.BoolType(len(value) == 0)
    return celtypes.BoolType(not value)


@cel_function(("dyn", "list", "dyn"), "dyn", None, 0)
def dig(value, path, default) -> Any:
    """``value[p0][p1]...`` following map keys and list indexes; ``default`` where the path ends."""
    cur = value
    for seg in path:
        if isinstance(cur, celtypes.MapType) and seg in cur:
            cur = cur[seg]
        elif isinstance(cur, celtypes.ListType) and isinstance(seg, int) and 0 <= int(seg) < len(cur):
            cur = cur[int(seg)]
        else:
            return default
    return default if cur is None else cur
