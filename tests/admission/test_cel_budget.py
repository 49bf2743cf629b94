"""The run-time CEL budget in admission reviews (docs/rule-authoring.md "Run-time budget").

The rules are copied and the pods-validation policy gains one rule, ``budget-probe``, that only a Pod
labelled ``budget-probe`` reaches: ``loop`` runs a 10^6-iteration comprehension, ``double`` doubles a
string through 26 variables; rules/cel.yaml of the copy sets the limits (no Python edit)."""
from __future__ import annotations

import logging
import shutil
import threading
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from runtime.engine.admission import AdmissionEngine, admission_view, decide, review_for
from runtime.engine.policy import Policy
from runtime.rules.cel.budget import Deadline
from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules
from runtime.snapshots import load_snapshot
from runtime.webhook.app import WebhookState, build_app
from tests.builders import pod

TEN = "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"
LOOP = (f"{TEN}.map(a, {TEN}.map(b, {TEN}.map(c, {TEN}.map(d, {TEN}.map(e, {TEN}.map(f, f * 2)))))).size() > 0")
DOUBLINGS = 26
QUEUE = {"kueue.x-k8s.io/queue-name": "gpustack-fnv64-c4680bb149644f1c"}   # pods-validation judges queued Pods


def _probe() -> str:
    doubling = "".join(f"\n        - name: s{i + 1}\n          expression: variables.s{i} + variables.s{i}"
                       for i in range(DOUBLINGS))
    return f"""    - name: budget-probe
      when: "has(object.metadata.labels) && 'budget-probe' in object.metadata.labels"
      variables:
        - name: s0
          expression: "dig(object, ['metadata', 'labels', 'budget-probe'], '') == 'double' ? 'ab' : ''"{doubling}
      expression: "object.metadata.labels['budget-probe'] == 'loop' ? ({LOOP}) : size(variables.s{DOUBLINGS}) >= 0"
      reason: Invalid
      message: never
"""


def _rules(tmp_path: Path, cost_limit: int = 20000, failure_policy: str = "Fail") -> Path:
    root = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, root)
    path = root / "admission" / "pods.yaml"
    text = path.read_text()
    start = text.index("  name: pods-validation\nspec:\n")
    anchor = text.index("  validations:\n", start) + len("  validations:\n")
    text = text[:anchor] + _probe() + text[anchor:]
    if failure_policy != "Fail":
        text = text.replace("  name: pods-validation\nspec:\n", f"  name: pods-validation\nspec:\n  failurePolicy: {failure_policy}\n")
    path.write_text(text)
    cel = root / "cel.yaml"
    # the static bound lifted (the doubling's estimate, 1.34e7, is over it): what is tested here is the
    # run-time budget that stops an evaluation the estimate let through
    cel.write_text(cel.read_text().replace("costLimit: 1000000", f"costLimit: {cost_limit}")
                   .replace("maxExpressionCost: 10000000", "maxExpressionCost: 1000000000"))
    return root


def _pod(name: str, probe: str | None) -> dict:
    return pod(name, labels={**QUEUE, "budget-probe": probe} if probe else dict(QUEUE), image="x")


@pytest.fixture(scope="module")
def view():
    policy = Policy(load_rules())
    return admission_view(policy, load_snapshot(["tests/fixtures/seed/common"]))


def _client(root: Path, view, **state_kw) -> tuple[TestClient, WebhookState]:
    state = WebhookState(**state_kw)
    state.set_ready(AdmissionEngine(Policy(load_rules(root))), view)
    return TestClient(build_app(state, {"/validate-pods": "pods-validation"})), state


BUDGET_MESSAGE = ("Internal error occurred: policy pods-validation, rule budget-probe: CEL evaluation stopped: its cost "
                  "limit of 20000 units was spent (rules/cel.yaml runtime.costLimit)")


def _line_of(root: Path, needle: str) -> int:
    lines = (root / "admission" / "pods.yaml").read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if needle in line)


def test_a_million_iteration_comprehension_is_answered_500_alone_counted_and_logged(tmp_path, view, caplog):
    root = _rules(tmp_path)
    client, _ = _client(root, view)
    with caplog.at_level(logging.WARNING, logger="runtime.webhook.metrics"):
        answer = client.post("/validate-pods", json=review_for(_pod("loop", "loop"), uid="u-1")).json()["response"]
    assert answer == {"uid": "u-1", "allowed": False, "status": {
        "status": "Failure", "reason": "InternalError", "code": 500, "message": BUDGET_MESSAGE}}
    metrics = client.get("/metrics").text
    assert 'accelpolicy_admission_reviews_total{verdict="budget-exceeded",webhook="pods-validation"} 1.0' in metrics
    assert 'verdict="internal"' not in metrics and 'verdict="denied"' not in metrics
    lines = [r.getMessage() for r in caplog.records if "review stopped" in r.getMessage()]
    assert len(lines) == 1
    line = _line_of(root, "== 'loop' ?")
    where = f"rules/admission/pods.yaml:{line} spec.validations[0].expression"
    assert lines[0] == (f"webhook pods-validation: review stopped (budget-exceeded): policy pods-validation, rule "
                        f"budget-probe, Pod default/loop: {where}: CEL evaluation stopped: its cost limit of 20000 "
                        "units was spent (rules/cel.yaml runtime.costLimit)")
    other = client.post("/validate-pods", json=review_for(_pod("plain", None), uid="u-2")).json()["response"]
    assert other == {"uid": "u-2", "allowed": True}   # the worker is free and judges the next review


