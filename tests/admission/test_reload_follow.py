"""A replica follows the one verdict per generation (docs/rule-authoring.md "How a rules change goes live"):
a generation serves once the rules ConfigMap's verdict accepts (or approves) that very content hash, and
never before; one the leader refused or holds is not served; one refused here but accepted by the leader
serves too (it told the leader at ``/generation``, and the leader decided with it); without a verdict it
keeps the generation in force however long it waits, never deciding alone."""
from __future__ import annotations

import pytest

from runtime.engine.admission import AdmissionEngine, admission_view, review_for
from runtime.engine.policy import Policy
from runtime.reload.board import Board
from runtime.reload.holder import RulesHolder
from runtime.reload.hosts import WebhookHost
from runtime.reload.watcher import content_hash, generation_id
from runtime.rules.loader import load_rules
from runtime.snapshots import load_snapshot
from runtime.webhook.host import WebhookServer
from tests.controller.test_reload_gate import CONFIGMAP, EVAL_ERROR, RULE_1A, TWO_FAMILIES, _edit, rules_copy
from tests.fakeapi import FakeApi

SEED = load_snapshot(["tests/fixtures/seed/common"])


@pytest.fixture
def replica(tmp_path):
    rules = rules_copy(tmp_path)
    initial = load_rules(rules)
    server = WebhookServer(AdmissionEngine(Policy(initial)))   # never serves: the tests read its state
    server.install(server.engine, admission_view(Policy(initial), SEED))
    state = server.state
    api = FakeApi({"ConfigMap": [{"apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": CONFIGMAP[1], "namespace": CONFIGMAP[0], "annotations": {}}}]})
    board = Board(api, *CONFIGMAP, keys=lambda: initial.get("ReloadGate").annotations)
    holder = RulesHolder(WebhookHost(server, SEED, lambda p: admission_view(p, SEED)), rules, initial, board=board,
                         decides=lambda: False, interval=0)
    return holder, state, rules, api


def verdict(api, value: str) -> None:
    api.get("ConfigMap", CONFIGMAP[1], CONFIGMAP[0])["metadata"]["annotations"]["rules.accelpolicy.dev/verdict"] = value


def _refused(holder, reason):
    return holder.metrics.registry.get_sample_value("accelpolicy_rules_refused_total", {"reason": reason})


def test_an_accepted_generation_waits_for_the_leader_then_serves(replica):
    holder, state, rules, api = replica
    before, first = state.engine, holder.id
    _edit(rules / "admission" / "pods.yaml", RULE_1A, "      expression: size(variables.families) <= 2\n")
    assert holder.watcher.poll() is False and holder.pending is not None
    tried = generation_id(content_hash(rules))
    assert state.engine is before and holder.pending.id == tried
    verdict(api, f"accepted:{first}")               # another generation's verdict: still waiting
    holder.watcher.tick()
    assert state.engine is before
    verdict(api, f"accepted:{tried}")
    holder.watcher.tick()                           # nothing changed on disk: the idle step follows the leader
    assert state.engine is not before and holder.pending is None and holder.id == tried
    assert holder.metrics.registry.get_sample_value("accelpolicy_rules_generation", {"generation": tried}) == 1.0


def test_a_generation_the_leader_refused_is_refused(replica):
    holder, state, rules, api = replica
    before = state.engine
    _edit(rules / "admission" / "pods.yaml", RULE_1A, "      expression: size(variables.families) <= 2\n")
    verdict(api, f"refused:{generation_id(content_hash(rules))}")
    assert holder.watcher.poll() is False
    assert state.engine is before and holder.pending.state == "refused"
    assert holder.last_trial.reason == "leader" and _refused(holder, "leader") == 1.0


def test_a_generation_refused_here_but_accepted_by_the_leader_serves(replica):
    holder, state, rules, api = replica
    before = state.engine
    state.sample.record("pods-validation", review_for(TWO_FAMILIES, uid="u-1"), 900)
    _edit(rules / "admission" / "pods.yaml", RULE_1A, EVAL_ERROR)
    assert holder.watcher.poll() is False
    assert holder.pending.trial.reason == "replay-review" and state.engine is before
    report = holder.report()["tried"]                # what the leader reads at /generation
    assert (report["generation"], report["reason"]) == (generation_id(content_hash(rules)), "replay-review")
    verdict(api, f"accepted:{holder.pending.id}")
    holder.settle()
    assert state.engine is not before and holder.pending is None


def test_without_a_verdict_the_replica_never_decides_alone(replica):
    holder, state, rules, api = replica
    before = state.engine
    _edit(rules / "reload.yaml", "  followSeconds: 60\n", "  followSeconds: 0\n")
    _edit(rules / "admission" / "pods.yaml", RULE_1A, "      expression: size(variables.families) <= 2\n")
    assert holder.watcher.poll() is False
    for _ in range(3):
        holder.watcher.tick()
    assert state.engine is before and holder.pending.state == "new"


def test_a_held_generation_serves_once_approved(replica):
    holder, state, rules, api = replica
    before = state.engine
    _edit(rules / "admission" / "pods.yaml", RULE_1A, '      expression: "false"\n')
    holder.watcher.poll()
    tried = holder.pending.id
    verdict(api, f"held:{tried}")
    holder.settle()
    assert state.engine is before and holder.pending.state == "held"
    assert holder.metrics.registry.get_sample_value("accelpolicy_rules_held", {"generation": tried}) == 1.0
    verdict(api, f"approved:{tried}")
    holder.settle()
    assert state.engine is not before and holder.id == tried
