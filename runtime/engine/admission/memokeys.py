"""Memo keys of the admission engine: type-tagged key parts, expression references, the inputs read.

:func:`_key_of` turns an activation value into a small hashable key part (short atoms tagged with
their type, containers and long strings by :func:`runtime.rules.memo.fingerprint`; :func:`key_part`
the same without its per-review digest table); :func:`_refs` lists the names an
expression reads; :func:`new_input` and :func:`held_input` give each value an expression reads its
key part and CEL value once per review or once per view (:class:`_Input`); :func:`read_inputs`
gathers an expression's inputs and memo key. Used by :mod:`runtime.engine.admission.engine` (``_eval``).
"""
from __future__ import annotations

import re
from typing import Any

from runtime.model.rulefiles import Expr
from runtime.rules.cel.values import cel_map, to_cel
from runtime.rules.memo import fingerprint

_TOP = ("object", "oldObject", "request", "params", "settings", "lookups", "item")
_NAME_RE = re.compile(r"(?<![\w.'\"])(" + "|".join(_TOP + ("variables",)) + r")\b")
_VAR_RE = re.compile(r"\bvariables\.([A-Za-z_]\w*)")

_SHORT = 64  # strings up to this length key the memo as themselves (type-tagged), longer ones by digest


def _key_of(value: Any, digests: dict) -> Any:
    """A small hashable, type-tagged memo key part for ``value``.

    Short atoms are tagged with their type (``1``, ``True``, ``1.0`` differ); containers and long
    strings are keyed by :func:`runtime.rules.memo.fingerprint`, computed once per object per review
    (``digests``: id -> (object, digest), dropped when the review ends, so nothing outlives it).
    """
    t = type(value)
    if t is not dict and t is not list and not (t is str and len(value) > _SHORT):
        return key_part(value)
    ident = id(value)
    entry = digests.get(ident)
    if entry is None or entry[0] is not value:
        entry = digests[ident] = (value, _digest(value))
    return entry[1]


def key_part(value: Any) -> Any:
    """:func:`_key_of` without a digest table: ``value``'s key part computed now (the caller keeps
    it as long as it needs it). Raises :class:`_Unkeyable` when ``value`` has no fingerprint."""
    t = type(value)
    if t is not dict and t is not list and not (t is str and len(value) > _SHORT):
        if t in (bool, int, float, str, type(None)):
            return (t.__name__, value)
    return _digest(value)


def _digest(value: Any) -> bytes:
    digest = fingerprint(value)
    if digest is None:
        raise _Unkeyable()
    return digest


class _Unkeyable(Exception):
    """A value with no fingerprint: evaluate without the memo."""


def _refs(expr: Expr) -> tuple[tuple[str, ...], tuple[str, ...]]:
    cached = getattr(expr, "_refs", None)
    if cached is None:
        names = tuple(sorted(set(_NAME_RE.findall(expr))))
        cached = (names, tuple(sorted(set(_VAR_RE.findall(expr)))))
        expr._refs = cached
    return cached


_UNKEYED = object()  # an input with no fingerprint: the expression is evaluated without the memo
_LAZY = object()  # an input's CEL value, not converted yet
_HELD_LIMIT = 4096  # entries of a view's ``held`` table (one per lookup list found, and the settings)


class _Input:
    """One value an expression reads, for one review (or one view, :meth:`AdmissionEngine._held`):
    the value (pinned), its memo key part, and its CEL value converted on first need. ``parts``:
    the lookups map's per-list inputs, or the view's input of the settings map."""

    __slots__ = ("value", "key", "cel", "parts")

    def __init__(self, value: Any, key: Any, cel: Any = _LAZY, parts: Any = None):
        self.value, self.key, self.cel, self.parts = value, key, cel, parts

    def cel_value(self) -> Any:
        """The value as a CEL value (:func:`runtime.rules.cel.values.to_cel`), converted once."""
        cel = self.cel
        if cel is _LAZY:
            parts = self.parts
            if parts is None:
                cel = to_cel(self.value)
            elif type(parts) is dict:  # the lookups map: a CEL map of its lists' CEL values
                cel = cel_map({lookup: held.cel_value() for lookup, held in parts.items()})
            else:  # the view's settings
                cel = parts.cel_value()
            self.cel = cel
        return cel


