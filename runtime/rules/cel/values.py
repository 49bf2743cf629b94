"""JSON <-> CEL value conversion at the edge of rule evaluation (cel-python's ``celtypes``).

Used by the evaluator (:mod:`runtime.rules.cel.evaluate`) and by the custom functions
(:mod:`runtime.rules.cel.library.objects`) that take and return JSON-shaped values; it imports neither.
"""
from __future__ import annotations

import math
from typing import Any

from celpy import celtypes
from celpy.adapter import json_to_cel


_STR, _INT, _BOOL, _DOUBLE = celtypes.StringType, celtypes.IntType, celtypes.BoolType, celtypes.DoubleType
_MAP, _LIST = celtypes.MapType, celtypes.ListType
_INT_MIN, _INT_MAX = -(2 ** 63), 2 ** 63
_KEYS: dict[str, Any] = {}  # map keys repeat (metadata, name, labels...): one StringType each
_KEYS_LIMIT = 8192
# conversions whose from_cel differs from their input (beyond int64, tuples, others): see json_of
_LOSSY = [0]


def _key(key: Any) -> Any:
    if type(key) is not str:
        return to_cel(key)
    hit = _KEYS.get(key)
    if hit is None:
        if len(_KEYS) >= _KEYS_LIMIT:
            _KEYS.clear()
        hit = _KEYS[key] = str.__new__(_STR, key)
    return hit


def beyond_int64(value: int) -> float:
    """An integer outside int64 as the API server decodes it: the nearest float64, or +/-inf."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def to_cel(value: Any) -> Any:
    """JSON-shaped Python value (dict/list/str/int/float/bool/None) -> CEL value.

    The same values as cel-python's ``json_to_cel`` (bool -> BoolType, int -> IntType, float -> DoubleType,
    str -> StringType, list/tuple -> ListType, dict -> MapType, None -> None), built by exact type without
    cel-python's generic ``isinstance`` chains and per-call int64 wrappers: the conversion was two thirds of a
    review's cost (docs/performance.md "Evaluation cost: what changed"). Anything else (datetimes, CEL values,
    subclasses) goes through ``json_to_cel``.

    One difference: an integer outside int64 (``2**63``) becomes a DoubleType, as the API server's
    JSON decoder reads such a number (apimachinery ``util/json``: int64 when it fits, else float64),
    where ``json_to_cel`` raises ``ValueError: overflow`` and every rule of the review failed with it
    (docs/webhook-hardening.md "Malformed objects never pass: shape checks"). Beyond float64 it is
    +/-inf.

    A map or list built from a dict or list remembers it, for :func:`json_of`, when
    :func:`from_cel` of the result equals it exactly (no integer beyond int64, tuple or other
    non-JSON value inside).
    """
    t = type(value)
    if t is str:
        return str.__new__(_STR, value)
    if t is dict:
        lossy = _LOSSY[0]
        out = dict.__new__(_MAP)
        for k, v in value.items():
            dict.__setitem__(out, _key(k), to_cel(v))
        if _LOSSY[0] == lossy:
            out._json = value
        return out
    if t is list:
        lossy = _LOSSY[0]
        out = _LIST([to_cel(v) for v in value])
        if _LOSSY[0] == lossy:
            out._json = value
        return out
    if t is bool:
        return int.__new__(_BOOL, value)
    if t is int:
        if _INT_MIN <= value < _INT_MAX:
            return int.__new__(_INT, value)
        _LOSSY[0] += 1
        return float.__new__(_DOUBLE, beyond_int64(value))
    if t is float:
        return float.__new__(_DOUBLE, value)
    if value is None:
        return None
    _LOSSY[0] += 1  # a tuple, a datetime, a CEL value, a subclass
    return _LIST([to_cel(v) for v in value]) if t is tuple else json_to_cel(value)


def cel_map(items: dict) -> Any:
    """A CEL map of string keys to values that are already CEL values (no conversion of the values)."""
    out = dict.__new__(_MAP)
    for k, v in items.items():
        dict.__setitem__(out, _key(k), v)
    return out


def json_of(value: Any) -> Any:
    """The JSON-shaped value of CEL ``value`` for reading only, equal to :func:`from_cel`'s: the very
    dict or list :func:`to_cel` built it from when it was and nothing in it converted differently
    (a review's object, a policy's params tables: shared, never to be mutated), else
    :func:`from_cel`'s copy. The custom functions read their arguments this way, so a
    Pod or a table is not converted back from CEL on every call."""
    t = type(value)
    if t is _MAP or t is _LIST:
        source = value.__dict__.get("_json")
        if source is not None:
            return source
    return from_cel(value)


def from_cel(value: Any) -> Any:
    """CEL value -> plain JSON-shaped Python value (bool before int: CEL BoolType is an int)."""
    t = type(value)
    if t is _STR:
        return str(value)
    if t is _MAP:
        return {from_cel(k): from_cel(v) for k, v in value.items()}
    if t is _LIST:
        return [from_cel(v) for v in value]
    if t is _BOOL:
        return bool(value)
    if t is _INT:
        return int(value)
    if value is None:
        return None
    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, (celtypes.IntType, celtypes.UintType)):
        return int(value)
    if isinstance(value, celtypes.DoubleType):
        return float(value)
    if isinstance(value, celtypes.StringType):
        return str(value)
    if isinstance(value, celtypes.MapType):
        return {from_cel(k): from_cel(v) for k, v in value.items()}
    if isinstance(value, celtypes.ListType):
        return [from_cel(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return value
