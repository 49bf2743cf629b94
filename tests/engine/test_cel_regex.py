"""The regexes of the rules run on RE2 with Kubernetes' meaning (docs/rule-authoring.md "Regular
expressions"): linear time, a partial match in both forms of ``matches``, a pattern RE2 refuses a
finding at lint with its file:line:col, the regex priced by the static checks and the run-time budget."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from runtime.model import regex
from runtime.model.cellimits import CelRuntimeLimits
from runtime.rules.cel.compile import compile_expression
from runtime.rules.cel.errors import CelBudgetExceeded, CelEvalError
from runtime.rules.cel.library.table import LIBRARY
from tests.rulelines import shipped_line

ROOT = Path(__file__).resolve().parents[2]
ACCELPOLICY = [sys.executable, "-c", "from runtime.cli import main; main(prog_name='accelpolicy')"]
BACKTRACKING = "([a-z0-9]+-?)+[a-z0-9]"   # lints clean; Python's re.fullmatch takes 2^n on 'aaa...A'
TEAM_RULE = """    - name: team-label
      expression: "dig(object, ['metadata', 'labels', 'team'], 'x').matches('^{pattern}$')"
      reason: Forbidden
      field: metadata.labels.team
      message: must be lower-case words joined by single dashes
""".replace("{pattern}", BACKTRACKING)
POD = """apiVersion: v1
kind: Pod
metadata: {{name: labelled, namespace: default, labels: {{team: {team}, kueue.x-k8s.io/queue-name: demo}}}}
spec:
  containers: [{{name: c, image: busybox}}]
"""


def _evaluate(source: str, **variables):
    return compile_expression(source, "test").evaluate(variables, memo=False)


def test_matches_is_a_partial_match_in_both_forms():
    assert _evaluate("'my-gpu-job'.matches('gpu')") is True
    assert _evaluate("matches('my-gpu-job', 'gpu')") is True
    assert _evaluate("'my-gpu-job'.matches('^gpu$')") is False
    assert _evaluate("matches('my-gpu-job', '^my-[a-z]+-job$')") is True


def test_a_pattern_built_at_run_time_that_re2_refuses_is_an_error_naming_it():
    with pytest.raises(CelEvalError) as failed:
        _evaluate("matches(v, '(a)' + p)", v="aa", p="\\1")
    assert str(failed.value) == ("test: evaluating \"matches(v, '(a)' + p)\": invalid RE2 regular expression "
                                 "'(a)\\1': invalid escape sequence: \\1 (RE2 has no backreferences)")
    assert _evaluate("true || matches(v, p)", v="a", p="([a-z") is True   # an error value, as CEL's


def test_a_63_character_label_is_judged_by_the_rules_in_a_child_process(tmp_path):
    """The backtracking regex in a copied rules dir, judged by ``accelpolicy admit`` in a child process
    that must finish within 120 s (Python's re took about 36 s at 28 characters and doubles per
    character: at 63 it never finishes); the verdict is the rule's."""
    rules = tmp_path / "rules"
    subprocess.run(["cp", "-r", str(ROOT / "rules"), str(rules)], check=True)
    pods = rules / "admission" / "pods.yaml"
    text = pods.read_text()
    anchor = "  validations:\n    - name: sidecar-requests-no-accelerator\n"
    assert anchor in text
    pods.write_text(text.replace(anchor, "  validations:\n" + TEAM_RULE + anchor[len("  validations:\n"):], 1))
    results = {}
    for team in ("a" * 62 + "A", "a" * 30 + "-" + "b" * 32):
        pod = tmp_path / f"{team[-1]}.yaml"
        pod.write_text(POD.format(team=team))
        done = subprocess.run(ACCELPOLICY + ["admit", "-f", str(pod), "--rules", str(rules),
                                             "--snapshot", str(ROOT / "tests/fixtures/seed/common"), "-o", "text"],
                              capture_output=True, text=True, timeout=120, cwd=ROOT)
        results[len(team), team[-1]] = (done.returncode, [line for line in done.stdout.splitlines()
                                                          if line.startswith(("verdict:", "message:"))])
    assert results == {
        (63, "A"): (1, ["verdict:  denied (422 Invalid)",
                        'message:  Pod "labelled" is invalid: metadata.labels.team: Forbidden: '
                        "must be lower-case words joined by single dashes"]),
        (63, "b"): (0, ["verdict:  allowed"]),
    }


