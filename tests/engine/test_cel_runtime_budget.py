"""The run-time budget of every CEL evaluation and the one CelRuntime (docs/rule-authoring.md
"Run-time budget"): comprehensions and ``+`` are counted, a spent budget stops the evaluation with
CelBudgetExceeded, evaluations on two threads do not wait for each other."""
from __future__ import annotations

import threading

import pytest

from runtime.model.cellimits import CelLimitsSpec, CelRuntimeLimits
from runtime.rules.cel.budget import Deadline
from runtime.rules.cel.compile import compile_expression, program_from_code, transpile
from runtime.rules.cel.errors import CelBudgetExceeded, CelCompileError, CelEvalError
from runtime.rules.cel.evaluate import CelExpression, Program
from runtime.rules.cel.library.strings import fnv64a
from runtime.rules.cel.parse import parse
from runtime.rules.cel.runtime import CelRuntime, cel_runtime, install_runtime
from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules

TEN = "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"
MILLION = f"{TEN}.map(a, {TEN}.map(b, {TEN}.map(c, {TEN}.map(d, {TEN}.map(e, {TEN}.map(f, f * 2))))))"


def _expr(source: str, **limits) -> CelExpression:
    expr = compile_expression(source, "test")
    expr.limits = CelRuntimeLimits(**limits)
    return expr


def test_a_million_iteration_comprehension_stops_when_its_cost_is_spent():
    """10^6 innermost iterations; the body ``f * 2`` costs 3 an iteration (1, the multiplication, the
    literal), the five outer bodies 2 (1, the inner macro): charged every 100 iterations, the
    evaluation stops within one step of the limit, not after a million iterations."""
    with pytest.raises(CelBudgetExceeded) as stopped:
        _expr(MILLION, costLimit=10_000).evaluate({}, memo=False)
    exc = stopped.value
    assert (exc.reason, exc.limit, exc.setting, exc.iterations, exc.cost) == ("cost", 10_000, "costLimit", 3450, 10010)
    assert str(exc) == ("CEL evaluation stopped: its cost limit of 10000 units was spent "
                        "(rules/cel.yaml runtime.costLimit)")
    assert exc.where == "test"


def test_the_check_interval_bounds_the_overshoot():
    with pytest.raises(CelBudgetExceeded) as stopped:
        _expr("xs.map(x, x * 2).size()", costLimit=1000, checkEvery=10).evaluate({"xs": list(range(10_000))},
                                                                                 memo=False)
    assert (stopped.value.iterations, stopped.value.cost) == (340, 1020)   # 3 a step of 10: the first past 1000


def test_a_comprehension_within_budget_answers_as_before():
    assert _expr("xs.map(x, x * 2)", costLimit=31).evaluate({"xs": list(range(10))}, memo=False) == [
        x * 2 for x in range(10)]
    with pytest.raises(CelBudgetExceeded):
        _expr("xs.map(x, x * 2)", costLimit=29).evaluate({"xs": list(range(10))}, memo=False)


def test_a_string_doubled_past_the_size_limit_is_stopped():
    doubled = "s"
    for _ in range(26):
        doubled = f"[{doubled}].map(v, v + v)[0]"
    with pytest.raises(CelBudgetExceeded) as stopped:
        _expr(doubled, maxStringSize=1 << 20).evaluate({"s": "ab"}, memo=False)
    assert (stopped.value.reason, stopped.value.limit) == ("string-size", 1 << 20)
    assert str(stopped.value) == ("CEL evaluation stopped: it built a string longer than 1048576 characters "
                                  "(rules/cel.yaml runtime.maxStringSize)")


