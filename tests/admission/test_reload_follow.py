"""An admission replica follows the controller's leader on a rules change (docs/rule-authoring.md "How
a rules change goes live"): a generation it accepted serves once the rules ConfigMap's verdict
annotation accepts the same fingerprint (or after reloadGate.followSeconds without a verdict); one the
leader refused is refused; one it refused itself but the leader accepted serves too, so replicas serve
one generation."""
from __future__ import annotations

import shutil

import pytest

from runtime.engine.admission import AdmissionEngine, admission_view, review_for
from runtime.engine.policy import Policy
from runtime.gate import try_generation
from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules
from runtime.rules.reload import fingerprint
from runtime.snapshots import load_snapshot
from runtime.webhook.app import WebhookState
from runtime.webhook.reload import WebhookRulesReload
from tests.controller.test_reload_gate import EVAL_ERROR, RULE_1A, TWO_FAMILIES, _edit

SEED = load_snapshot(["tests/fixtures/seed/common"])


@pytest.fixture
def replica(tmp_path):
    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules)
    shutil.rmtree(rules / "tests")
    initial = load_rules(rules)
    state = WebhookState()
    engine = AdmissionEngine(Policy(initial))
    state.set_ready(engine, admission_view(Policy(initial), SEED))
    verdict = {"value": None}
    reload = WebhookRulesReload(state, {spec.path: n for n, spec in engine.policies.items()}, rules,
                                lambda p: admission_view(p, SEED), initial, interval=0,
                                gate=lambda serving, rs, eng, reviews: try_generation(serving, rs, SEED, reviews,
                                                                                      engine=eng),
                                leader_verdict=lambda: verdict["value"])
    return reload, state, rules, verdict


def _refused(reload, reason):
    return reload.metrics.registry.get_sample_value("accelpolicy_rules_refused_total", {"reason": reason})


def test_an_accepted_generation_waits_for_the_leader_then_serves(replica):
    reload, state, rules, verdict = replica
    before = state.engine
    _edit(rules / "admission" / "pods.yaml", RULE_1A, "      expression: size(variables.families) <= 2\n")
    assert reload.watcher.poll() is False and reload.pending is not None
    assert state.engine is before and reload.serving.generation < reload.pending.ruleset.generation
    verdict["value"] = "accepted:0000"              # another fingerprint: still waiting
    reload.follow()
    assert state.engine is before
    verdict["value"] = f"accepted:{fingerprint(rules)}"
    reload.watcher.tick()                           # nothing changed on disk: the idle step follows the leader
    assert state.engine is not before and reload.pending is None
    assert reload.metrics.registry.get_sample_value("accelpolicy_rules_generation") == reload.serving.generation


def test_a_generation_the_leader_refused_is_refused(replica):
    reload, state, rules, verdict = replica
    before = state.engine
    _edit(rules / "admission" / "pods.yaml", RULE_1A, "      expression: size(variables.families) <= 2\n")
    verdict["value"] = f"refused:{fingerprint(rules)}"
    assert reload.watcher.poll() is False
    assert state.engine is before and reload.pending is None
    assert reload.last_trial.reason == "leader" and _refused(reload, "leader") == 1.0


def test_a_generation_refused_here_but_accepted_by_the_leader_serves(replica):
    reload, state, rules, verdict = replica
    before = state.engine
    state.sample.record("pods-validation", review_for(TWO_FAMILIES, uid="u-1"), 900)
    _edit(rules / "admission" / "pods.yaml", RULE_1A, EVAL_ERROR)
    assert reload.watcher.poll() is False
    assert reload.pending.trial.reason == "replay-review" and state.engine is before
    verdict["value"] = f"accepted:{fingerprint(rules)}"
    reload.follow()
    assert state.engine is not before and reload.pending is None


def test_without_a_verdict_the_replica_decides_alone_after_follow_seconds(replica):
    reload, state, rules, verdict = replica
    before = state.engine
    state.sample.record("pods-validation", review_for(TWO_FAMILIES, uid="u-1"), 900)
    _edit(rules / "pools" / "derivation.yaml", "    followSeconds: 60\n", "    followSeconds: 0\n")
    _edit(rules / "admission" / "pods.yaml", RULE_1A, EVAL_ERROR)
    assert reload.watcher.poll() is False
    assert state.engine is before and _refused(reload, "replay-review") == 1.0
    verdict["value"] = f"accepted:{fingerprint(rules)}"   # a later leader verdict still settles it
    reload.follow()
    assert state.engine is not before
