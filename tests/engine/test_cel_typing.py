"""The static CEL checks of docs/rule-authoring.md "What lint checks": types, keys, cost and nesting.

Each edit below lints clean on the code before these checks, loads, and fails every matching review
with a 500 (or ties up a worker); here each is refused with its file:line:col, by the same function
the loader, lint and the hot reload call (:func:`runtime.rules.loader.rule_problems`).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from runtime.rules.loader import RuleLoadError, load_rules, rule_problems
from tests.rulelines import shipped_line

RULES = Path(__file__).resolve().parents[2] / "rules"
PODS = "rules/admission/pods-mutation.yaml"


def at(old: str) -> str:
    """``rules/admission/pods-mutation.yaml:<line>``: the line of the shipped file where ``old`` first starts."""
    return f"{PODS}:{shipped_line(PODS, old)}"


def test_shipped_rules_are_clean_with_types_and_costs():
    assert rule_problems(RULES, cache=None)[0] == []


def test_string_plus_int_message(edited_rules):
    old = """messageExpression: "'pod has no \\"' + params.labels.keys.queueName + '\\" label'\""""
    assert edited_rules(PODS, old, """messageExpression: "'at most ' + params.constants.maxNameLength\"""") == [
        f"{at(old)}:31 spec.mutations[0].denials[0].messageExpression: type mismatch: no '+' "
        "for (string, int) in \"'at most ' + params.constants.maxNameLength\""]


def test_misspelt_params_key(edited_rules):
    old = "expression: variables.memoryPercent > params.constants.percentPerAccelerator"
    assert edited_rules(PODS, old, old[:-1]) == [
        f"{at(old)}:66 spec.mutations[1].denials[0].expression: params.constants has no field "
        "or key 'percentPerAccelerato' (known: creditsPerAccelerator, maxNameLength, percentPerAccelerator, "
        "sharesPerAccelerator) in 'params.constants.percentPerAccelerato'"]


def test_misspelt_label_table_key(edited_rules):
    old = "params.labels.keys.queueName], '')\""
    found = edited_rules(PODS, old, old.replace("queueName", "queueNam"))
    assert len(found) == 1
    assert found[0].startswith(f"{at(old)}:74 spec.variables[0].expression: params.labels.keys "
                               "has no field or key 'queueNam' (known: acceleratable, ")
    assert found[0].endswith(", queueName, resourceType) in 'params.labels.keys.queueNam'")


def test_bool_string_mismatch(edited_rules):
    old = "expression: variables.queueName == ''"
    assert edited_rules(PODS, old, old + " && 'yes'") == [
        f"{at(old)}:52 spec.mutations[0].denials[0].expression: type mismatch: an operand of && "
        "must be bool, \"'yes'\" is string"]


def test_non_bool_validation_and_non_string_message(edited_rules):
    old = "expression: variables.queueName == ''"
    assert edited_rules(PODS, old, "expression: size(variables.queueName)") == [
        f"{at(old)}:23 spec.mutations[0].denials[0].expression: type mismatch: this field needs "
        "a bool, 'size(variables.queueName)' is int"]


HUNDRED = "[" + ", ".join(str(i) for i in range(100)) + "]"


def test_a_million_iteration_comprehension_is_refused_by_its_cost(edited_rules):
    million = f"{HUNDRED}.map(a, {HUNDRED}.map(b, {HUNDRED}.map(c, string(a) + '-' + string(b))))"
    old = "expression: podDemand(object, params.resourceKeys, params.manufacturers)"
    found = edited_rules(PODS, old, f"expression: \"size({million}) > 0 ? {old[12:]} : {{}}\"")
    assert len(found) == 1
    assert found[0].startswith(f"{at(old)}:20 spec.variables[2].expression: worst-case cost "
                               "estimate 2.6e+07 is over maxExpressionCost 10000000 (CelLimits): 'size([0, 1, 2,")


def test_a_string_doubled_past_the_limit_is_refused_by_its_cost(edited_rules):
    old = "  variables:\n    - name: queueName\n"
    doubled = "  variables:\n    - {name: s0, expression: params.labels.keys.queueName}\n" + "".join(
        f"    - {{name: s{i}, expression: variables.s{i - 1} + variables.s{i - 1}}}\n" for i in range(1, 27))
    found = edited_rules(PODS, old, doubled + "    - name: queueName\n")
    assert [f.split(" (CelLimits)")[0] for f in found] == [
        f"{PODS}:{int(at(old).rsplit(':', 1)[1]) + 1 + i}:31 spec.variables[{i}].expression: worst-case cost estimate "
        f"{cost} is over maxExpressionCost 10000000"   # the 20-character label key doubled 22 times and more
        for i, cost in ((22, "1.05e+07"), (23, "2.1e+07"), (24, "4.19e+07"), (25, "8.39e+07"), (26, "1.68e+08"))]


def test_three_hundred_nested_ternaries_are_a_finding_not_a_recursion_error(edited_rules):
    old = "expression: variables.queueName == ''"
    nested = "(variables.queueName == '' ? " * 300 + "true" + " : false)" * 300
    found = edited_rules(PODS, old, f'expression: "{nested}"')
    assert found == [f"{at(old)}:24 spec.mutations[0].denials[0].expression: expression nests "
                     "deeper than 32 levels (parentheses, ternaries, arguments): split it into variables"]


def test_a_broken_generation_is_never_loaded(edited_rules, tmp_path):
    edited_rules(PODS, "expression: variables.queueName == ''", "expression: variables.queueName == '' && 'yes'")
    with pytest.raises(RuleLoadError) as refused:
        load_rules(tmp_path / "rules")
    assert "an operand of && must be bool" in str(refused.value)


def test_a_fault_of_the_checker_is_a_finding_not_a_traceback(monkeypatch):
    """Lint, load and reload never raise out of the type checker: a fault refuses the set, in words."""
    from runtime.rules.cel.check import Checker

    def fault(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(Checker, "visit", fault)
    problems = [str(p) for p in rule_problems(RULES, cache=None)[0]]
    assert problems and all("the type checker could not read this expression (RecursionError(" in p for p in problems)


@pytest.mark.parametrize("literal, text", [
    ('"a\\nb"', "a\nb"), ("'nvidia.com/gpu'", "nvidia.com/gpu"), ('r"a\\n"', "a\\n"),
    ('"""a "quoted" word"""', 'a "quoted" word'), ('"\\u00e9\\x41\\101"', "\u00e9AA"), ('"\\q"', "\\q"),
])
def test_a_string_literal_is_read_as_cel_reads_it(literal, text):
    """Keys and string sizes come from CEL's own decoder (celpy's ``celstr``), the text the rule evaluates."""
    import lark

    from runtime.rules.cel.parse import string_value

    assert string_value(lark.Token("STRING_LIT", literal)) == text


def test_rules_checked_in_several_threads_at_once_give_each_the_same_findings(edited_rules, tmp_path):
    """The reload thread and a CLI check rules in one process at once (the live ``accelpolicy get`` beside
    the controller's reload): each thread's findings are its own and complete, never a checker fault."""
    from concurrent.futures import ThreadPoolExecutor

    old = "expression: variables.queueName == ''"
    broken = edited_rules(PODS, old, old + " && 'yes'")
    roots = [RULES, tmp_path / "rules"] * 4
    with ThreadPoolExecutor(4) as pool:
        found = list(pool.map(lambda root: [str(p) for p in rule_problems(root, cache=None)[0]], roots))
    assert found == [[], broken] * 4