def test_the_backtracking_regex_runs_in_linear_time_in_process():
    """Completes (the old engine would hold the interpreter for hours); the figure is in
    benchmarks/regex.py."""
    pattern = f"^{BACKTRACKING}$"
    assert regex.search(pattern, "a" * 62 + "A") is False
    assert _evaluate(f"v.matches('{pattern}')", v="a" * 62 + "A") is False
    assert _evaluate(f"v.matches('{pattern}')", v="ab-" * 20 + "abc") is True


@pytest.mark.parametrize("edit, column, message", [
    ("'([a-z'", 85, "invalid RE2 regular expression '([a-z': missing ]: [a-z"),
    ("'(a)\\\\1'", 85, "invalid RE2 regular expression '(a)\\1': invalid escape sequence: \\1 "
                       "(RE2 has no backreferences)"),
    ("'(?<=v)1'", 85, "invalid RE2 regular expression '(?<=v)1': invalid perl operator: (?<= "
                      "(RE2 has no look-around)"),
])
def test_a_literal_pattern_re2_refuses_is_a_lint_finding(edited_rules, edit, column, message):
    old = "matches(string(variables.value), params.imageReference)"
    found = edited_rules("rules/admission/settings.yaml", old, f"matches(string(variables.value), {edit})")
    line = shipped_line("rules/admission/settings.yaml", old)
    assert found == [f"rules/admission/settings.yaml:{line}:{column} spec.validations[4].expression: {message}"]


def test_a_params_pattern_re2_refuses_is_a_lint_finding(edited_rules):
    old = "    positiveGi: '^[1-9][0-9]*Gi$'"
    found = edited_rules("rules/admission/instancetypes.yaml", old, "    positiveGi: '^([1-9][0-9]*Gi$'")
    wrong = "params.positiveGi: invalid RE2 regular expression '^([1-9][0-9]*Gi$': missing ): ^([1-9][0-9]*Gi$"
    ram = shipped_line("rules/admission/instancetypes.yaml", "['unitResources', 'ram'], '')), params.positiveGi)")
    storage = shipped_line("rules/admission/instancetypes.yaml", "['localStorage'], '')), params.positiveGi)")
    assert found == [   # at each use: the column of params.positiveGi in the expression
        f"rules/admission/instancetypes.yaml:{ram}:91 spec.validations[0].validations[6].expression: {wrong}",
        f"rules/admission/instancetypes.yaml:{storage}:83 spec.validations[0].validations[7].expression: {wrong}"]


def test_a_rewrite_pattern_re2_refuses_is_a_lint_finding_at_its_field(edited_rules):
    old = "pattern: '^([0-9]+)g([0-9]+)gb$'"
    found = edited_rules("rules/agent.yaml", old, "pattern: '^([0-9]+)g(?=[0-9]+)gb$'")
    line = shipped_line("rules/agent.yaml", old)
    assert found == [f"rules/agent.yaml:{line}:38 spec.profileRewrites[0].pattern: invalid RE2 "
                     "regular expression '^([0-9]+)g(?=[0-9]+)gb$': invalid perl operator: (?= "
                     "(RE2 has no look-around)"]


def test_the_regex_is_priced_as_kubernetes_prices_it():
    assert LIBRARY["matches"].price([63, 24]) == 1 + 7 * 6
    assert LIBRARY["matches"].price([float("inf"), 4]) == float("inf")
    assert LIBRARY["sortedUnique"].price([1024]) == 1 + 1024 * 11


def test_a_regex_over_a_long_text_the_budget_cannot_pay_is_never_started():
    expr = compile_expression("matches(v, p)", "test")
    expr.limits = CelRuntimeLimits(costLimit=1000)
    with pytest.raises(CelBudgetExceeded) as stopped:
        expr.evaluate({"v": "a" * 100_000, "p": "a+b"}, memo=False)
    assert (stopped.value.reason, stopped.value.cost) == ("cost", 1 + 10_000 * 1)


def test_duration_of_a_long_non_duration_answers_at_once():
    """cel-python parses ``duration()`` with a Python regex that backtracks (24 characters took 3.7 s,
    each one more doubles it); it is matched by RE2 first, the answer cel-python's own."""
    assert _evaluate("duration(v) > duration('1s')", v="1h30m") is True
    with pytest.raises(CelEvalError) as failed:
        _evaluate("duration(v) > duration('1s')", v="a" * 62 + "!")
    assert str(failed.value) == ("test: evaluating \"duration(v) > duration('1s')\": return error for overflow: "
                                 f"Invalid duration StringType('{'a' * 62}!')")
