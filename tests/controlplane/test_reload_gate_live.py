"""The reload gate live (docs/rule-authoring.md "How a rules change goes live"): the controller serves
its webhooks while a client keeps sending reviews; broken edits saved into the rules directory (swapped
in one rename, as kubelet updates a mounted ConfigMap) are refused, with the Event on the rules
ConfigMap and the metric saying why, while every review before, during and after is answered; a
correct edit goes live with its verdict changes reported and the accepted verdict on the ConfigMap."""
from __future__ import annotations

import json
import os
import shutil
import ssl
import threading
import time
from pathlib import Path

import httpx

from runtime.cli.controller import rules_holder
from runtime.controller.webhooks import ControllerWebhooks, WebhookTls
from runtime.engine.admission import review_for, view_kinds
from runtime.engine.policy import Policy
from runtime.kube.session import connect
from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules
from runtime.reload.watcher import content_hash, generation_id
from runtime.webhook.host import ServingOptions
from runtime.webhook.server import self_signed
from testing.hooks import ObservedController as Controller
from tests.controller.test_reload_gate import EVAL_ERROR, EVAL_TEXT, RULE_1A, TWO_FAMILIES, _edit
from tests.controlplane.test_controller import _apply_seed_cluster, _clean
from tests.controlplane.test_rules_as_data import _wait
from tests.engine.test_cel_typing import at

# the two edits the rules-safety docs open with (docs/rule-authoring.md "What lint checks")
PLUS_OLD = """messageExpression: "'pod has no \\"' + params.labels.keys.queueName + '\\" label'\""""
PLUS_NEW = """messageExpression: "'at most ' + params.constants.maxNameLength\""""
KEY_OLD = "expression: variables.memoryPercent > params.constants.percentPerAccelerator"

SYSTEM, CONFIGMAP = "gpustack-system", "accelpolicy-rules"


class Reviewer(threading.Thread):
    """Sends one pods-validation review after another, of ``pods`` in turn; counts answers and failures (not
    HTTP 200, not a well-formed AdmissionReview with the uid, or an InternalError/Timeout answer) and the
    verdicts (``allowed`` in order; ``last``: the latest per Pod name)."""

    def __init__(self, url: str, ca: Path, pods: tuple = (TWO_FAMILIES,)):
        super().__init__(daemon=True)
        self.url, self.client = url, httpx.Client(verify=ssl.create_default_context(cafile=str(ca)), timeout=10)
        self.pods = pods
        self.answered, self.failed, self.allowed, self.last = 0, [], [], {}
        self.stop = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            i += 1
            pod = self.pods[i % len(self.pods)]
            try:
                resp = self.client.post(self.url, json=review_for(pod, uid=f"u-{i}"))
                answer = resp.json()["response"]
                if resp.status_code != 200 or answer["uid"] != f"u-{i}" or \
                        (answer.get("status") or {}).get("reason") in ("InternalError", "Timeout"):
                    self.failed.append((resp.status_code, answer.get("status")))
                self.allowed.append(answer["allowed"])
                self.last[pod["metadata"]["name"]] = answer["allowed"]
                self.answered += 1
            except Exception as exc:  # noqa: BLE001 - counted
                self.failed.append(repr(exc))
            time.sleep(0.02)


def _swap(tmp: Path, rules: Path, version: str, edit=None, base: Path | None = None) -> None:
    """Write a new version of the rules beside the current one (a copy of ``base``, default the one the
    link names) and swap the link in one rename."""
    current = base or rules.resolve()
    shutil.copytree(current, tmp / version)
    if edit is not None:
        edit(tmp / version)
    (tmp / "rules.new").symlink_to(tmp / version)
    os.replace(tmp / "rules.new", rules)


def _events(kubectl, reason: str) -> list[dict]:
    items = json.loads(kubectl.stdout("get", "events", "-n", SYSTEM, "-o", "json",
                                      f"--field-selector=involvedObject.name={CONFIGMAP},reason={reason}"))["items"]
    return [e for e in items if e["involvedObject"]["kind"] == "ConfigMap"]


def seed_with_rules_configmap(kubectl, tmp_path: Path) -> Path:
    """The seed cluster, a new rules ConfigMap (annotations only), and the rules directory: a symlink to a copy
    of the shipped rules without tests/ (as the chart mounts them), ``tmp_path/v1``; returns the link."""
    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, tmp_path / "v1")
    shutil.rmtree(tmp_path / "v1" / "tests")
    rules.symlink_to(tmp_path / "v1")
    _clean(kubectl)
    _apply_seed_cluster(kubectl)
    kubectl("-n", SYSTEM, "delete", "configmap", CONFIGMAP, f"{CONFIGMAP}-serving", "--ignore-not-found")
    kubectl("-n", SYSTEM, "create", "configmap", CONFIGMAP, "--from-literal=note=the rules")
    return rules


