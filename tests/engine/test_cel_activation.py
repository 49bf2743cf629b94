"""runtime.rules.cel.evaluate evaluates with its own Activation (docs/performance.md "A pass proportional to what changed"): the same values and the same
errors as cel-python's own transpiling runner, for variables, nested fields, macros, custom
functions and unbound names."""
from __future__ import annotations

import celpy
import celpy.evaluation as celeval
import pytest

import runtime
from runtime.rules.cel.activation import Activation
from runtime.rules.cel.compile import compile_expression
from runtime.rules.cel.errors import CelEvalError
from runtime.rules.cel.evaluate import describe
from runtime.rules.cel.library.table import FUNCTIONS
from runtime.rules.cel.values import from_cel, to_cel

ACTIVATION = {"a": 1, "b": {"c": 2, "items": [1, 2, 3], "labels": {"app": "x"}}, "s": "text"}
EXPRESSIONS = [
    "a + b.c",
    "b.items.all(x, x > 0) && b.items.exists(x, x == 3)",
    "b.items.map(x, x * a)",
    "b.items.filter(x, x > a).size()",
    "has(b.labels.app) && !has(b.labels.other)",
    "'app' in b.labels ? b.labels['app'] : 'none'",
    "dig(b, ['labels', 'app'], 'none') + s",
    "[a, b.c].map(v, [v].map(w, w + a))",
    "missing + 1",
    "b.nothing",
    "a / 0",
]


def _stock(source: str):
    env = celpy.Environment(runner_class=celpy.CompiledRunner)
    program = env.program(env.compile(source), functions=FUNCTIONS)
    try:
        result = program.evaluate({k: to_cel(v) for k, v in ACTIVATION.items()})
    except celpy.CELEvalError as exc:
        return ("error", describe(exc))
    if isinstance(result, celpy.CELEvalError):
        return ("error", describe(result))
    return ("value", from_cel(result))


def _ours(source: str):
    try:
        return ("value", compile_expression(source, "test").evaluate(ACTIVATION, memo=False))
    except CelEvalError as exc:
        return ("error", str(exc).split(": ", 2)[2])


@pytest.mark.parametrize("source", EXPRESSIONS)
def test_same_answer_as_cel_python_runner(source, monkeypatch):
    monkeypatch.setitem(celeval.__dict__, "runtime", runtime)  # stock cel-python reaches custom functions there
    assert _ours(source) == _stock(source)


def test_program_activation_is_ours_and_clones_keep_it():
    program = compile_expression("a", "test").program
    assert type(program.tp.base_activation) is Activation
    assert type(program.tp.base_activation.clone()) is Activation
    assert _ours("a + b.c") == ("value", 3)
    assert _ours("missing + 1")[0] == "error"


def test_macro_bodies_evaluate_with_our_activation_too():
    program = compile_expression("b.items.map(x, x * a)", "test").program
    nested = program.tp.base_activation.nested_activation(vars={"x": 1})
    assert type(nested) is Activation
    assert nested.identifiers.parent is program.tp.base_activation.identifiers
    assert _ours("b.items.filter(x, x > a).map(y, y + a)") == _stock("b.items.filter(x, x > a).map(y, y + a)")
