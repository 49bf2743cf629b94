"""Governed exceptions (docs/concepts/exceptions.md): one answer on every path at the same instant, on both sides of
``expiresAt``, and every refusal of rules/admission/exceptions.yaml.

The snapshot is the seed cluster plus tests/fixtures/exceptions: the PolicyException ``bench-two-families``
(pods-validation / one-accelerator-family for Pod default/bench until 2026-12-08T00:00:00Z) and that Pod. Each
path gets its instant from its own injected clock (the webhook server's ``clock``, the controller's ``clock``,
``--now`` of the commands, the rule tests' ``now``).
"""
from __future__ import annotations

import copy
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from prometheus_client import generate_latest
from starlette.testclient import TestClient

from runtime.cli import main
from runtime.controller.backgroundaudit import BackgroundAudit
from runtime.controller.exceptions import ExceptionStatus
from runtime.engine.admission import AdmissionEngine, admission_view, decide, parse_review, review_for
from runtime.engine.admission.builtins import VARIABLES
from runtime.engine.admission.exceptions import Conditions, read_grant, selector_matches
from runtime.engine.policy import Policy
from runtime.engine.snapshot import Snapshot
from runtime.report.audit import audit
from runtime.report.explain import explain_admission
from runtime.report.html import render_page
from runtime.report.results import reports
from runtime.rules import conditioncheck

from runtime.rules.loader import load_rules
from runtime.ruletests import Case, Runner
from runtime.snapshots import read_objects
from runtime.webhook.app import WebhookState, build_app

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "exceptions"
SEED = REPO / "tests" / "fixtures" / "seed" / "common"
POLICY = Policy(load_rules())
EXPIRES = datetime(2026, 12, 8, tzinfo=timezone.utc)
BEFORE, AT, AFTER = EXPIRES - timedelta(seconds=1), EXPIRES, EXPIRES + timedelta(hours=1)
EXCEPTION = "gpustack-exceptions/bench-two-families"
WARNING = ("one-accelerator-family (pods-validation) lifted by PolicyException gpustack-exceptions/bench-two-families "
           "until 2026-12-08T00:00:00Z: vendor benchmark needs an AMD and an NVIDIA accelerator in one Pod (approved "
           "by platform-lead@example.com, OPS-4711)")
DENIAL = ('Pod "bench" is invalid: spec: Forbidden: a Pod may request only one accelerator family, found '
          '[exclusive shared]')
SKIP = ("excepted by PolicyException gpustack-exceptions/bench-two-families until 2026-12-08T00:00:00Z: vendor "
        "benchmark needs an AMD and an NVIDIA accelerator in one Pod (approved by platform-lead@example.com, "
        "OPS-4711)")


def _objects() -> list[dict]:
    docs, _ = read_objects([str(SEED), str(FIXTURES)])
    return docs


def _pod() -> dict:
    return yaml.safe_load((FIXTURES / "bench-pod.yaml").read_text())


def _exception() -> dict:
    return yaml.safe_load((FIXTURES / "bench-two-families.yaml").read_text())


SNAPSHOT = Snapshot.from_objects(_objects())
ENGINE = AdmissionEngine(POLICY)
VIEW = admission_view(POLICY, SNAPSHOT)


