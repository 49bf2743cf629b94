"""Writes -> JSONPatch (RFC 6902) in canonical order (docs/reference/controller.md "Pod admission").

A write is ``(path, value)`` with ``path`` a tuple of object keys and list indexes. Applying the
writes to a copy of the object yields the mutated object (copied along the written paths only: the
rest is shared with the object, read-only); the patch is the difference restricted to
the written locations: ``add`` for an absent key (an absent ancestor map is added whole, holding
every write beneath it), ``replace`` for a changed value, nothing when equal. Keys are escaped
(``~`` -> ``~0``, ``/`` -> ``~1``). Operations sort by path, each segment ranked by ``order``
(segment -> rank; ranked strings first, then indexes numerically, then other strings lexically).
"""
from __future__ import annotations

import copy
from typing import Any, Iterable, Mapping, Sequence

Path = tuple


class _Remove:
    """Sentinel write value: remove the key (``remove`` operation when present)."""

    def __repr__(self) -> str:
        return "REMOVE"


REMOVE = _Remove()


def escape(segment: Any) -> str:
    """One JSON-pointer segment: `nvidia.com/gpu` -> `nvidia.com~1gpu`."""
    return str(segment).replace("~", "~0").replace("/", "~1")


def pointer(path: Sequence) -> str:
    """A path tuple as a JSON pointer (`/spec/containers/0/resources`)."""
    return "".join("/" + escape(s) for s in path)


def _sort_key(path: Sequence, order: Mapping[str, int]) -> tuple:
    key = []
    for seg in path:
        if isinstance(seg, int):
            key.append((1, seg, ""))
        elif seg in order:
            key.append((0, order[seg], ""))
        else:
            key.append((2, 0, str(seg)))
    return tuple(key)


def _nest(rest: Sequence, value: Any) -> Any:
    for seg in reversed(rest):
        value = {seg: value}
    return value


def apply_writes(obj: Mapping, writes: Iterable[tuple[Path, Any]],
                 order: Mapping[str, int] | None = None) -> tuple[dict, list[dict]]:
    """Apply ``writes`` to a copy of ``obj``; returns ``(mutated, patch operations)``. ``obj`` is not
    changed; ``mutated`` shares the maps and lists no write reached with it (copying the whole
    object was about 7 % of a slice Pod review).

    Each write walks to its parent (:func:`_walk_to_parent`, which copies the containers on the way
    and adds a missing map whole), then
    sets or removes its last key (:func:`_write_leaf`); the operations come out in ``order``
    (:func:`_render_ops`). Raises ValueError for a path through a non-container or an index out of
    range (a rule bug).
    """
    mutated = dict(obj)
    ops: dict[Path, dict] = {}
    created: set[int] = set()  # ids of maps this patch adds whole
    owned: set[int] = {id(mutated)}  # ids of the containers this call made: the copies and the values written
    for path, value in writes:
        path = tuple(path)
        if not path:
            raise ValueError("a write needs a non-empty path")
        if value is not REMOVE:
            value = copy.deepcopy(value)
            owned.add(id(value))
        reached = _walk_to_parent(mutated, path, value, ops, created, owned)
        if reached is not None:
            _write_leaf(*reached, path, value, ops, created)
    return mutated, _render_ops(ops, order)


def _owned(parent: Any, seg: Any, child: Any, owned: set[int]) -> Any:
    """``parent[seg]``, replaced by a shallow copy first unless this call made it (copy on write)."""
    if id(child) in owned or not isinstance(child, (dict, list)):
        return child
    child = dict(child) if isinstance(child, dict) else list(child)
    parent[seg] = child
    owned.add(id(child))
    return child


