"""The reload and background-audit Events are rule data (rules/reload.yaml and rules/controller.yaml
``events``): reason, type and message change with an edit of a rules copy, no Python edit. A reload's Events
name the generation by its content hash, in their text and in their name."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from runtime.controller.backgroundaudit import failed_event
from runtime.reload.report import reload_message, rules_event
from runtime.report.results import ObjectRef, Result
from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules
from tests.engine.test_policy_is_data import edit, rules_copy  # noqa: F401 - the fixture

NOW = datetime(2026, 12, 1, 9, 0, 0, tzinfo=timezone.utc)


def test_reload_messages_of_the_shipped_rules():
    ruleset = load_rules(DEFAULT_RULES_DIR)
    assert reload_message(ruleset, "reloaded", generation="3f2a9c1d0b7e", root="/etc/accelpolicy/rules",
                          seconds=0.12345) == ("rules generation 3f2a9c1d0b7e from /etc/accelpolicy/rules in force "
                                               "(loaded in 0.123s)")
    problems = [f"rules/x.yaml:{i}:1 spec: bad" for i in range(1, 13)]
    refused = reload_message(ruleset, "refused", root="/r", generation="aaaaaaaaaaaa", serving="3f2a9c1d0b7e",
                             problems=problems)
    assert refused.splitlines() == (["rules generation aaaaaaaaaaaa in /r refused; generation 3f2a9c1d0b7e keeps "
                                     "serving:"] + problems[:10] + ["... and 2 more"])


def test_edited_event_templates_change_the_events(rules_copy):
    controller = rules_copy / "controller.yaml"
    edit(rules_copy / "reload.yaml", "reason: RulesRefused\n      message: \"rules generation {generation} in {root} refused;",
         "reason: RulesRejected\n      message: \"rules generation {generation} in {root} rejected;")
    edit(controller, "{type: Warning, reason: AuditFailed, message: \"{policy}/{rule}: {message}\"}",
          "{type: Normal, reason: PolicyAuditFailed, message: \"audit {policy} rule {rule}: {message}\"}")
    ruleset = load_rules(rules_copy)
    events = ruleset.get("ControllerPolicy").events
    reload_events = ruleset.get("ReloadGate").events
    assert (reload_events.refused.reason, events.auditFailed.reason) == ("RulesRejected", "PolicyAuditFailed")
    assert reload_message(ruleset, "refused", root="/r", generation="b", serving="a", problems=["p"]) == (
        "rules generation b in /r rejected; generation a keeps serving:\np")
    result = Result("pods-validation", "", "fail", ObjectRef("Pod", "two-families", "default", "v1", "u-1"),
                    "spec: Forbidden: one accelerator family per Pod")
    event = failed_event(events.auditFailed, result, NOW)
    assert (event["type"], event["reason"], event["message"]) == (
        "Normal", "PolicyAuditFailed", "audit pods-validation rule -: spec: Forbidden: one accelerator family per Pod")
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "two-families",
                                       "namespace": "default", "uid": "u-1"}
    assert event["metadata"]["namespace"] == "default"


def test_a_reload_template_with_an_unknown_variable_is_refused(rules_copy):
    edit(rules_copy / "reload.yaml", "from {root} in force", "from {directory} in force")
    with pytest.raises(Exception) as info:
        load_rules(rules_copy)
    assert "reloaded.message: unknown variable(s) ['directory']; allowed: ['generation', 'root', 'seconds']" \
        in str(info.value)


# The bodies below are what rules_event and failed_event built before they went through
# runtime.kube.events.event (the one Event builder), written out field by field.
STAMP_MS = "1a230d5137a"  # NOW + 0.25 s in milliseconds, hex
LATER = datetime(2026, 12, 1, 9, 0, 0, 250000, tzinfo=timezone.utc)


def test_a_rules_reload_event_body():
    """Named by the generation's content hash and the outcome: the same outcome of the same generation is one
    Event, whichever process and however many restarts recorded it."""
    events = load_rules(DEFAULT_RULES_DIR).get("ReloadGate").events
    message = "rules generation 3f2a9c1d0b7e from /etc/accelpolicy/rules in force (loaded in 0.123s)"
    assert rules_event("accelpolicy-system", events.reloaded.reason, events.reloaded.type, message,
                       LATER, "accelpolicy-rules", "3f2a9c1d0b7e", "reloaded") == {
        "apiVersion": "v1", "kind": "Event", "type": "Normal", "reason": "RulesReloaded", "message": message,
        "metadata": {"name": "accelpolicy-rules.3f2a9c1d0b7e.reloaded", "namespace": "accelpolicy-system"},
        "involvedObject": {"apiVersion": "v1", "kind": "ConfigMap", "name": "accelpolicy-rules",
                           "namespace": "accelpolicy-system"},
        "source": {"component": "accelpolicy"}, "reportingComponent": "accelpolicy",
        "firstTimestamp": "2026-12-01T09:00:00Z", "lastTimestamp": "2026-12-01T09:00:00Z", "count": 1}
    # without a rules ConfigMap: on the Namespace, in it
    assert rules_event("accelpolicy-system", "RulesRefused", "Warning", "m", LATER, None, "aaaaaaaaaaaa",
                       "refused") == {
        "apiVersion": "v1", "kind": "Event", "type": "Warning", "reason": "RulesRefused", "message": "m",
        "metadata": {"name": "accelpolicy-rules.aaaaaaaaaaaa.refused", "namespace": "accelpolicy-system"},
        "involvedObject": {"apiVersion": "v1", "kind": "Namespace", "name": "accelpolicy-system",
                           "namespace": "accelpolicy-system"},
        "source": {"component": "accelpolicy"}, "reportingComponent": "accelpolicy",
        "firstTimestamp": "2026-12-01T09:00:00Z", "lastTimestamp": "2026-12-01T09:00:00Z", "count": 1}


def test_an_audit_event_body():
    template = load_rules(DEFAULT_RULES_DIR).get("ControllerPolicy").events.auditFailed
    result = Result("pods-validation", "", "fail", ObjectRef("Pod", "two-families", "default", "v1", "u-1"),
                    "spec: Forbidden: one accelerator family per Pod")
    assert failed_event(template, result, LATER) == {
        "apiVersion": "v1", "kind": "Event", "type": "Warning", "reason": "AuditFailed",
        "message": "pods-validation/-: spec: Forbidden: one accelerator family per Pod",
        "metadata": {"name": f"two-families.audit.{STAMP_MS}", "namespace": "default"},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": "two-families", "namespace": "default",
                           "uid": "u-1"},
        "source": {"component": "accelpolicy"}, "reportingComponent": "accelpolicy",
        "firstTimestamp": "2026-12-01T09:00:00Z", "lastTimestamp": "2026-12-01T09:00:00Z", "count": 1}
    # a cluster-scoped object without a uid: no namespace or uid in involvedObject, the Event in
    # ``default``; the message cut at 1,024 characters
    node = Result("nodes", "r1", "error", ObjectRef("Node", "n1", "", "v1", ""), "x" * 2000)
    assert failed_event(template, node, LATER) == {
        "apiVersion": "v1", "kind": "Event", "type": "Warning", "reason": "AuditFailed",
        "message": ("nodes/r1: " + "x" * 2000)[:1024],
        "metadata": {"name": f"n1.audit.{STAMP_MS}", "namespace": "default"},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": "n1"},
        "source": {"component": "accelpolicy"}, "reportingComponent": "accelpolicy",
        "firstTimestamp": "2026-12-01T09:00:00Z", "lastTimestamp": "2026-12-01T09:00:00Z", "count": 1}
