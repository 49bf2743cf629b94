"""Enforcement modes per AdmissionPolicy (docs/audit.md "Enforcement modes"): deny (default), warn, dryrun.

The same violating Pod is sent to the real webhook app three times, with the rules copied and the
pods-validation policy's ``enforcement`` edited in the copy (no Python edit)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from runtime.engine.admission import AdmissionEngine, admission_view, review_for
from runtime.engine.policy import Policy
from runtime.rules.loader import DEFAULT_RULES_DIR, RuleLoadError, load_rules
from runtime.snapshots import load_snapshot
from runtime.webhook.app import WebhookState, build_app
from tests.builders import pod

A10G_QUEUE = "gpustack-fnv64-c4680bb149644f1c"
POD = pod("two", queue=A10G_QUEUE, image="x", limits={"nvidia.com/gpu": "1", "amd.com/gpu.shared": "1"})
MESSAGE = ('Pod "two" is invalid: spec: Forbidden: a Pod may request only one accelerator family, '
           'found [exclusive shared]')


def _client(tmp_path: Path, mode: str | None):
    root = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, root)
    if mode is not None:
        path = root / "admission" / "pods.yaml"
        text = path.read_text()
        anchor = "  name: pods-validation\nspec:\n"
        assert text.count(anchor) == 1
        path.write_text(text.replace(anchor, anchor + f"  enforcement: {mode}\n"))
    policy = Policy(load_rules(root))
    state = WebhookState()
    state.set_ready(AdmissionEngine(policy), admission_view(policy, load_snapshot(["tests/fixtures/seed/common"])))
    return TestClient(build_app(state, {"/validate-pods": "pods-validation"}))


def _post(client):
    answer = client.post("/validate-pods", json=review_for(POD, uid="u-1")).json()["response"]
    return answer, client.get("/metrics").text


def test_deny_is_the_default(tmp_path):
    answer, metrics = _post(_client(tmp_path, None))
    assert answer["allowed"] is False and answer["status"]["message"] == MESSAGE
    assert "warnings" not in answer
    assert 'accelpolicy_admission_reviews_total{verdict="invalid",webhook="pods-validation"} 1.0' in metrics


def test_warn_allows_and_returns_the_message_as_a_warning(tmp_path):
    answer, metrics = _post(_client(tmp_path, "warn"))
    assert answer == {"uid": "u-1", "allowed": True, "warnings": [MESSAGE]}
    assert 'accelpolicy_admission_reviews_total{verdict="warned",webhook="pods-validation"} 1.0' in metrics


def test_dryrun_allows_silently_and_counts_the_would_be_denial(tmp_path):
    answer, metrics = _post(_client(tmp_path, "dryrun"))
    assert answer == {"uid": "u-1", "allowed": True}
    assert 'accelpolicy_admission_reviews_total{verdict="dryrun-denied",webhook="pods-validation"} 1.0' in metrics
    # the rule that would have denied is still counted
    assert 'accelpolicy_admission_rule_hits_total{rule="one-accelerator-family",webhook="pods-validation"} 1.0' in metrics


def test_an_unknown_mode_is_refused_with_its_line(tmp_path):
    root = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, root)
    path = root / "admission" / "pods.yaml"
    text = path.read_text()
    anchor = "  name: pods-validation\nspec:\n"
    path.write_text(text.replace(anchor, anchor + "  enforcement: audit\n"))
    line = text[: text.index(anchor)].count("\n") + 3
    with pytest.raises(RuleLoadError) as err:
        load_rules(root)
    assert [str(p) for p in err.value.problems] == [
        f"rules/admission/pods.yaml:{line}:16 spec.enforcement: Input should be 'deny', 'warn' or 'dryrun'"]
