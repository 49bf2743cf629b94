"""runtime.rules.cel.values: the fast JSON -> CEL conversion gives exactly cel-python's values."""
from __future__ import annotations

import datetime

import pytest
from celpy import celtypes
from celpy.adapter import json_to_cel
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.rules.cel.values import beyond_int64, from_cel, json_of, to_cel

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2 ** 64), max_value=2 ** 64)
    | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20)


def _same(a, b) -> None:
    """Equal value and equal CEL type at every level."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for (ka, va), (kb, vb) in zip(a.items(), b.items()):
            _same(ka, kb)
            _same(va, vb)
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert a == b


def _decoded(value):
    """``value`` as the API server's JSON decoder reads it: an integer outside int64 is a float64."""
    if type(value) is int and not -(2 ** 63) <= value < 2 ** 63:
        return beyond_int64(value)
    if isinstance(value, list):
        return [_decoded(v) for v in value]
    if isinstance(value, dict):
        return {k: _decoded(v) for k, v in value.items()}
    return value


def _reference(value):
    return json_to_cel(_decoded(value))


@settings(max_examples=300, deadline=None)
@given(_JSON)
def test_to_cel_matches_celpy(value):
    expected = _reference(value)  # cel-python raised "overflow" for an int outside int64 (docs/webhook-hardening.md "Webhook hardening: hostile input, bounded memory, slow paths")
    converted = to_cel(value)
    _same(converted, expected)
    assert from_cel(converted) == _decoded(value)


def test_to_cel_types_and_fallbacks():
    assert type(to_cel(True)) is celtypes.BoolType and to_cel(True) == 1
    assert type(to_cel(3)) is celtypes.IntType
    assert type(to_cel(2.5)) is celtypes.DoubleType
    assert type(to_cel(("a", 1))) is celtypes.ListType
    assert to_cel(datetime.timedelta(seconds=3)) == celtypes.DurationType(seconds=3)
    assert type(to_cel(2 ** 63)) is celtypes.DoubleType and to_cel(2 ** 63) == 2.0 ** 63
    assert to_cel(-(10 ** 400)) == float("-inf") and type(to_cel(2 ** 63 - 1)) is celtypes.IntType
    assert from_cel(to_cel({"a": [True, 1, 1.5, None, "x"]})) == {"a": [True, 1, 1.5, None, "x"]}
    assert type(from_cel(to_cel({"a": True}))["a"]) is bool


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=6), _JSON, max_size=4) | st.lists(_JSON, max_size=4))
def test_json_of_is_the_source_of_a_converted_value_and_a_copy_otherwise(value):
    converted = to_cel(value)
    assert json_of(converted) == from_cel(converted)   # always what from_cel reads
    if _fits_int64(value):
        assert json_of(converted) is value
    else:  # an integer beyond int64 reads as a float: the source is not what the rules see
        assert json_of(converted) is not value
    for inner_source, inner in (zip(value.values(), converted.values()) if isinstance(value, dict)
                                else zip(value, converted)):
        if type(inner_source) in (dict, list) and _fits_int64(inner_source):
            assert json_of(inner) is inner_source
    built_by_cel = celtypes.MapType({celtypes.StringType("v"): converted})   # a map CEL made: no source
    assert json_of(built_by_cel) == {"v": from_cel(converted)} and json_of(built_by_cel)["v"] is not value


def _fits_int64(value) -> bool:
    if isinstance(value, dict):
        return all(_fits_int64(v) for v in value.values())
    if isinstance(value, list):
        return all(_fits_int64(v) for v in value)
    return type(value) is not int or -(2 ** 63) <= value < 2 ** 63


def test_json_of_scalars_and_tuples_are_converted():
    assert json_of(to_cel("x")) == "x" and type(json_of(to_cel("x"))) is str
    assert type(json_of(to_cel(True))) is bool and json_of(to_cel(None)) is None
    pair = ("a", 1)
    assert json_of(to_cel(pair)) == ["a", 1]
    holder = {"t": pair, "n": 2 ** 64}
    assert json_of(to_cel(holder)) == {"t": ["a", 1], "n": 2.0 ** 64}
