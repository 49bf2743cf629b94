"""Custom CEL functions on Kubernetes quantities (docs/reference/controller.md "Pod admission").

A quantity is read as the API server reads one (:func:`runtime.model.normalize.parse_quantity`): a
string such as ``1500m`` or ``24Gi``, or a number. One that does not parse reads as 0 in the
arithmetic (as ``qValue``), so a rule checks it with ``qValid`` or ``qError`` first. ``qIsOne`` is the
whole-device test of docs/reference/controller.md "Pod accelerator requests" (``1m`` is not 1).
"""
from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

from celpy import celtypes

from runtime.model import normalize
from runtime.rules.cel.library.declare import cel_function
from runtime.rules.cel.values import json_of


def parsed(value: Any) -> Decimal | None:
    """The quantity ``value`` (a CEL string or number) as a Decimal; None when it does not parse."""
    try:
        return normalize.parse_quantity(json_of(value))
    except normalize.QuantityError:
        return None


def rounded_up(value: Any) -> int:
    """The quantity ``value`` rounded up to an integer (its ``Value()``); 0 when it does not parse."""
    q = parsed(value)
    return 0 if q is None else math.ceil(q)


@cel_function(("dyn",), "bool", 1, 0)
def qValid(value) -> celtypes.BoolType:  # noqa: N802 - CEL naming
    """True when ``value`` (string or number) is a Kubernetes quantity."""
    return celtypes.BoolType(parsed(value) is not None)


@cel_function(("dyn",), "int", 1, 0)
def qValue(value) -> celtypes.IntType:  # noqa: N802
    """Quantity ``Value()``: rounded up to an integer (`0.5` -> 1, `1m` -> 1); 0 when unparsable."""
    return celtypes.IntType(rounded_up(value))


@cel_function(("dyn",), "int", 1, 0)
def qFloor(value) -> celtypes.IntType:  # noqa: N802
    """Quantity rounded down to an integer (`24Gi` -> 25769803776); 0 when unparsable."""
    q = parsed(value)
    return celtypes.IntType(0 if q is None else math.floor(q))


@cel_function(("dyn",), "bool", 1, 0)
def qIsOne(value) -> celtypes.BoolType:  # noqa: N802
    """True when the quantity itself equals 1 (`1m` is not 1)."""
    return celtypes.BoolType(parsed(value) == 1)


@cel_function(("dyn",), "bool", 1, 0)
def qIsInt(value) -> celtypes.BoolType:  # noqa: N802
    """True when the quantity is a whole number (`1m` is not)."""
    q = parsed(value)
    return celtypes.BoolType(q is not None and q == q.to_integral_value())


@cel_function(("dyn",), "bool", 1, 0)
def qIsZero(value) -> celtypes.BoolType:  # noqa: N802
    """True when the quantity is 0 (an absent field reads as 0 in the rules: pass `'0'`)."""
    return celtypes.BoolType(parsed(value) == 0)


@cel_function(("dyn",), "string", 256, 0)
def qError(value) -> celtypes.StringType:  # noqa: N802
    """'' for a valid quantity, else the parser's message (the rules' `parse memory` denial)."""
    try:
        normalize.parse_quantity(json_of(value))
        return celtypes.StringType("")
    except normalize.QuantityError as exc:
        return celtypes.StringType(str(exc))


@cel_function(("dyn", "dyn"), "int", 1, 0)
def qCompare(a, b) -> celtypes.IntType:  # noqa: N802
    """-1, 0 or 1 comparing two quantities exactly (`1500m` < `2`); unparsable reads as 0."""
    x, y = parsed(a) or Decimal(0), parsed(b) or Decimal(0)
    return celtypes.IntType((x > y) - (x < y))


@cel_function(("dyn",), "string", 32, 0)
def binaryQuantity(value) -> celtypes.StringType:  # noqa: N802
    """Bytes -> canonical binary quantity (`24Gi`, `1536Mi`)."""
    return celtypes.StringType(normalize.format_binary_quantity(int(value)))


@cel_function(("int",), "string", 32, 0)
def quantity(value: celtypes.IntType) -> celtypes.StringType:
    """Canonical decimal-SI quantity string of an integer: 1600000 -> "1600k"."""
    return celtypes.StringType(normalize.format_decimal_quantity(int(value)))