def _walk_to_parent(mutated: dict, path: Path, value: Any, ops: dict[Path, dict],
                    created: set[int], owned: set[int]) -> tuple[Any, bool] | None:
    """Walk ``mutated`` to the container of ``path[-1]``, copying each container on the way that
    ``owned`` does not hold; returns ``(parent, inside_new)`` (whether the parent lies in a map this
    patch adds whole), or None when the walk already did the write: a missing map on the way is
    added whole (one ``add`` operation), a removal under a missing map is nothing to do."""
    cur: Any = mutated
    inside_new = False
    for i, seg in enumerate(path[:-1]):
        if isinstance(cur, list):
            if not isinstance(seg, int) or not 0 <= seg < len(cur):
                raise ValueError(f"write {pointer(path)}: index {seg!r} out of range")
            cur = _owned(cur, seg, cur[seg], owned)
            continue
        if not isinstance(cur, dict):
            raise ValueError(f"write {pointer(path)}: {pointer(path[:i])} is not an object")
        nxt = cur.get(seg)
        if nxt is None and value is REMOVE:
            return None
        if nxt is None:
            new = _nest(path[i + 1:], value)
            cur[seg] = new
            created.add(id(new))
            if not inside_new:
                ops[path[: i + 1]] = {"op": "add", "path": path[: i + 1], "value": new}
            return None
        if id(nxt) in created:
            inside_new = True
        cur = nxt if inside_new else _owned(cur, seg, nxt, owned)
    return cur, inside_new


def _write_leaf(cur: Any, inside_new: bool, path: Path, value: Any, ops: dict[Path, dict],
                created: set[int]) -> None:
    """Set (or remove) ``path[-1]`` in its parent ``cur`` and record the ``add``, ``replace`` or
    ``remove`` operation (none inside a map this patch adds whole, none for an unchanged value)."""
    last = path[-1]
    if value is REMOVE:
        if isinstance(cur, dict) and last in cur:
            del cur[last]
            if not inside_new:
                ops[path] = {"op": "remove", "path": path}
        return
    if isinstance(cur, list):
        if not isinstance(last, int) or not 0 <= last < len(cur):
            raise ValueError(f"write {pointer(path)}: index {last!r} out of range")
        old_present, old = True, cur[last]
    elif isinstance(cur, dict):
        old_present, old = last in cur, cur.get(last)
    else:
        raise ValueError(f"write {pointer(path)}: parent is not an object")
    cur[last] = value
    if inside_new:
        return
    if path in ops:
        ops[path]["value"] = value
    elif not old_present:
        ops[path] = {"op": "add", "path": path, "value": value}
        if isinstance(value, (dict, list)):
            created.add(id(value))  # later writes beneath it ride on this operation
    elif old != value:
        ops[path] = {"op": "replace", "path": path, "value": value}


def _render_ops(ops: dict[Path, dict], order: Mapping[str, int] | None) -> list[dict]:
    """The operations sorted by ``order`` (field rank), as RFC 6902 dicts with JSON pointers."""
    ordered = sorted(ops.values(), key=lambda op: _sort_key(op["path"], order or {}))
    out = []
    for op in ordered:
        rendered = {"op": op["op"], "path": pointer(op["path"])}
        if op["op"] != "remove":
            rendered["value"] = copy.deepcopy(op["value"])
        out.append(rendered)
    return out


def diff_writes(old: Any, new: Any, depth: int, path: Path = ()) -> list[tuple[Path, Any]]:
    """Writes turning ``old`` into ``new``, comparing maps down to ``depth`` levels (whole values below).

    A key missing from ``new`` becomes a :data:`REMOVE` write.
    """
    if depth == 0 or not isinstance(old, dict) or not isinstance(new, dict):
        return [] if old == new else [(path, new)]
    writes: list[tuple[Path, Any]] = []
    for key in sorted(set(old) | set(new)):
        if key not in new:
            writes.append((path + (key,), REMOVE))
        elif key not in old:
            writes.append((path + (key,), new[key]))
        else:
            writes.extend(diff_writes(old[key], new[key], depth - 1, path + (key,)))
    return writes
