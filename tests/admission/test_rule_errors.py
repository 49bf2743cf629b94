"""A rule that fails at run time is seen (docs/observability.md "Rule errors"): counted with its own verdict
``rule-error`` whatever its policy answers (under ``failurePolicy: Ignore`` the review is allowed, not
counted ``allowed``), logged once per policy, rule and error class, rate-limited, naming the object; a
timeout names the rule whose expression was running.

The rules are copied and the pods-validation policy gains ``error-probe``, reached only by a Pod labelled
``error-probe``: ``key`` reads a label the Pod lacks (KeyError), ``add`` divides by its length less 3
(ZeroDivisionError)."""
from __future__ import annotations

import logging
import shutil
import time
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

QUEUE = {"kueue.x-k8s.io/queue-name": "gpustack-fnv64-c4680bb149644f1c"}   # pods-validation judges queued Pods
PROBE = """    - name: error-probe
      when: "has(object.metadata.labels) && 'error-probe' in object.metadata.labels"
      expression: >-
        object.metadata.labels['error-probe'] == 'key' ? object.metadata.labels['team'] == 'x'
        : 1 / (size(object.metadata.labels['error-probe']) - 3) > 0
      reason: Invalid
      message: never
"""


def _rules(tmp_path: Path, failure_policy: str) -> Path:
    root = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, root, ignore=shutil.ignore_patterns("tests"))
    path = root / "admission" / "pods.yaml"
    text = path.read_text()
    head = "  name: pods-validation\nspec:\n"
    anchor = text.index("  validations:\n", text.index(head)) + len("  validations:\n")
    text = text[:anchor] + PROBE + text[anchor:]
    path.write_text(text.replace(head, f"{head}  failurePolicy: {failure_policy}\n"))
    return root


@pytest.fixture(scope="module")
def view():
    return admission_view(Policy(load_rules()), load_snapshot(["tests/fixtures/seed/common"]))


def _client(root: Path, view) -> TestClient:
    state = WebhookState()
    state.set_ready(AdmissionEngine(Policy(load_rules(root))), view)
    return TestClient(build_app(state, {"/validate-pods": "pods-validation"}))


def _post(client: TestClient, name: str, probe: str) -> dict:
    review = review_for(pod(name, labels={**QUEUE, "error-probe": probe}, image="x"), uid=f"u-{name}")
    return client.post("/validate-pods", json=review).json()["response"]


def _where(root: Path) -> str:
    lines = (root / "admission" / "pods.yaml").read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if "- name: error-probe" in text) + 2
    return f"rules/admission/pods.yaml:{line} spec.validations[0].expression"


def test_under_ignore_a_rule_error_is_allowed_counted_rule_error_and_logged_once_per_class(tmp_path, view, caplog):
    root = _rules(tmp_path, "Ignore")
    client = _client(root, view)
    with caplog.at_level(logging.WARNING, logger="runtime.webhook.metrics"):
        answers = [_post(client, f"p{i}", probe) for i, probe in enumerate(["key", "key", "add", "key", "add"])]
    assert answers == [{"uid": f"u-p{i}", "allowed": True} for i in range(5)]
    metrics = client.get("/metrics").text
    assert 'accelpolicy_admission_reviews_total{verdict="rule-error",webhook="pods-validation"} 5.0' in metrics
    assert 'verdict="allowed"' not in metrics
    logged = [r.getMessage() for r in caplog.records if "review stopped" in r.getMessage()]
    source = ("object.metadata.labels['error-probe'] == 'key' ? object.metadata.labels['team'] == 'x' : "
              "1 / (size(object.metadata.labels['error-probe']) - 3) > 0")
    head = "webhook pods-validation: review stopped (rule-error {}): policy pods-validation, rule error-probe, Pod "
    assert logged == [
        head.format("KeyError") + f'default/p0: {_where(root)}: evaluating "{source}": no such member in mapping: '
                                  "StringType('team'): team",
        head.format("ZeroDivisionError") + f'default/p2: {_where(root)}: evaluating "{source}": divide by zero: '
                                           "integer division or modulo by zero"]


def test_under_fail_a_rule_error_is_a_500_counted_rule_error(tmp_path, view):
    client = _client(_rules(tmp_path, "Fail"), view)
    answer = _post(client, "f", "key")
    assert answer["allowed"] is False and answer["status"]["code"] == 500
    assert answer["status"]["message"].startswith("Internal error occurred: policy pods-validation: ")
    assert 'accelpolicy_admission_reviews_total{verdict="rule-error",webhook="pods-validation"} 1.0' \
        in client.get("/metrics").text


def test_a_deadline_passed_between_expressions_names_the_rule_that_spent_it(tmp_path, view):
    """The probe's expression takes 0.3 s of a 0.2 s deadline (no budget check inside it); the next
    expression (the next rule's) notices: the outcome names error-probe, not the rule about to start."""
    engine = AdmissionEngine(Policy(load_rules(_rules(tmp_path, "Fail"))))
    real = engine._eval

    def slow(expr, scope):
        value = real(expr, scope)
        if "error-probe'] == 'key'" in str(expr):
            time.sleep(0.3)
        return value

    engine._eval = slow
    review = review_for(pod("slow", labels={**QUEUE, "error-probe": "none", "team": "x"}, image="x"), uid="u-s")
    outcome = decide(engine, review, view, "pods-validation", cancel=Deadline(0.2))[1]
    assert (outcome.verdict(), outcome.halt_rule) == ("timeout", "error-probe")