def _stamp(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


# -- every path, one answer ------------------------------------------------------------------------------------
def _webhook(now: datetime) -> tuple[bool, list[str], str]:
    """The HTTPS app's answer (one path per policy) with the server's clock at ``now``, and the excepted counter."""
    state = WebhookState(clock=lambda: now)
    state.set_ready(ENGINE, VIEW)
    client = TestClient(build_app(state, {s.path: n for n, s in ENGINE.policies.items()}))
    review = review_for(_pod(), "CREATE")
    answer = client.post("/validate-pods", json=review).json()["response"]
    metrics = generate_latest(state.metrics.registry).decode()
    counted = [line for line in metrics.splitlines() if line.startswith("accelpolicy_admission_excepted_reviews_total")]
    return answer["allowed"], answer.get("warnings", []), "\n".join(counted)


def _background(now: datetime) -> list[tuple[str, str, str]]:
    """The controller's background audit with its clock at ``now``: the Pod's results (writes go to a recorder)."""
    class _Applier:
        def apply(self, body):
            return body

        def create(self, body):
            return body

    class _Cache:
        def snapshot(self, kinds=None):
            return SNAPSHOT

    class _Controller:
        policy, cache, applier, observers = POLICY, _Cache(), _Applier(), []
        clock = staticmethod(lambda: now)

    results = BackgroundAudit(_Controller(), interval=0).run_once()
    return [(r.result, r.rule, r.message) for r in results if r.resource.name == "bench" and r.policy == "pods-validation"]


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), prog_name="accelpolicy", env={"COLUMNS": "200"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


@pytest.mark.parametrize("now,excepted", [(BEFORE, True), (AT, False), (AFTER, False)],
                         ids=["a second before expiresAt", "at expiresAt", "an hour after"])
def test_every_path_gives_the_same_answer_on_both_sides_of_expires_at(now, excepted, tmp_path):
    # the webhook server: allowed with the warning naming the exception and its expiry, counted by policy, rule, exception
    allowed, warnings, counted = _webhook(now)
    assert (allowed, warnings) == ((True, [WARNING]) if excepted else (False, []))
    assert counted == ('accelpolicy_admission_excepted_reviews_total{exception="gpustack-exceptions/bench-two-families",'
                       'policy="pods-validation",rule="one-accelerator-family"} 1.0' if excepted else "")
    # decide() as `admit` chains it: the verdict and the warning
    answer, outcome = decide(ENGINE, review_for(_pod(), "CREATE"), VIEW, now=now)
    assert (outcome.verdict(), answer["response"].get("warnings")) == \
        (("excepted", [WARNING]) if excepted else ("invalid", None))
    # accelpolicy admit --now
    pod = tmp_path / "pod.yaml"
    pod.write_text(yaml.safe_dump(_pod()))
    code, out = _cli("admit", "-f", str(pod), "--snapshot", str(SEED), "--snapshot", str(FIXTURES), "--now",
                     _stamp(now), "-o", "text")
    assert code == (0 if excepted else 1)
    assert (f"warning:  {WARNING}" in out.splitlines()) is excepted and (f"message:  {DENIAL}" in out) is not excepted
    # explain admit (the function and the command)
    info = explain_admission(POLICY, parse_review(review_for(_pod(), "CREATE")), VIEW, now)
    (validation,) = [p for p in info["policies"] if p["policy"] == "pods-validation"]
    assert validation["verdict"] == ("excepted" if excepted else "invalid")
    assert validation["lifted"] == ([{"rule": "one-accelerator-family", "exception": EXCEPTION,
                                      "expiresAt": "2026-12-08T00:00:00Z",
                                      "reason": "vendor benchmark needs an AMD and an NVIDIA accelerator in one Pod"}]
                                    if excepted else [])
    code, out = _cli("explain", "admit", "-f", str(pod), "--snapshot", str(SEED), "--snapshot", str(FIXTURES),
                     "--now", _stamp(now))
    assert code == (0 if excepted else 1)
    assert ("policy pods-validation: excepted" in out.splitlines()) is excepted
    # the audit: skip naming the exception, its reason and expiry; never pass; fail once expired
    results = audit(POLICY, SNAPSHOT, ENGINE, now=now)
    mine = [(r.result, r.rule, r.message) for r in results if r.resource.name == "bench" and r.policy == "pods-validation"]
    want = [("skip", "one-accelerator-family", SKIP)] if excepted else [
        ("fail", "one-accelerator-family", "spec: Forbidden: a Pod may request only one accelerator family, found "
                                           "[exclusive shared]")]
    assert mine == want
    # the background audit, at the controller's clock
    assert _background(now) == want
    # accelpolicy audit --now -o json
    code, out = _cli("audit", "--snapshot", str(SEED), "--snapshot", str(FIXTURES), "--now", _stamp(now), "-o", "json")
    rows = [(r["result"], r["rule"], r["message"]) for r in json.loads(out)
            if r["resource"]["name"] == "bench" and r["policy"] == "pods-validation"]
    assert rows == want
    # the PolicyReport entry and the HTML page carry the same result
    (report,) = [r for r in reports(results, "accelpolicy-audit", "accelpolicy") if r["metadata"].get("namespace") == "default"]
    (entry,) = [e for e in report["results"] if e["resources"][0]["name"] == "bench" and e["policy"] == "pods-validation"]
    assert entry["result"] == want[0][0]
    if excepted:
        assert entry["properties"] == {"operation": "CREATE", "exception": EXCEPTION, "rule": "one-accelerator-family",
                                       "reason": "vendor benchmark needs an AMD and an NVIDIA accelerator in one Pod",
                                       "approver": "platform-lead@example.com", "ticket": "OPS-4711",
                                       "expiresAt": "2026-12-08T00:00:00Z"}
    page = render_page(POLICY, SNAPSHOT, results)
    assert ("<tr data-result=skip><td class=skip>skip</td><td>pods-validation</td>" in page) is excepted
    assert ("gpustack-exceptions/bench-two-families until 2026-12-08T00:00:00Z" in page) is excepted
    # the rule-test runner's case clock
    runner = Runner(POLICY, REPO)
    case = Case(suite="s", name="n", file="f", operation="CREATE", object=_pod(), old_object=None,
                snapshot=(str(SEED), str(FIXTURES)), derive=True, expect={"allowed": excepted}, now=now)
    assert runner.run(case).passed


def test_without_an_instant_no_exception_applies():
    """A caller that gives no instant (the reload gate's replays) judges as if no exception existed."""
    _, outcome = decide(ENGINE, review_for(_pod(), "CREATE"), VIEW)
    assert outcome.verdict() == "invalid" and outcome.lifted == []


# -- the audit's own findings: recently expired, matching nothing -----------------------------------------------
def _finding(now: datetime, objects: list[dict]) -> list[tuple[str, str]]:
    results = audit(POLICY, Snapshot.from_objects(objects), ENGINE, now=now)
    return [(r.result, r.rule) for r in results if r.policy == "policy-exceptions"]


def test_the_audit_lists_an_exception_expired_within_a_day_and_one_that_matches_nothing():
    assert _finding(BEFORE, _objects()) == []
    assert _finding(AFTER, _objects()) == [("warn", "expired")]
    assert _finding(EXPIRES + timedelta(hours=24), _objects()) == []   # recentlyExpired: 24h
    without_pod = [o for o in _objects() if not (o.get("kind") == "Pod" and o["metadata"]["name"] == "bench")]
    assert _finding(BEFORE, without_pod) == [("warn", "matches-nothing")]


# -- the controller's status and Events --------------------------------------------------------------------------
class _StatusController:
    def __init__(self, objects: list[dict], now: datetime):
        self.policy, self.listeners, self.now = POLICY, [], now
        self.objects = objects
        self.written: list[dict] = []
        self.events: list[dict] = []
        controller = self

        class _Applier:
            def apply_status(self, body):
                controller.written.append(body)
                for obj in controller.objects:
                    if obj.get("kind") == "PolicyException" and obj["metadata"]["name"] == body["metadata"]["name"]:
                        obj["status"] = body["status"]
                return body

            def create(self, body):
                controller.events.append(body)
                return body

        class _Cache:
            def snapshot(self, kinds=None):
                return Snapshot.from_objects(copy.deepcopy(controller.objects))

        self.applier, self.cache = _Applier(), _Cache()

    def clock(self) -> datetime:
        return self.now


def test_the_status_counts_the_covered_objects_and_the_events_mark_start_and_end():
    controller = _StatusController(_objects(), BEFORE)
    status = ExceptionStatus(controller, interval=0)
    assert status.run_once() == EXPIRES   # the next expiry: when to look again
    assert [w["status"] for w in controller.written] == [{"inForce": True, "coveredObjects": 1}]
    assert [(e["reason"], e["message"]) for e in controller.events] == [(
        "ExceptionInForce", "lifts validations of pods-validation until 2026-12-08T00:00:00Z for 1 object(s) now: "
        "vendor benchmark needs an AMD and an NVIDIA accelerator in one Pod (approved by platform-lead@example.com, "
        "OPS-4711)")]
    status.run_once()   # nothing changed: nothing written, no second Event
    assert len(controller.written) == 1 and len(controller.events) == 1
    controller.now = AT
    assert status.run_once() is None
    assert controller.written[-1]["status"] == {"inForce": False, "coveredObjects": 0,
                                                "message": "expired at 2026-12-08T00:00:00Z"}
    assert [e["reason"] for e in controller.events] == ["ExceptionInForce", "ExceptionEnded"]
    assert controller.events[-1]["involvedObject"] == {"apiVersion": "worker.gpustack.ai/v1", "kind": "PolicyException",
                                                       "name": "bench-two-families",
                                                       "namespace": "gpustack-exceptions"}


def test_an_exception_the_rules_refuse_is_not_in_force_and_says_so():
    objects = _objects()
    (exc,) = [o for o in objects if o.get("kind") == "PolicyException"]
    exc["metadata"]["namespace"] = "default"
    controller = _StatusController(objects, BEFORE)
    ExceptionStatus(controller, interval=0).run_once()
    assert controller.written[-1]["status"] == {
        "inForce": False, "coveredObjects": 0,
        "message": "refused by the rules in force (accelpolicy audit names the reason)"}
    assert controller.events == []   # it never applied: nothing started, nothing ended


# -- what an exception applies to -----------------------------------------------------------------------------------
def _applies(exception: dict, pod: dict, now: datetime = BEFORE) -> bool:
    view = admission_view(POLICY, Snapshot.from_objects([o for o in _objects() if o.get("kind") != "PolicyException"]
                                                        + [exception]))
    _, outcome = decide(ENGINE, review_for(pod, "CREATE"), view, now=now)
    return outcome.allowed


def test_the_match_namespaces_names_selector_and_condition_all_must_hold():
    exc, pod = _exception(), _pod()
    assert _applies(exc, pod)
    other_ns = copy.deepcopy(pod)
    other_ns["metadata"]["namespace"] = "team-b"
    assert not _applies(exc, other_ns)
    with_selector = copy.deepcopy(exc)
    with_selector["spec"]["match"]["selector"] = {"matchLabels": {"team": "bench"}}
    assert not _applies(with_selector, pod)
    labelled = copy.deepcopy(pod)
    labelled["metadata"]["labels"]["team"] = "bench"
    assert _applies(with_selector, labelled)
    with_condition = copy.deepcopy(exc)
    with_condition["spec"]["match"]["condition"] = "object.spec.containers.all(c, c.image == 'bench:1')"
    assert _applies(with_condition, pod)
    with_condition["spec"]["match"]["condition"] = "object.spec.containers.all(c, c.image == 'other:1')"
    assert not _applies(with_condition, pod)
    with_condition["spec"]["match"]["condition"] = "object.spec.nodeName.size() > 0"   # fails to evaluate: no match
    assert not _applies(with_condition, pod)


def test_a_validation_the_rules_mark_not_exceptable_is_never_lifted_even_if_an_exception_names_it():
    """An exception created before its validation was marked exceptable: false (or past the webhook) lifts nothing."""
    exc = _exception()
    exc["spec"]["validations"] = ["one-accelerator-family", "privileged-gate"]
    grant = read_grant(exc, {"pods-validation": frozenset({"one-accelerator-family"})})
    assert grant.validations == frozenset({"one-accelerator-family"})
    instance_exc = _exception()
    instance_exc["spec"].update(policy="instances-validation", validations=["privileged-gate"])
    instance = {"apiVersion": "worker.gpustack.ai/v1", "kind": "Instance",
                "metadata": {"name": "bench", "namespace": "default"},
                "spec": {"type": "gpustack--generic-linux-amd64", "image": "x", "privileged": True,
                         "volume": {"ephemeral": {"capacity": "1Gi"}}}}
    assert not _applies(instance_exc, instance)


def test_label_selector_operators():
    labels = {"team": "bench", "tier": "gold"}
    assert selector_matches(None, labels) and selector_matches({}, labels)
    assert selector_matches({"matchExpressions": [{"key": "team", "operator": "In", "values": ["bench", "x"]},
                                                  {"key": "tier", "operator": "NotIn", "values": ["bronze"]},
                                                  {"key": "team", "operator": "Exists"},
                                                  {"key": "gone", "operator": "DoesNotExist"}]}, labels)
    for requirement in ({"key": "team", "operator": "In", "values": ["x"]},
                        {"key": "tier", "operator": "NotIn", "values": ["gold"]},
                        {"key": "gone", "operator": "Exists"}, {"key": "team", "operator": "DoesNotExist"},
                        {"key": "team", "operator": "Gt", "values": ["1"]}):
        assert not selector_matches({"matchExpressions": [requirement]}, labels), requirement


def test_a_condition_that_does_not_compile_matches_nothing():
    assert Conditions().holds("object.metadata.name == 'a'", {"metadata": {"name": "a"}})
    assert not Conditions().holds("object.metadata.name ==", {"metadata": {"name": "a"}})


# -- every refusal of rules/admission/exceptions.yaml, through the webhook's engine ---------------------------------
def _refusal(**spec) -> str:
    exc = _exception()
    for key, value in spec.items():
        if value is None:
            exc["spec"].pop(key, None)
        else:
            exc["spec"][key] = value
    answer, _ = decide(ENGINE, review_for(exc, "CREATE"), VIEW, now=datetime(2026, 12, 7, 12, tzinfo=timezone.utc))
    return (answer["response"].get("status") or {}).get("message", "allowed")


PREFIX = 'PolicyException.worker.gpustack.ai "bench-two-families" is invalid: '


def test_a_well_formed_exception_is_admitted():
    assert _refusal() == "allowed"


def test_refused_naming_a_validation_that_may_not_be_excepted():
    assert _refusal(policy="instances-validation", validations=["host-path-gate"]) == PREFIX + (
        "spec.validations: Forbidden: validation host-path-gate of policy instances-validation may not be excepted "
        "(exceptable: false in its rule file: a host-access or privileged gate, or a trust boundary)")


def test_refused_naming_a_policy_that_does_not_exist():
    assert _refusal(policy="pod-validation") == PREFIX + (
        'spec.policy: Not found: "pod-validation": no validating AdmissionPolicy of that name (policies: '
        "instances-validation, instancetypeflavors-validation, instancetypes-validation, pods-validation, "
        "policyexceptions-validation, settings-validation)")


def test_refused_naming_a_validation_that_does_not_exist():
    assert _refusal(validations=["two-families"]).startswith(
        PREFIX + 'spec.validations: Not found: "two-families": policy pods-validation has no validation of that name '
                 "(validations: sidecar-requests-no-accelerator, one-accelerator-family, ")


def test_refused_without_an_expiry():
    assert _refusal(expiresAt=None) == PREFIX + (
        "spec.expiresAt: Required value: an exception must end: set an RFC 3339 time no more than 720h ahead "
        "(rules/exceptions.yaml maxDuration)")


def test_refused_with_an_expiry_beyond_the_maximum_of_the_rules():
    assert _refusal(expiresAt="2027-01-06T12:00:01Z") == PREFIX + (
        'spec.expiresAt: Invalid value: "2027-01-06T12:00:01Z": must be no later than 2027-01-06T12:00:00Z (720h '
        "ahead, rules/exceptions.yaml maxDuration)")
    assert _refusal(expiresAt="2027-01-06T12:00:00Z") == "allowed"


def test_refused_outside_the_namespaces_the_rules_allow():
    exc = _exception()
    exc["metadata"]["namespace"] = "default"
    answer, _ = decide(ENGINE, review_for(exc, "CREATE"), VIEW, now=BEFORE)
    assert answer["response"]["status"]["message"] == PREFIX + (
        "metadata.namespace: Forbidden: a PolicyException may live only in namespace(s) gpustack-exceptions "
        "(rules/exceptions.yaml namespaces), not default")


def test_refused_with_a_match_condition_the_checker_refuses():
    message = _refusal(match={"namespaces": ["default"], "condition": "object.spec.nodeNam == 'x'"})
    assert message.startswith(PREFIX + "spec.match.condition: Invalid value: \"object.spec.nodeNam == 'x'\": 1:13: "
                                       "object.spec has no field or key 'nodeNam' (known: ")


def test_lint_flags_a_refused_exception_in_a_snapshot(tmp_path):
    exc = _exception()
    exc["spec"]["validations"] = ["privileged-gate"]
    exc["spec"]["policy"] = "instances-validation"
    (tmp_path / "exc.yaml").write_text(yaml.safe_dump(exc))
    code, out = _cli("lint", str(REPO / "rules"), "--snapshot", str(tmp_path), "--now", "2026-12-07T12:00:00Z")
    assert code == 1
    assert "PolicyException gpustack-exceptions/bench-two-families: spec.validations: Forbidden: validation " \
           "privileged-gate of policy instances-validation may not be excepted (exceptable: false in its rule file: " \
           "a host-access or privileged gate, or a trust boundary)" in out.splitlines()
    code, out = _cli("lint", str(REPO / "rules"), "--snapshot", str(FIXTURES), "--now", "2026-12-07T12:00:00Z")
    assert code == 0, out


def test_the_builtin_variables_the_static_checks_know_are_the_engines():
    assert conditioncheck.BUILTIN_VARIABLES == frozenset(VARIABLES)


def test_the_type_checker_knows_cels_timestamp_and_duration_arithmetic():
    """rules/admission/exceptions.yaml compares timestamp(expiresAt) with timestamp(request.time) + duration(max)."""
    from runtime.rules.cel.check import check
    from runtime.rules.cel.library.table import LIBRARY
    from runtime.rules.cel.names import Names
    from runtime.rules.cel.parse import parse
    from runtime.rules.cel.types import Scope, sized

    def problems(source: str) -> list[str]:
        scope = Scope(roots={"a": sized("string", 64)}, functions=LIBRARY)
        return [p.message for p in check(source, parse(source), Names(roots=frozenset({"a"})), scope, "bool").types]

    assert problems("timestamp(a) <= timestamp(a) + duration('720h')") == []
    assert problems("timestamp(a) - timestamp(a) < duration('1h') + duration('1m')") == []
    assert problems("timestamp(a) + timestamp(a) == timestamp(a)") == [
        "type mismatch: no '+' for (timestamp, timestamp) in 'timestamp(a) + timestamp(a)'"]
