"""runtime.rules.cel.evaluate evaluates the shipped rules exactly as stock cel-python does (docs/performance.md "Fast to start, light to hold").

Every CEL evaluation the rule suites make (admission policies, and the derivation their views run) is
made twice: by :class:`runtime.rules.cel.evaluate.Program` (its own activation: a container chained to the
base, direct name lookup; the globals of :mod:`runtime.rules.cel.fast`) and by cel-python's
``Transpiler.evaluate`` over cel-python's own ``Activation`` (clone of the base, ``load_values``,
``resolve_name``, cel-python's ``nested_activation``) in cel-python's own module globals, on the same
code object and the same CEL values. Values must be equal with the
same CEL types all the way down; errors must carry the same description.
"""
from __future__ import annotations

from pathlib import Path

import celpy
import celpy.evaluation as celeval

import runtime
from runtime.engine.policy import Policy
from runtime.rules.cel.compile import transpile
from runtime.rules.cel.evaluate import Program, describe
from runtime.rules.cel.library.table import FUNCTIONS
from runtime.rules.cel.runtime import cel_runtime
from runtime.rules.cel.values import to_cel
from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules
from runtime.ruletests import Runner, load_cases


def _typed(value):
    """A CEL value as nested tuples naming each value's type, so ``IntType(1)``, ``UintType(1)``,
    ``DoubleType(1.0)`` and ``BoolType(True)`` differ."""
    if isinstance(value, dict):
        return (type(value).__name__, tuple(sorted(((_typed(k), _typed(v)) for k, v in value.items()), key=repr)))
    if isinstance(value, list):
        return (type(value).__name__, tuple(_typed(v) for v in value))
    return (type(value).__name__, repr(value))


def _outcome(run):
    try:
        value = run()
    except celeval.CELEvalError as exc:
        return ("error", describe(exc))
    if isinstance(value, celeval.CELEvalError):
        return ("error", describe(value))
    return ("value", _typed(value))


def _stock_program(code):
    tp = celeval.Transpiler.__new__(celeval.Transpiler)
    tp.ast = None
    tp.base_activation = tp.activation = celpy.Activation(annotations=dict(celpy.googleapis),
                                                          functions=FUNCTIONS)
    tp.executable_code = code
    return tp


def test_rule_suites_evaluate_as_stock_cel_python(monkeypatch):
    ours = Program.evaluate
    compared: list[int] = [0]
    mismatches: list[tuple] = []

    def both(self, context):
        got = _outcome(lambda: ours(self, context))
        want = _outcome(lambda: _stock_program(self.tp.executable_code).evaluate(context))
        compared[0] += 1
        if got != want:
            mismatches.append((got, want))
        return ours(self, context)

    monkeypatch.setattr(Program, "evaluate", both)
    monkeypatch.setitem(celeval.__dict__, "runtime", runtime)  # stock cel-python finds custom functions there
    cel_runtime().memo.clear()
    policy = Policy(load_rules(DEFAULT_RULES_DIR))
    runner = Runner(policy, DEFAULT_RULES_DIR.parent)
    results = list(runner.run_all(load_cases(DEFAULT_RULES_DIR)))
    cel_runtime().memo.clear()
    assert [r.case.id for r in results if not r.passed] == []
    assert mismatches == []
    assert compared[0] > 3000  # every case evaluated, not only a few


def test_names_resolve_as_stock_cel_python():
    """The lookups stock cel-python makes differently from a plain dict: a value shadowing the base's
    annotation container (``google``), a macro variable shadowing a top-level one, a dotted name."""
    cases = [
        ("x.map(x, x + 1)", {"x": [1, 2]}),
        ("[1, 2].exists(a, a == b)", {"a": 5, "b": 2}),
        ("google", {"google": 1}),
        ("a.b", {"a.b": 3}),
        ("missing", {"a": 1}),
        ("size(a)", {}),
    ]
    for source, values in cases:
        code = transpile(cel_runtime().parse(source))
        context = {k: to_cel(v) for k, v in values.items()}
        got = _outcome(lambda: Program(code).evaluate(context))
        want = _outcome(lambda: _stock_program(code).evaluate(context))
        assert got == want, source