def read_inputs(expr: Expr, variables: dict, item: Any, base: dict, params_keys: dict,
                params_cel: dict) -> tuple[list, tuple | None]:
    """What ``expr`` reads in a review: ``(read, key)``, ``read`` a list of ``(name, input)`` (for
    ``variables``: ``(name, [(variable, input), ...])``, the variables set), ``key`` the memo key
    (the expression's id, then each input's key part; None when an input has none). Inputs come from
    ``base['_inputs']``, made by :func:`new_input` the first time a value is read."""
    names, var_names = _refs(expr)
    inputs = base["_inputs"]
    read: list = []
    parts: list = [id(expr)]
    keyed = True
    for n in names:
        if n == "variables":
            entries, keys = [], []
            for v in var_names:
                if v in variables:
                    value = variables[v]
                    entry = inputs.get(id(value))
                    if entry is None or entry.value is not value:
                        entry = new_input(value, "", base, inputs, params_keys, params_cel)
                    entries.append((v, entry))
                    keys.append((v, entry.key))
                    keyed = keyed and entry.key is not _UNKEYED
            read.append((n, entries))
            parts.append(tuple(keys))
        else:
            value = item if n == "item" else base[n]
            entry = inputs.get(id(value))
            if entry is None or entry.value is not value:
                entry = new_input(value, n, base, inputs, params_keys, params_cel)
            read.append((n, entry))
            parts.append(entry.key)
            keyed = keyed and entry.key is not _UNKEYED
    return read, tuple(parts) if keyed else None


def new_input(value: Any, name: str, base: dict, inputs: dict, params_keys: dict, params_cel: dict) -> _Input:
    """A new :class:`_Input` of ``value`` (read as ``name``: a top-level name, or "" for a variable or
    ``item``), stored in the review's ``inputs`` (id -> input, the value pinned while the review
    lasts, so its id is not reused; the caller looks there first): keyed now, converted to CEL on
    first need. Params come keyed and converted per engine (``params_keys``, ``params_cel``: by id);
    the lookups map is keyed and converted from its lists' per-view inputs; the view's own settings
    map (``base['_view']``) likewise."""
    if name == "params" and id(value) in params_keys:
        entry = _Input(value, params_keys[id(value)], params_cel[id(value)])
    elif name == "lookups" and type(value) is dict:
        view = base["_view"]
        held = {lookup: held_input(view, objects) for lookup, objects in value.items()}
        entry = _Input(value, tuple((lookup, h.key) for lookup, h in held.items()), _LAZY, held)
    elif name == "settings" and value is getattr(base["_view"], "settings", None):
        held_settings = held_input(base["_view"], value)
        entry = _Input(value, held_settings.key, _LAZY, held_settings)
    else:
        entry = _Input(value, _key_or_unkeyed(value))
    inputs[id(value)] = entry
    return entry


def held_input(view: Any, value: Any) -> _Input:
    """The :class:`_Input` of ``value``, a map or list the view holds for as long as it lives (a
    lookup's list of objects, the settings): keyed and converted once per view, in the view's own
    ``held`` table (views are immutable; a rebuilt view starts a new table). A view without a
    ``held`` table gets a fresh input each time."""
    held = getattr(view, "held", None)
    entry = held.get(id(value)) if held is not None else None
    if entry is None or entry.value is not value:
        entry = _Input(value, _key_or_unkeyed(value))
        if held is not None:
            if len(held) >= _HELD_LIMIT:  # a view whose lookups make new lists: stay bounded
                held.clear()
            held[id(value)] = entry
    return entry


def _key_or_unkeyed(value: Any) -> Any:
    try:
        return key_part(value)
    except _Unkeyable:
        return _UNKEYED
