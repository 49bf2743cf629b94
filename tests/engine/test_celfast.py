"""runtime.rules.cel.fast: each fast helper answers as the cel-python helper it stands for, on the
values where they could differ (int64 bounds, bools, floats, strings, errors, mixed types), and
cel-python itself is left unchanged. The shipped rules as a whole: test_cel_stock_equivalence.py."""
from __future__ import annotations

import celpy.celtypes as ct
import celpy.evaluation as ce
import pytest

from runtime.rules.cel import fast as celfast
from runtime.rules.cel.compile import compile_expression, transpile
from runtime.rules.cel.evaluate import Program
from runtime.rules.cel.parse import parse
from runtime.rules.cel.runtime import CelRuntime, cel_runtime
from runtime.rules.cel.values import to_cel

ERROR = ce.CELEvalError("boom", ValueError, ("x",))


def _answer(function, *args):
    try:
        value = function(*args)
    except Exception as exc:  # noqa: BLE001 - the exception is the answer compared
        return ("raises", type(exc), exc.args)
    if isinstance(value, ce.CELEvalError):
        return ("error", value.args[:2])
    return ("value", type(value), value)


INT_SOURCES = [0, 1, -1, 2 ** 63 - 1, -(2 ** 63), 2 ** 63, -(2 ** 63) - 1, True, False, 1.9, -123.456,
               ct.IntType(7), ct.DoubleType(2.5), "12", "0x1F", "-0x10", ct.StringType("3"), None, "x"]


@pytest.mark.parametrize("source", INT_SOURCES, ids=repr)
def test_cel_int_is_inttype(source):
    assert _answer(celfast.cel_int, source) == _answer(ct.IntType, source)


OPERANDS = [ct.IntType(1), ct.IntType(2), ct.DoubleType(1.0), ct.UintType(1), ct.BoolType(True),
            ct.StringType("a"), ct.StringType("b"), ct.ListType([ct.IntType(1)]), None, ERROR]


@pytest.mark.parametrize("name", ["lt", "le", "gt", "ge", "eq", "ne"])
def test_comparisons_are_cel_pythons(name):
    globals_ = celfast.program_globals(ce.__dict__)
    fast = getattr(globals_["celpy"].evaluation, f"bool_{name}")
    stock = getattr(ce, f"bool_{name}")
    for a in OPERANDS:
        for b in OPERANDS:
            assert _answer(fast, a, b) == _answer(stock, a, b), (name, a, b)


CONTAINERS = [ct.ListType([ct.IntType(1), ct.StringType("a")]), ct.ListType([]),
              ct.MapType({ct.StringType("k"): ct.IntType(1)}), ct.StringType("abc"), ERROR, ct.IntType(3)]


def test_operator_in_and_size_are_cel_pythons():
    for container in CONTAINERS:
        for item in (ct.IntType(1), ct.StringType("a"), ct.StringType("k"), ct.StringType("b"), ERROR):
            assert _answer(celfast.operator_in, item, container) == _answer(ce.operator_in, item, container)
        assert _answer(celfast.function_size, container) == _answer(ce.function_size, container)
    assert _answer(celfast.function_size, None) == _answer(ce.function_size, None)


def test_cel_python_itself_is_unchanged():
    assert ct.IntType.__new__.__module__ == "celpy.celtypes"
    assert ce.bool_eq.__module__ == ce.operator_in.__module__ == "celpy.evaluation"
    program_globals = cel_runtime().globals()
    assert program_globals is not ce.__dict__ and ce.__dict__["celpy"].evaluation is ce
    assert "runtime" not in ce.__dict__  # the function table is reached from our globals, not cel-python's


def test_another_cel_python_version_runs_stock(monkeypatch):
    monkeypatch.setattr(celfast, "_installed_version", lambda: "0.6.0")
    assert celfast.program_globals(ce.__dict__) is ce.__dict__


def test_programs_use_the_fast_helpers_and_answer_the_same():
    code = transpile(parse("size(xs) == 2 && 'a' in xs && 1 < 2"))
    context = {"xs": to_cel(["a", "b"])}
    assert Program(code).evaluate(context) is not None
    fast = cel_runtime().globals()["celpy"]
    assert fast.celtypes.IntType is celfast.cel_int
    assert fast.evaluation.operator_in.__code__ is celfast._counted_in(None).__code__   # charges, then looks
    uncounted = CelRuntime(counting=False).globals()["celpy"]
    assert uncounted.evaluation.operator_in is celfast.operator_in
    assert compile_expression("size(xs) == 2 && 'a' in xs", "t").evaluate({"xs": ["a", "b"]}) is True
