"""The reload gate on the controller's leader (docs/rule-authoring.md "How a rules change goes live"): a
generation that loads is tried on the rule suites, the cluster's objects (the audit's view of the seed
audit fixture), the reviews answered recently and its consequences on the pools before it replaces the
serving one. A refused one leaves the old generation serving and says why (log,
``accelpolicy_rules_refused_total{reason}``, an Event on the rules ConfigMap named by the generation's
content hash, the ConfigMap's verdict and status annotations); a held one waits for an approval naming
its hash; ``accelpolicy_rules_generation`` names the generation in force by its hash."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from runtime.controller.clock import utc_now
from runtime.engine.admission import review_for
from runtime.engine.policy import Policy
from runtime.kube.applier import Applier
from runtime.reload.board import Board
from runtime.reload.holder import RulesHolder
from runtime.reload.hosts import ControllerHost
from runtime.reload.trial import VerdictChange
from runtime.reload.watcher import content_hash, generation_id
from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules
from runtime.snapshots import load_snapshot
from runtime.webhook.app import WebhookState
from runtime.webhook.sample import ReviewSample
from tests.builders import pod
from tests.fakeapi import FakeApi

SEED = ["tests/fixtures/seed/common", "tests/fixtures/audit/seed-cluster"]
CONFIGMAP = ("gpustack-system", "accelpolicy-rules")
RULE_1A = "      expression: size(variables.families) <= 1\n"
TWO_FAMILIES = pod("two", queue="gpustack-fnv64-c4680bb149644f1c", image="x",
                   limits={"nvidia.com/gpu": "1", "nvidia.com/gpu.shared": "2"})
ONE_FAMILY = pod("one", queue="gpustack-fnv64-c4680bb149644f1c", image="x", limits={"nvidia.com/gpu": "1"})
EVAL_ERROR = "      expression: size(variables.families) <= 1 || object.metadata.labels['no-such-label'] == 'x'\n"
RULE_1A_LINE = (DEFAULT_RULES_DIR / "admission" / "pods.yaml").read_text().splitlines(keepends=True).index(RULE_1A) + 1
EVAL_TEXT = (f"policy pods-validation: rules/admission/pods.yaml:{RULE_1A_LINE} spec.validations[1].expression: evaluating "
             "\"size(variables.families) <= 1 || object.metadata.labels['no-such-label'] == 'x'\": no such member in "
             "mapping: StringType('no-such-label'): no-such-label")   # the evaluation error EVAL_ERROR makes
INVOLVED = {"apiVersion": "v1", "kind": "ConfigMap", "name": "accelpolicy-rules", "namespace": "gpustack-system"}
VERDICT, STATUS = "rules.accelpolicy.dev/verdict", "rules.accelpolicy.dev/status"


class Cache:
    def __init__(self, snapshot):
        self.held = snapshot

    def snapshot(self):
        return self.held


class Controller:
    settings_namespace = "gpustack-system"
    clock = staticmethod(utc_now)

    def __init__(self, policy, snapshot, api):
        self.policy, self.cache, self.reconciles, self.session = policy, Cache(snapshot), 0, api
        self.applier = Applier(api, policy)

    def request_reconcile(self):
        self.reconciles += 1


class Webhooks:
    def __init__(self, policy):
        from runtime.engine.admission import AdmissionEngine
        self.state, self.swapped, self.engine = WebhookState(), [], AdmissionEngine(policy)

    def swap(self, policy, engine):
        self.swapped.append(policy)
        self.engine = engine


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))


def rules_copy(tmp_path: Path, suites: bool = False) -> Path:
    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules)
    if not suites:
        shutil.rmtree(rules / "tests")   # as the chart mounts it
    return rules


def leader(rules: Path, snapshot=None, configmap: bool = True):
    """The leader's holder on a controller (the seed audit fixture) with webhooks; the rules ConfigMap in a
    fake API. Returns (holder, controller, webhooks, api)."""
    api = FakeApi({"ConfigMap": [{"apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": CONFIGMAP[1], "namespace": CONFIGMAP[0]}}]})
    policy = Policy(load_rules(rules))
    controller = Controller(policy, snapshot if snapshot is not None else load_snapshot(SEED), api)
    webhooks = Webhooks(policy)
    host = ControllerHost(controller, webhooks, CONFIGMAP if configmap else None)
    board = Board(api, *CONFIGMAP, keys=lambda: controller.policy.ruleset.get("ReloadGate").annotations,
                  applier=controller.applier) if configmap else None
    holder = RulesHolder(host, rules, policy.ruleset, board=board, events=host.events, interval=0)
    return holder, controller, webhooks, api


@pytest.fixture
def gate(tmp_path):
    rules = rules_copy(tmp_path)
    return (*leader(rules), rules)


def metric(holder, name, **labels):
    return holder.metrics.registry.get_sample_value(name, labels or None)


def events(api):
    return [(e["metadata"]["name"], e["type"], e["reason"], e["involvedObject"], e["message"])
            for e in api.objects.get("Event", [])]


def annotations(api) -> dict:
    return api.get("ConfigMap", CONFIGMAP[1], CONFIGMAP[0])["metadata"].get("annotations") or {}


def refused_as_said(holder, controller, reason, problems, before, api, reconciles=0):
    """The old generation serves; the metrics, Event and verdict annotations say why."""
    serving, tried = holder.id, holder.tried.id
    assert controller.policy is before and controller.reconciles == reconciles
    assert holder.watcher.current is before.ruleset
    assert metric(holder, "accelpolicy_rules_generation", generation=serving) == 1.0
    assert metric(holder, "accelpolicy_rules_refused_total", reason=reason) == 1.0
    assert metric(holder, "accelpolicy_rules_reload_failures_total") == 1.0
    message = (f"rules generation {tried} in {holder.watcher.root} refused; generation {serving} keeps serving:\n"
               + "\n".join(problems))
    assert events(api)[-1] == (f"accelpolicy-rules.{tried}.refused", "Warning", "RulesRefused", INVOLVED, message)
    assert annotations(api)[VERDICT] == f"refused:{tried}"
    assert annotations(api)[STATUS] == "\n".join([f"generation {tried} refused"] + problems)


def test_a_yaml_error_is_refused_and_the_old_generation_keeps_serving(gate):
    holder, controller, webhooks, api, rules = gate
    before = controller.policy
    (rules / "admission" / "broken.yaml").write_text("kind: AdmissionPolicy\nspec: [\n")
    assert holder.watcher.poll() is False
    problem = holder.last_trial.problems
    assert holder.last_trial.reason == "lint" and len(problem) == 1
    assert problem[0].startswith("rules/admission/broken.yaml:3:1 <document>: ")
    assert holder.tried.id == generation_id(content_hash(rules)) != holder.id
    refused_as_said(holder, controller, "lint", problem, before, api)
    assert webhooks.swapped == []


def test_a_failing_rule_suite_is_refused(tmp_path):
    rules = rules_copy(tmp_path, suites=True)
    holder, controller, _, api = leader(rules)
    before = controller.policy
    _edit(rules / "admission" / "pods.yaml", "'a Pod may request only one accelerator family, found ['",
          "'one family per Pod, found ['")
    assert holder.watcher.poll() is False
    suite = rules / "tests" / "admission" / "pods.yaml"
    cases = ["pods-seed::one-accelerator-family: exclusive and sliced",
             "pods-seed::two families across containers; visibility and RDMA keys never claim"]
    got = {"one-accelerator-family: exclusive and sliced": "exclusive sliced", cases[1].split("::")[1]: "exclusive shared"}
    problems = [f"suite: FAIL {case} ({suite}): message: want 'Pod \"demo\" is invalid: spec: Forbidden: a Pod may "
                f"request only one accelerator family, found [{got[case.split('::')[1]]}]' got  'Pod \"demo\" is "
                f"invalid: spec: Forbidden: one family per Pod, found [{got[case.split('::')[1]]}]'" for case in cases]
    assert [f"suite: {p}" for p in holder.last_trial.problems] == problems
    refused_as_said(holder, controller, "suite", problems, before, api)


def test_an_edit_cannot_switch_its_own_suites_off(tmp_path):
    """``suites`` is read from the serving generation: an edit that turns them off is still tried on them."""
    rules = rules_copy(tmp_path, suites=True)
    holder, _, _, _ = leader(rules)
    _edit(rules / "reload.yaml", "  suites: true\n", "  suites: false\n")
    _edit(rules / "admission" / "pods.yaml", "'a Pod may request only one accelerator family, found ['",
          "'one family per Pod, found ['")
    assert holder.watcher.poll() is False and holder.last_trial.reason == "suite"


def test_an_evaluation_error_on_an_existing_object_is_refused(gate):
    holder, controller, _, api, rules = gate
    before = controller.policy
    _edit(rules / "admission" / "pods.yaml", RULE_1A, EVAL_ERROR)
    assert holder.watcher.poll() is False
    refused_as_said(holder, controller, "replay-object", [f"replay-object: Pod default/two-families: {EVAL_TEXT}"],
                    before, api)


def test_an_error_the_serving_rules_make_too_does_not_refuse_an_edit(tmp_path):
    """Rules that already fail on an existing object can still be replaced (by a fix or by another edit)."""
    rules = rules_copy(tmp_path)
    _edit(rules / "admission" / "pods.yaml", RULE_1A, EVAL_ERROR)
    holder, controller, _, _ = leader(rules, configmap=False)
    _edit(rules / "constants.yaml", "sharesPerAccelerator: 10 ", "sharesPerAccelerator: 20 ")
    assert holder.watcher.poll() is True and holder.last_trial.problems == []
    assert controller.policy.ruleset is holder.watcher.current


def test_an_evaluation_error_on_a_review_answered_recently_is_refused(gate):
    holder, controller, webhooks, api, rules = gate
    controller.cache.held = load_snapshot(SEED[:1])   # no existing Pod: only the review meets the error
    before = controller.policy
    webhooks.state.sample.record("pods-validation", review_for(TWO_FAMILIES, uid="u-1"), 900)
    _edit(rules / "admission" / "pods.yaml", RULE_1A, EVAL_ERROR)
    assert holder.watcher.poll() is False
    problems = [f"replay-review: a review answered recently (CREATE Pod default/two, webhook pods-validation): "
                f"{EVAL_TEXT}"]
    refused_as_said(holder, controller, "replay-review", problems, before, api)


def test_a_correct_edit_goes_live_with_its_verdict_changes_reported(gate):
    holder, controller, webhooks, api, rules = gate
    first = holder.id
    webhooks.state.sample.record("pods-validation", review_for(TWO_FAMILIES, uid="u-1"), 900)
    _edit(rules / "admission" / "pods.yaml", RULE_1A, "      expression: size(variables.families) <= 2\n")
    assert holder.watcher.poll() is True
    generation = generation_id(content_hash(rules))
    assert holder.id == generation != first
    assert controller.policy.ruleset is holder.watcher.current and controller.reconciles == 1
    assert webhooks.swapped == [controller.policy]
    assert metric(holder, "accelpolicy_rules_generation", generation=generation) == 1.0
    assert metric(holder, "accelpolicy_rules_generation", generation=first) is None
    assert holder.last_trial.changes == [
        VerdictChange("pods-validation", "one-accelerator-family", "Pod default/two-families", "denied", "allowed", "object"),
        VerdictChange("pods-validation", "one-accelerator-family", "CREATE Pod default/two", "denied", "allowed", "review")]
    assert events(api) == [
        (f"accelpolicy-rules.{generation}.verdictschanged", "Normal", "RulesVerdictsChanged", INVOLVED,
         f"rules generation {generation} changes 2 verdict(s):\n"
         "pods-validation/one-accelerator-family Pod default/two-families: denied -> allowed\n"
         "pods-validation/one-accelerator-family CREATE Pod default/two (a recent review): denied -> allowed"),
        (f"accelpolicy-rules.{generation}.reloaded", "Normal", "RulesReloaded", INVOLVED,
         f"rules generation {generation} from {rules} in force (loaded in {holder.watcher.last_seconds:.3f}s)")]
    assert annotations(api) == {VERDICT: f"accepted:{generation}", STATUS: f"generation {generation} in force (accepted)",
                                "rules.accelpolicy.dev/serving": generation, "rules.accelpolicy.dev/parent": first}
    assert holder.report() == {"component": "controller", "generation": generation, "paths": sorted(
        spec.path for spec in webhooks.engine.policies.values()), "tried": {
        "generation": generation, "reason": None, "problems": [], "reviews": 1, "deniedReviews": 0}}


def _recent(webhooks, count: int) -> None:
    for i in range(count):
        webhooks.state.sample.record("pods-validation", review_for(ONE_FAMILY, uid=f"u-{i}"), 900)


def test_expression_false_is_held_against_the_recent_reviews_until_its_hash_is_approved(gate):
    holder, controller, webhooks, api, rules = gate
    first, before = holder.id, controller.policy
    controller.cache.held = load_snapshot(SEED[:1])   # no existing Pod: the recent reviews alone say it
    _recent(webhooks, 20)
    _edit(rules / "admission" / "pods.yaml", RULE_1A, '      expression: "false"\n')
    assert holder.watcher.poll() is False
    held = holder.tried.id
    reasons = ["it newly denies 20 of 20 recent review(s) (100%, more than hold.maxNewDenialsPercent 5%)"]
    approve = f"accelpolicy approve {held} --namespace gpustack-system --configmap accelpolicy-rules"
    assert controller.policy is before and holder.pending.state == "held"
    assert metric(holder, "accelpolicy_rules_held", generation=held) == 1.0
    assert annotations(api)[VERDICT] == f"held:{held}"
    assert annotations(api)[STATUS] == "\n".join([f"generation {held} held: {approve}"] + reasons)
    assert events(api)[-1] == (f"accelpolicy-rules.{held}.held", "Warning", "RulesHeld", INVOLVED,
                               f"rules generation {held} held; generation {first} keeps serving until it is "
                               f"approved ({approve}):\n" + "\n".join(reasons))
    holder.settle()                                         # nothing approved yet: still held
    assert controller.policy is before
    api.get("ConfigMap", CONFIGMAP[1], CONFIGMAP[0])["metadata"]["annotations"].update({
        "rules.accelpolicy.dev/approve": "000000000000"})   # another generation's hash approves nothing
    holder.settle()
    assert controller.policy is before
    configmap = api.get("ConfigMap", CONFIGMAP[1], CONFIGMAP[0])
    configmap["metadata"]["annotations"].update({"rules.accelpolicy.dev/approve": held})
    configmap["metadata"]["managedFields"] = [{"manager": "kubectl-annotate", "operation": "Update",
                                               "time": "2026-12-01T09:00:00Z", "fieldsV1": {"f:metadata": {
                                                   "f:annotations": {"f:rules.accelpolicy.dev/approve": {}}}}}]
    holder.settle()
    assert holder.id == held and controller.policy is not before and holder.pending is None
    assert annotations(api)[VERDICT] == f"approved:{held}"
    assert metric(holder, "accelpolicy_rules_held", generation=held) is None
    assert [e[2] for e in events(api)[-2:]] == ["RulesApproved", "RulesReloaded"]
    assert events(api)[-2][4] == f"rules generation {held} approved by kubectl-annotate at 2026-12-01T09:00:00Z"


def test_the_hold_is_read_from_the_serving_generation_never_from_the_edit(gate):
    holder, controller, webhooks, api, rules = gate
    controller.cache.held = load_snapshot(SEED[:1])
    _recent(webhooks, 10)
    _edit(rules / "admission" / "pods.yaml", RULE_1A, '      expression: "false"\n')
    _edit(rules / "reload.yaml", "    maxNewDenialsPercent: 5 ", "    maxNewDenialsPercent: 100 ")
    assert holder.watcher.poll() is False and holder.pending.state == "held"


def test_a_revert_to_the_serving_generations_parent_is_never_held(gate):
    holder, controller, webhooks, api, rules = gate
    first = holder.id
    controller.cache.held = load_snapshot(SEED[:1])
    pods = rules / "admission" / "pods.yaml"
    _edit(pods, RULE_1A, "      expression: size(variables.families) <= 2\n")
    assert holder.watcher.poll() is True                    # two families allowed now
    for i in range(10):
        webhooks.state.sample.record("pods-validation", review_for(TWO_FAMILIES, uid=f"t-{i}"), 900)
    _edit(pods, "      expression: size(variables.families) <= 2\n", RULE_1A)   # back: denies all ten again
    assert holder.watcher.poll() is True and holder.id == first
    assert holder.last_trial.denied_reviews == 10
    assert annotations(api)[VERDICT] == f"accepted:{first}"


def test_a_pool_emptying_edit_is_held_and_says_what_it_would_take(gate):
    """A misspelt managed label key (rules/labels.yaml) unmanages every node: every flavor would go."""
    holder, controller, _, api, rules = gate
    before = controller.policy
    _edit(rules / "labels.yaml", "    managed: gpustack.ai/managed\n", "    managed: gpustack.ai/manged\n")
    assert holder.watcher.poll() is False and holder.pending.state == "held"
    found = holder.last_trial.consequences
    assert found.emptied == ["gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64", "gpustack--generic-linux-amd64",
                             "gpustack--nvidia-a10g-linux-amd64", "gpustack--nvidia-tesla-t4-linux-amd64"]
    assert [str(c) for c in found.capacity][:2] == [
        "InstanceType gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64 accelerator: capacity 1 -> 0 (-100%)",
        "InstanceType gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64 acceleratorShared: capacity 10 -> 0 (-100%)"]
    status = annotations(api)[STATUS].splitlines()
    assert status[1].startswith("it removes more than 25% of the capacity of 4 pool(s) "
                                "(hold.maxCapacityRemovedPercent): InstanceType ")
    assert controller.policy is before


def test_the_reload_gate_settings_moved_out_of_the_pool_derivation(tmp_path):
    rules = rules_copy(tmp_path)
    text = (rules / "pools" / "derivation.yaml").read_text()
    (rules / "pools" / "derivation.yaml").write_text(text + "  reloadGate:\n    maxNewDenials: null\n")
    with pytest.raises(Exception) as info:
        load_rules(rules)
    assert "reloadGate: the reload's settings moved to rules/reload.yaml (kind ReloadGate: its spec and its " \
           "events reloaded, refused, verdictsChanged; docs/rule-authoring.md \"How a rules change goes live\"): " \
           "delete it here" in str(info.value)


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


def test_a_restart_while_a_generation_is_held_starts_on_the_generation_in_force(gate, tmp_path):
    """The leader keeps a copy of the generation in force (the ConfigMap ``<name>-serving``); a process that
    starts while the mounted rules are held (or refused, or not decided) starts on that copy and follows the
    verdict on the mounted ones like any change: a restart never serves a held generation."""
    from runtime.reload.holder import starting_rules

    holder, controller, _, api, rules = gate
    _edit(rules / "constants.yaml", "sharesPerAccelerator: 10 ", "sharesPerAccelerator: 20 ")
    assert holder.watcher.poll() is True
    serving = holder.id
    copy = api.get("ConfigMap", CONFIGMAP[1] + "-serving", CONFIGMAP[0])
    assert copy["metadata"]["annotations"] == {"rules.accelpolicy.dev/serving": serving}
    assert copy["data"]["constants.yaml"] == (rules / "constants.yaml").read_text()
    _edit(rules / "labels.yaml", "    managed: gpustack.ai/managed\n", "    managed: gpustack.ai/manged\n")
    assert holder.watcher.poll() is False and annotations(api)[VERDICT] == f"held:{holder.pending.id}"
    held = holder.pending.id
    # a restart now: the mounted rules are the held generation
    board = Board(api, *CONFIGMAP, keys=lambda: controller.policy.ruleset.get("ReloadGate").annotations)
    started = starting_rules(rules, board, tmp_path / "work")
    assert generation_id(content_hash(Path(started.root))) == serving != held
    assert started.get("Constants").sharesPerAccelerator == 20
    assert started.get("LabelCatalog").keys["managed"] == "gpustack.ai/managed"
    follower = RulesHolder(ControllerHost(controller), rules, started, board=board, decides=lambda: False,
                           interval=0)
    assert follower.id == serving
    assert follower.watcher.poll() is False and follower.pending.id == held
    assert follower.pending.state == "held" and follower.serving is started
    api.get("ConfigMap", CONFIGMAP[1], CONFIGMAP[0])["metadata"]["annotations"][VERDICT] = f"refused:{held}"  # still
    assert generation_id(content_hash(Path(starting_rules(rules, board, tmp_path / "again").root))) == serving
    api.get("ConfigMap", CONFIGMAP[1], CONFIGMAP[0])["metadata"]["annotations"][VERDICT] = f"approved:{held}"
    assert Path(starting_rules(rules, board, tmp_path / "third").root) == rules   # let through: the mounted
