"""Memo keys of the admission engine: type-tagged key parts, identity caches, expression references.

:func:`_key_of` turns an activation value into a small hashable key part (short atoms tagged with
their type, containers and long strings by :func:`runtime.rules.memo.fingerprint`; :func:`key_part`
the same without its per-review digest table);
:func:`_by_identity` caches a conversion by object identity; :func:`_refs` lists the names an
expression reads. Used by :mod:`runtime.engine.admission.engine` (its ``_eval``).
"""
from __future__ import annotations

import re
from typing import Any

from runtime.model.rulefiles import Expr
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


def _by_identity(value: Any, static: dict, cache: dict, convert, limit: int | None = None) -> Any:
    """``convert(value)`` cached by identity: ``static`` (id -> converted, for values that live as
    long as the engine) first, then ``cache`` (id -> (value, converted): the value is pinned so its
    id cannot be reused while the entry lives; cleared when it reaches ``limit``)."""
    ident = id(value)
    hit = static.get(ident)
    if hit is not None:
        return hit
    entry = cache.get(ident)
    if entry is None:
        if limit is not None and len(cache) >= limit:
            cache.clear()
        entry = cache[ident] = (value, convert(value))
    return entry[1]


def _refs(expr: Expr) -> tuple[tuple[str, ...], tuple[str, ...]]:
    cached = getattr(expr, "_refs", None)
    if cached is None:
        names = tuple(sorted(set(_NAME_RE.findall(expr))))
        cached = (names, tuple(sorted(set(_VAR_RE.findall(expr)))))
        expr._refs = cached
    return cached