def test_a_list_grown_past_its_limit_and_strings_charged_per_character():
    with pytest.raises(CelBudgetExceeded) as stopped:
        _expr("xs + xs", maxListSize=100).evaluate({"xs": list(range(60))}, memo=False)
    assert (stopped.value.reason, stopped.value.setting) == ("list-size", "maxListSize")
    with pytest.raises(CelBudgetExceeded) as stopped:
        _expr("s + s", costLimit=100).evaluate({"s": "x" * 501}, memo=False)   # 1002 characters: 100.2 units
    assert stopped.value.reason == "cost"
    assert _expr("s + s", costLimit=100).evaluate({"s": "x" * 500}, memo=False) == "x" * 1000


def test_deep_nesting_is_a_budget_stop_not_a_recursion_traceback():
    """The parse stage refuses an expression nested deeper than 32 levels; a program nested deeper still
    (transpiled from the parser's tree directly) stops with a budget error, never a RecursionError."""
    source = "x"
    for _ in range(1000):
        source = f"a ? 1 : {source}"
    with pytest.raises(CelCompileError) as refused:
        compile_expression(source, "test")
    assert (refused.value.line, refused.value.column, str(refused.value)) == (
        1, 257, "expression nests deeper than 32 levels (parentheses, ternaries, arguments): split it into "
                "variables")
    deep = program_from_code(source, "test", transpile(cel_runtime().parse(source)))
    with pytest.raises(CelBudgetExceeded) as stopped:
        deep.evaluate({"a": False, "x": 1}, memo=False)
    assert stopped.value.reason == "nesting"
    assert str(stopped.value) == (f"CEL evaluation stopped: the expression nests deeper than the evaluator's limit "
                                  f"of {cel_runtime().recursion_limit} frames")


def test_a_cancelled_evaluation_stops_inside_its_comprehension():
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(CelBudgetExceeded) as stopped:
        _expr(MILLION, costLimit=10 ** 12).evaluate({}, memo=False, deadline=Deadline(8, cancel))
    assert (stopped.value.reason, stopped.value.iterations) == ("deadline", 10)   # the first check: the innermost 10


def test_a_slow_evaluation_does_not_hold_up_another_thread(monkeypatch):
    """No process-wide lock around evaluation: while one thread is inside a comprehension of 10^6
    iterations, another evaluates and returns; the slow one then stops when cancelled."""
    cancel, done = threading.Event(), threading.Event()
    expr = _expr(f"{MILLION}.size() > 0", costLimit=10 ** 12)
    runtime = cel_runtime()
    budgets: list = []
    real_run = runtime.run

    def run(program, context, budget):
        budgets.append(budget)
        return real_run(program, context, budget)

    monkeypatch.setattr(runtime, "run", run)
    result = {}

    def slow():
        try:
            expr.evaluate({}, memo=False, deadline=Deadline(None, cancel))
        except CelEvalError as exc:
            result["slow"] = exc
        done.set()

    thread = threading.Thread(target=slow, daemon=True)
    thread.start()
    try:
        while not (budgets and budgets[0].iterations):   # the slow one is inside its comprehension
            done.wait(0.001)
        fast = _expr("x + 1").evaluate({"x": 41}, memo=False)
        assert (fast, done.is_set()) == (42, False)
    finally:
        cancel.set()
    assert done.wait(60)
    assert result["slow"].reason == "deadline"


def test_limits_come_from_rules_cel_yaml_for_every_expression_of_the_generation(tmp_path):
    import shutil

    root = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, root)
    (root / "cel.yaml").write_text((root / "cel.yaml").read_text().replace("costLimit: 1000000", "costLimit: 1234"))
    ruleset = load_rules(root)
    assert ruleset.get("CelLimits").runtime.costLimit == 1234
    policy = ruleset.all("AdmissionPolicy")[0].spec
    assert policy.variables[0].expression.program.limits.costLimit == 1234
    shipped = load_rules(DEFAULT_RULES_DIR)
    assert shipped.get("CelLimits") == CelLimitsSpec()   # the shipped file states Kubernetes' defaults
    assert shipped.all("AdmissionPolicy")[0].spec.variables[0].expression.program.limits == CelRuntimeLimits()