def test_a_string_doubled_past_the_size_limit_is_stopped(tmp_path, view):
    root = _rules(tmp_path, cost_limit=1000000)
    engine = AdmissionEngine(Policy(load_rules(root)))
    answer, outcome = decide(engine, review_for(_pod("dbl", "double"), uid="u-3"), view, "pods-validation")
    assert answer["response"]["status"]["message"] == (
        "Internal error occurred: policy pods-validation, rule budget-probe: CEL evaluation stopped: it built a "
        "string longer than 3145728 characters (rules/cel.yaml runtime.maxStringSize)")
    assert (outcome.verdict(), outcome.halt_rule) == ("budget-exceeded", "budget-probe")
    assert outcome.halt_detail.split(": ", 1)[0].endswith("spec.validations[0].variables[21].expression")  # s21: 2^22 characters


def test_failure_policy_ignore_admits_a_budget_stop_with_its_own_verdict(tmp_path, view):
    engine = AdmissionEngine(Policy(load_rules(_rules(tmp_path, failure_policy="Ignore"))))
    answer, outcome = decide(engine, review_for(_pod("loop", "loop"), uid="u-4"), view, "pods-validation")
    assert answer["response"] == {"uid": "u-4", "allowed": True}
    assert outcome.verdict() == "budget-exceeded"


def test_a_review_past_its_deadline_stops_inside_a_comprehension(tmp_path, view):
    """No cost limit to speak of: only the deadline (the cancel event the webhook sets) stops it. The
    evaluation thread returns once cancelled; before the budget it ran to the end of the expression."""
    engine = AdmissionEngine(Policy(load_rules(_rules(tmp_path, cost_limit=10 ** 12))))
    cancel, started, done = threading.Event(), threading.Event(), threading.Event()
    result = {}
    real = engine._eval

    def watched(expr, scope):
        if "f * 2" in str(expr):
            started.set()
        return real(expr, scope)

    engine._eval = watched

    def review():
        result["outcome"] = decide(engine, review_for(_pod("loop", "loop"), uid="u-5"), view, "pods-validation",
                                   cancel=Deadline(8, cancel))[1]
        done.set()

    thread = threading.Thread(target=review, daemon=True)
    thread.start()
    assert started.wait(60)
    cancel.set()
    assert done.wait(120)   # the 10^6 iterations take far longer: only a stop inside the expression ends it
    outcome = result["outcome"]
    assert (outcome.verdict(), outcome.halt_rule, outcome.denial) == ("timeout", "budget-probe", (
        504, "Timeout", "webhook pods-validation: the review was not judged within its 8s deadline; retry"))


def test_the_webhook_counts_a_timeout_as_timeout_not_denied(tmp_path, view, caplog):
    client, state = _client(_rules(tmp_path, cost_limit=10 ** 12), view, deadline_seconds=0.5)
    with caplog.at_level(logging.WARNING, logger="runtime.webhook.metrics"):
        answer = client.post("/validate-pods", json=review_for(_pod("slow", "loop"), uid="u-6")).json()["response"]
    assert answer["status"] == {"status": "Failure", "reason": "Timeout", "code": 504, "message":
                                "webhook pods-validation: the review was not judged within its 0.5s deadline; retry"}
    metrics = client.get("/metrics").text
    assert 'accelpolicy_admission_reviews_total{verdict="timeout",webhook="pods-validation"} 1.0' in metrics
    assert 'verdict="denied"' not in metrics
    logged = [r.getMessage() for r in caplog.records if "review stopped" in r.getMessage()]
    head = "webhook pods-validation: review stopped (timeout): policy pods-validation, rule "
    line = _line_of(tmp_path / "rules", "== 'loop' ?")
    # who notices first: the engine's own deadline inside the comprehension, or the server's wait; either
    # names the rule whose expression was running
    assert logged in ([f"{head}budget-probe, Pod default/slow: rules/admission/pods.yaml:{line} "
                       "spec.validations[0].expression: deadline passed"],
                      [f"{head}budget-probe, Pod default/slow: answered at the deadline; the evaluation stops at "
                       "its next budget check"])
    state.close()
