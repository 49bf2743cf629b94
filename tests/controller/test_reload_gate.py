"""The reload gate (docs/rule-authoring.md "How a rules change goes live"): a generation that loads is
tried on the rule suites, the cluster's objects (the audit's view of the seed audit fixture) and the
reviews answered recently before it replaces the serving one; a refused one leaves the old generation
serving, says why (log, ``accelpolicy_rules_refused_total{reason}``, an Event on the rules ConfigMap,
the ConfigMap's verdict annotation) and leaves ``accelpolicy_rules_generation`` unchanged."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from runtime.controller.clock import utc_now
from runtime.controller.rulesreload import ControllerRulesReload
from runtime.engine.admission import review_for
from runtime.engine.policy import Policy
from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules
from runtime.rules.reload import VerdictChange, fingerprint
from runtime.snapshots import load_snapshot
from runtime.webhook.app import WebhookState
from runtime.webhook.sample import ReviewSample
from tests.builders import pod

SEED = ["tests/fixtures/seed/common", "tests/fixtures/audit/seed-cluster"]
CONFIGMAP = ("gpustack-system", "accelpolicy-rules")
RULE_1A = "      expression: size(variables.families) <= 1\n"
TWO_FAMILIES = pod("two", queue="gpustack-fnv64-c4680bb149644f1c", image="x",
                   limits={"nvidia.com/gpu": "1", "nvidia.com/gpu.shared": "2"})
EVAL_ERROR = "      expression: size(variables.families) <= 1 || object.metadata.labels['no-such-label'] == 'x'\n"
RULE_1A_LINE = (DEFAULT_RULES_DIR / "admission" / "pods.yaml").read_text().splitlines(keepends=True).index(RULE_1A) + 1
EVAL_TEXT = (f"policy pods-validation: rules/admission/pods.yaml:{RULE_1A_LINE} spec.validations[1].expression: evaluating "
             "\"size(variables.families) <= 1 || object.metadata.labels['no-such-label'] == 'x'\": no such member in "
             "mapping: StringType('no-such-label'): no-such-label")   # the evaluation error EVAL_ERROR makes


class Applier:
    def __init__(self):
        self.created, self.patched, self.policy = [], [], None

    def create(self, obj):
        self.created.append(obj)

    def merge_patch(self, kind, name, patch, namespace=""):
        self.patched.append((kind, namespace, name, patch))


class Cache:
    def __init__(self, snapshot):
        self.held = snapshot

    def snapshot(self):
        return self.held


class Controller:
    settings_namespace = "gpustack-system"
    clock = staticmethod(utc_now)

    def __init__(self, policy, snapshot):
        self.policy, self.applier, self.cache, self.reconciles = policy, Applier(), Cache(snapshot), 0

    def request_reconcile(self):
        self.reconciles += 1


class Webhooks:
    def __init__(self):
        self.state, self.swapped = WebhookState(), []

    def swap(self, policy, engine):
        self.swapped.append(policy.ruleset.generation)


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))


@pytest.fixture
def gate(tmp_path):
    """A controller on the seed audit fixture with a rules copy (no suites: the chart's ConfigMap has none)
    and webhooks; returns (reload, controller, webhooks, rules dir)."""
    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules)
    shutil.rmtree(rules / "tests")
    controller = Controller(Policy(load_rules(rules)), load_snapshot(SEED))
    webhooks = Webhooks()
    reload = ControllerRulesReload(controller, rules, webhooks, interval=0, configmap=CONFIGMAP)
    return reload, controller, webhooks, rules


def _metric(reload, name, **labels):
    return reload.registry.get_sample_value(name, labels or None)


def _events(controller):
    return [(e["type"], e["reason"], e["involvedObject"], e["message"]) for e in controller.applier.created]


def _refused_as_said(reload, controller, reason, problems, before, reconciles=0):
    """The old generation serves, the metrics, Event and verdict annotation say why."""
    generation = before.ruleset.generation
    assert controller.policy is before and controller.reconciles == reconciles
    assert reload.watcher.current is before.ruleset
    assert _metric(reload, "accelpolicy_rules_generation") == generation
    assert _metric(reload, "accelpolicy_rules_refused_total", reason=reason) == 1.0
    assert _metric(reload, "accelpolicy_rules_reload_failures_total") == 1.0
    involved = {"apiVersion": "v1", "kind": "ConfigMap", "name": "accelpolicy-rules", "namespace": "gpustack-system"}
    message = f"rules in {reload.watcher.root} refused; generation {generation} keeps serving:\n" + "\n".join(problems)
    assert _events(controller)[-1] == ("Warning", "RulesRefused", involved, message)
    assert controller.applier.created[-1]["metadata"]["namespace"] == "gpustack-system"
    assert controller.applier.patched[-1] == ("ConfigMap", "gpustack-system", "accelpolicy-rules", {
        "metadata": {"annotations": {"rules.accelpolicy.dev/verdict": f"refused:{fingerprint(reload.watcher.root)}"}}})


def test_a_yaml_error_is_refused_and_the_old_generation_keeps_serving(gate):
    reload, controller, webhooks, rules = gate
    before = controller.policy
    (rules / "admission" / "broken.yaml").write_text("kind: AdmissionPolicy\nspec: [\n")
    assert reload.watcher.poll() is False
    problem = reload.last_trial.problems
    assert reload.last_trial.reason == "lint" and len(problem) == 1
    assert problem[0].startswith("rules/admission/broken.yaml:3:1 <document>: ")
    _refused_as_said(reload, controller, "lint", problem, before)
    assert webhooks.swapped == []


def test_a_failing_rule_suite_is_refused(tmp_path):
    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules)
    controller = Controller(Policy(load_rules(rules)), load_snapshot(SEED))
    reload = ControllerRulesReload(controller, rules, Webhooks(), interval=0, configmap=CONFIGMAP)
    before = controller.policy
    _edit(rules / "admission" / "pods.yaml", "'a Pod may request only one accelerator family, found ['",
          "'one family per Pod, found ['")
    assert reload.watcher.poll() is False
    suite = rules / "tests" / "admission" / "pods.yaml"
    cases = ["pods-seed::one-accelerator-family: exclusive and sliced",
             "pods-seed::two families across containers; visibility and RDMA keys never claim"]
    got = {"one-accelerator-family: exclusive and sliced": "exclusive sliced", cases[1].split("::")[1]: "exclusive shared"}
    problems = [f"suite: FAIL {case} ({suite}): message: want 'Pod \"demo\" is invalid: spec: Forbidden: a Pod may "
                f"request only one accelerator family, found [{got[case.split('::')[1]]}]' got  'Pod \"demo\" is "
                f"invalid: spec: Forbidden: one family per Pod, found [{got[case.split('::')[1]]}]'" for case in cases]
    assert [f"suite: {p}" for p in reload.last_trial.problems] == problems
    _refused_as_said(reload, controller, "suite", problems, before)


def test_an_evaluation_error_on_an_existing_object_is_refused(gate):
    reload, controller, webhooks, rules = gate
    before = controller.policy
    _edit(rules / "admission" / "pods.yaml", RULE_1A, EVAL_ERROR)
    assert reload.watcher.poll() is False
    problems = [f"replay-object: Pod default/two-families: {EVAL_TEXT}"]
    _refused_as_said(reload, controller, "replay-object", problems, before)


def test_an_error_the_serving_rules_make_too_does_not_refuse_an_edit(tmp_path):
    """Rules that already fail on an existing object can still be replaced (by a fix or by another edit)."""
    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules)
    shutil.rmtree(rules / "tests")
    _edit(rules / "admission" / "pods.yaml", RULE_1A, EVAL_ERROR)
    controller = Controller(Policy(load_rules(rules)), load_snapshot(SEED))
    reload = ControllerRulesReload(controller, rules, Webhooks(), interval=0)
    _edit(rules / "constants.yaml", "sharesPerAccelerator: 10 ", "sharesPerAccelerator: 20 ")
    assert reload.watcher.poll() is True and reload.last_trial.problems == []
    assert controller.policy.ruleset is reload.watcher.current


def test_an_evaluation_error_on_a_review_answered_recently_is_refused(gate):
    reload, controller, webhooks, rules = gate
    controller.cache.held = load_snapshot(SEED[:1])   # no existing Pod: only the review meets the error
    before = controller.policy
    webhooks.state.sample.record("pods-validation", review_for(TWO_FAMILIES, uid="u-1"), 900)
    _edit(rules / "admission" / "pods.yaml", RULE_1A, EVAL_ERROR)
    assert reload.watcher.poll() is False
    problems = [f"replay-review: a review answered recently (CREATE Pod default/two, webhook pods-validation): "
                f"{EVAL_TEXT}"]
    _refused_as_said(reload, controller, "replay-review", problems, before)


def test_a_correct_edit_goes_live_with_its_verdict_changes_reported(gate):
    reload, controller, webhooks, rules = gate
    webhooks.state.sample.record("pods-validation", review_for(TWO_FAMILIES, uid="u-1"), 900)
    _edit(rules / "admission" / "pods.yaml", RULE_1A, "      expression: size(variables.families) <= 2\n")
    assert reload.watcher.poll() is True
    generation = controller.policy.ruleset.generation
    assert controller.policy.ruleset is reload.watcher.current and controller.reconciles == 1
    assert webhooks.swapped == [generation]
    assert _metric(reload, "accelpolicy_rules_generation") == generation
    assert reload.last_trial.changes == [
        VerdictChange("pods-validation", "one-accelerator-family", "Pod default/two-families", "denied", "allowed", "object"),
        VerdictChange("pods-validation", "one-accelerator-family", "CREATE Pod default/two", "denied", "allowed", "review")]
    involved = {"apiVersion": "v1", "kind": "ConfigMap", "name": "accelpolicy-rules", "namespace": "gpustack-system"}
    assert _events(controller) == [
        ("Normal", "RulesVerdictsChanged", involved, f"rules generation {generation} changes 2 verdict(s):\n"
         "pods-validation/one-accelerator-family Pod default/two-families: denied -> allowed\n"
         "pods-validation/one-accelerator-family CREATE Pod default/two (a recent review): denied -> allowed"),
        ("Normal", "RulesReloaded", involved, f"rules generation {generation} from {rules} in force "
         f"(loaded in {reload.watcher.last_seconds:.3f}s)")]
    assert controller.applier.patched == [("ConfigMap", "gpustack-system", "accelpolicy-rules", {
        "metadata": {"annotations": {"rules.accelpolicy.dev/verdict": f"accepted:{fingerprint(rules)}"}}})]


def test_a_generation_that_newly_denies_more_than_max_new_denials_is_held(gate):
    reload, controller, webhooks, rules = gate
    pods = rules / "admission" / "pods.yaml"
    _edit(pods, RULE_1A, "      expression: size(variables.families) <= 2\n")
    assert reload.watcher.poll() is True          # serving: two families allowed
    before = controller.policy
    controller.applier.created.clear()
    _edit(pods, "      expression: size(variables.families) <= 2\n", RULE_1A)     # back: denied again
    _edit(rules / "pools" / "derivation.yaml", "    maxNewDenials: null\n", "    maxNewDenials: 0\n")
    assert reload.watcher.poll() is False
    problems = ["held: newly denies 1 existing object(s), more than reloadGate.maxNewDenials (0)",
                "held: pods-validation/one-accelerator-family Pod default/two-families: allowed -> denied"]
    involved = {"apiVersion": "v1", "kind": "ConfigMap", "name": "accelpolicy-rules", "namespace": "gpustack-system"}
    assert _events(controller)[0] == ("Normal", "RulesVerdictsChanged", involved, (
        f"rules generation {reload.tried.generation} changes 1 verdict(s):\n"
        "pods-validation/one-accelerator-family Pod default/two-families: allowed -> denied"))
    _refused_as_said(reload, controller, "held", problems, before, reconciles=1)


def test_the_review_sample_is_bounded_by_count_and_bytes():
    sample = ReviewSample(max_reviews=3, max_bytes=1000)
    for i in range(5):
        sample.record("pods-validation", {"uid": i}, 100)
    assert [r["uid"] for _, r in sample.reviews()] == [2, 3, 4] and sample.bytes == 300
    sample.record("pods-validation", {"uid": 5}, 900)         # the oldest go until 1,000 bytes hold
    assert [r["uid"] for _, r in sample.reviews()] == [4, 5] and sample.bytes == 1000
    sample.record("pods-validation", {"uid": 6}, 1001)        # larger than the whole bound: not kept
    assert [r["uid"] for _, r in sample.reviews()] == [4, 5]
    sample.resize(0, 0)
    assert sample.reviews() == [] and sample.bytes == 0