def test_broken_edits_are_refused_while_reviews_are_answered_and_a_correct_one_goes_live(control_plane, tmp_path):
    cluster, kubectl = control_plane
    rules = seed_with_rules_configmap(kubectl, tmp_path)
    policy = Policy(load_rules(rules))
    controller = Controller(connect(cluster.kubeconfig), policy, coalesce_seconds=0.1, env={},
                            fit_coalesce_seconds=0, extra_kinds=view_kinds(policy))
    paths = self_signed(tmp_path / "tls")
    webhooks = ControllerWebhooks(controller, WebhookTls(paths["cert"], paths["key"], paths["ca"].read_bytes()),
                                  ServingOptions(port=0), register_configurations=False)
    webhooks.serve()
    reload = None
    reviewer = Reviewer(f"https://127.0.0.1:{webhooks.server.port}/validate-pods", paths["ca"])
    try:
        controller.start()
        webhooks.ready()
        reload = rules_holder(controller, rules, webhooks, None, 0.2, (SYSTEM, CONFIGMAP)).start()
        reviewer.start()
        _wait(lambda: reviewer.answered >= 20)                         # before
        first = reload.id
        metric = lambda name, **labels: reload.metrics.registry.get_sample_value(name, labels or None)  # noqa: E731

        # 1. a YAML error
        _swap(tmp_path, rules, "v2", lambda d: (d / "admission" / "broken.yaml").write_text("kind: [\n"))
        _wait(lambda: metric("accelpolicy_rules_refused_total", reason="lint") == 1.0)
        refused = _wait(lambda: _events(kubectl, "RulesRefused"))
        assert (refused[0]["type"], refused[0]["message"]) == ("Warning", (
            f"rules generation {generation_id(content_hash(rules))} in {rules} refused; generation {first} keeps "
            "serving:\nrules/admission/broken.yaml:2:1 <document>: "
            "not valid YAML: expected the node content, but found '<stream end>'"))

        # 1b. a string + int message and a misspelt params key: both lint findings, in one refusal
        def type_errors(d: Path) -> None:
            _edit(d / "admission" / "pods-mutation.yaml", PLUS_OLD, PLUS_NEW)
            _edit(d / "admission" / "pods-mutation.yaml", KEY_OLD, KEY_OLD[:-1])
        _swap(tmp_path, rules, "v2b", type_errors, base=tmp_path / "v1")
        _wait(lambda: metric("accelpolicy_rules_refused_total", reason="lint") == 2.0)
        typed = _wait(lambda: [e["message"] for e in _events(kubectl, "RulesRefused") if "mismatch" in e["message"]])
        assert typed[0].splitlines() == [
            f"rules generation {generation_id(content_hash(rules))} in {rules} refused; generation {first} keeps serving:",
            f"{at(PLUS_OLD)}:31 spec.mutations[0].denials[0].messageExpression: type mismatch: no '+' for "
            "(string, int) in \"'at most ' + params.constants.maxNameLength\"",
            f"{at(KEY_OLD)}:66 spec.mutations[1].denials[0].expression: params.constants has no field or key "
            "'percentPerAccelerato' (known: creditsPerAccelerator, maxNameLength, percentPerAccelerator, "
            "sharesPerAccelerator) in 'params.constants.percentPerAccelerato'"]
        assert reload.id == first

        # 2. an evaluation error on the reviews answered recently (no existing Pod meets it)
        def eval_error(d: Path) -> None:
            _edit(d / "admission" / "pods.yaml", RULE_1A, EVAL_ERROR)
        _swap(tmp_path, rules, "v3", eval_error, base=tmp_path / "v1")
        _wait(lambda: metric("accelpolicy_rules_refused_total", reason="replay-review") == 1.0)
        messages = _wait(lambda: [e["message"] for e in _events(kubectl, "RulesRefused")
                                  if "replay-review" in e["message"]])
        assert messages[0].splitlines()[:2] == [
            f"rules generation {generation_id(content_hash(rules))} in {rules} refused; generation {first} keeps serving:",
            f"replay-review: a review answered recently (CREATE Pod default/two, webhook pods-validation): {EVAL_TEXT}"]
        assert reload.id == first
        assert metric("accelpolicy_rules_generation", generation=first) == 1.0
        seen = reviewer.answered
        _wait(lambda: reviewer.answered >= seen + 20)                  # during: the old rules answer
        assert set(reviewer.allowed) == {False}

        # 3. a correct edit: live, its verdict change reported, the accepted verdict on the ConfigMap
        def allow_two(d: Path) -> None:
            _edit(d / "admission" / "pods.yaml", EVAL_ERROR, "      expression: size(variables.families) <= 2\n")
        _swap(tmp_path, rules, "v4", allow_two)
        _wait(lambda: reload.id != first)
        generation = reload.id
        assert generation == generation_id(content_hash(rules))
        assert metric("accelpolicy_rules_generation", generation=generation) == 1.0
        changed = _wait(lambda: _events(kubectl, "RulesVerdictsChanged"))
        assert changed[0]["message"] == (f"rules generation {generation} changes 1 verdict(s):\n"
                                         "pods-validation/one-accelerator-family CREATE Pod default/two (a recent review): "
                                         "denied -> allowed")
        assert _wait(lambda: _events(kubectl, "RulesReloaded"))
        annotations = json.loads(kubectl.stdout("-n", SYSTEM, "get", "configmap", CONFIGMAP, "-o", "json"))[
            "metadata"]["annotations"]
        assert annotations["rules.accelpolicy.dev/verdict"] == f"accepted:{generation}"
        _wait(lambda: reviewer.allowed[-1] is True)                    # after: the new rules answer
        seen = reviewer.answered
        _wait(lambda: reviewer.answered >= seen + 20)
        assert reviewer.failed == []                                   # before, during and after: none failed
    finally:
        reviewer.stop.set()
        reviewer.join(10)
        if reload is not None:
            reload.stop()
        webhooks.stop()
        controller.stop()
        kubectl("-n", SYSTEM, "delete", "configmap", CONFIGMAP, f"{CONFIGMAP}-serving", "--ignore-not-found")
        _clean(kubectl)
