"""JSON <-> CEL value conversion at the edge of rule evaluation (cel-python's ``celtypes``).

Used by the evaluator (:mod:`runtime.rules.cel`) and by the custom functions
(:mod:`runtime.rules.celadmission`) that take and return JSON-shaped values; it imports neither.
"""
from __future__ import annotations

from typing import Any

from celpy import celtypes
from celpy.adapter import json_to_cel


def to_cel(value: Any) -> Any:
    """JSON-shaped Python value (dict/list/str/int/float/bool/None) -> CEL value."""
    return json_to_cel(value)


def from_cel(value: Any) -> Any:
    """CEL value -> plain JSON-shaped Python value (bool before int: CEL BoolType is an int)."""
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