def test_importing_cel_writes_nothing_into_cel_python_and_the_runtime_is_one_object():
    import celpy.evaluation as celeval

    assert "runtime" not in celeval.__dict__
    assert cel_runtime() is cel_runtime()
    assert compile_expression("1").program.runtime is cel_runtime()


def test_an_uncounted_runtime_is_cel_python_without_the_budget():
    """The benchmark's baseline (benchmarks/cel_budget.py): no counting helpers, no stop."""
    uncounted = CelRuntime(counting=False)
    code = transpile(parse("xs.map(x, x * 2)"))
    expr = CelExpression("xs.map(x, x * 2)", "test", Program(code, uncounted),
                             limits=CelRuntimeLimits(costLimit=5))
    assert expr.evaluate({"xs": [1, 2, 3]}, memo=False) == [2, 4, 6]
    assert uncounted.globals()["celpy"].evaluation.macro_map is __import__("celpy").evaluation.macro_map
    with pytest.raises(RuntimeError, match="a CEL runtime is in use already"):
        install_runtime(uncounted)


def test_a_flatten_whose_result_would_pass_the_list_limit_is_stopped_before_it_builds():
    """1,000 references to one 1,000-element list: flatten would build 10^6 elements; it is stopped
    having spent what its arguments cost, before building anything."""
    with pytest.raises(CelBudgetExceeded) as stopped:
        _expr("flatten(xs.map(x, ys)).size()").evaluate({"xs": list(range(1000)), "ys": list(range(1000))},
                                                       memo=False)
    assert (stopped.value.reason, stopped.value.limit) == ("list-size", 100_000)


def test_a_join_whose_result_would_pass_the_string_limit_is_stopped_before_it_builds():
    with pytest.raises(CelBudgetExceeded) as stopped:
        _expr("join(xs.map(x, s), '')", maxStringSize=1 << 20).evaluate(
            {"xs": list(range(1000)), "s": "x" * 2000}, memo=False)
    assert (stopped.value.reason, stopped.value.limit) == ("string-size", 1 << 20)


def test_in_over_a_list_is_charged_its_length_before_it_looks():
    """100 iterations of ``x in ys`` over 10,000 elements: each ``in`` costs 10,001 units; the 100th
    passes a 1,000,000-unit budget (a comprehension step of 100 iterations is charged after them)."""
    with pytest.raises(CelBudgetExceeded) as stopped:
        _expr("xs.all(x, x in ys)").evaluate({"xs": list(range(1000)), "ys": list(range(-10_000, 0))},
                                             memo=False)
    assert (stopped.value.reason, stopped.value.cost) == ("cost", 100 * 10_001)


def test_a_sort_is_charged_n_log_n_before_it_runs():
    with pytest.raises(CelBudgetExceeded) as stopped:
        _expr("size(sortedUnique(ys))", costLimit=100_000).evaluate({"ys": [str(i) for i in range(10_000)]},
                                                                    memo=False)
    assert stopped.value.cost == 1 + 10_000 * 14
    assert _expr("sortedUnique(ys)", costLimit=100_000).evaluate({"ys": ["b", "a", "b"]}, memo=False) == ["a", "b"]


def test_custom_functions_answer_the_same_with_and_without_the_budget():
    """The priced wrappers change what is charged, never the answer."""
    source = "sortedUnique(flatten([xs, ['z']])) + [join(xs, '-'), lowerAscii('AbC'), fnv64a('x')]"
    counted = compile_expression(source, "t").evaluate({"xs": ["b", "a"]}, memo=False)
    runtime = CelRuntime(counting=False)
    uncounted = CelExpression(source, "t", Program(transpile(parse(source)),
                                                            runtime)).evaluate({"xs": ["b", "a"]}, memo=False)
    assert counted == uncounted == ["a", "b", "z", "b-a", "abc", fnv64a("x")]
