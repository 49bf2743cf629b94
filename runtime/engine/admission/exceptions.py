"""Governed exceptions: which PolicyExceptions apply to an object for a rule now (docs/concepts/exceptions.md
"Governed exceptions").

:meth:`Exceptions.applying` is the one answer every path asks: the webhooks and ``accelpolicy admit`` /
``explain admit`` (through :meth:`runtime.engine.admission.engine.AdmissionEngine.run`), the background audit,
``accelpolicy audit``, its HTML page and its PolicyReports (:mod:`runtime.report.audit`), and the controller's
exception status (:mod:`runtime.controller.exceptions`). Each passes the instant it judges at (``now``, an
aware datetime from its injected clock), so an exception stops applying on every path at the same instant.

An exception applies to an object for a rule at ``now`` when all hold:

- it lives in a namespace of rules/exceptions.yaml ``namespaces``;
- its ``spec.policy`` is the policy and ``spec.validations`` names the rule, and the rules in force let that
  rule be lifted (``exceptable``, rules/admission/*.yaml; an exception that names anything else is refused at
  creation and flagged by ``lint``, and the name it got wrong lifts nothing);
- ``now`` is before its ``spec.expiresAt`` (RFC 3339; absent or unreadable: never);
- its ``spec.match`` selects the object: ``namespaces`` (the object's namespace among them; required for a
  namespaced object), ``names`` (absent: any), ``selector`` (a label selector), ``condition`` (CEL on
  ``object``; an evaluation error or a non-true result: no match).

Pure: no clock is read here, no I/O.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Optional

from runtime.engine.snapshot import Snapshot, labels_of
from runtime.model.exceptions import ExceptionPolicySpec
from runtime.model.rfc3339 import format_time, parse_time
from runtime.rules.cel.compile import compile_expression
from runtime.rules.cel.errors import CelCompileError, CelEvalError
from runtime.rules.cel.evaluate import CelExpression

EXCEPTION_KIND = "PolicyException"
_CONDITIONS = 1024   # compiled conditions kept per engine (distinct condition texts)


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


@dataclass(frozen=True)
class Grant:
    """One PolicyException as the rules read it: its ``namespace``/``name``, the ``policy`` and the
    ``validations`` it lifts (those the rules let it lift), its match, its words and its expiry
    (``expires`` None when absent or unreadable: never in force)."""

    namespace: str
    name: str
    policy: str
    validations: frozenset[str]
    namespaces: tuple[str, ...]
    names: tuple[str, ...]
    selector: Optional[dict] = field(compare=False)   # a dict: left out of the hash
    condition: str
    reason: str
    ticket: str
    approver: str
    expires_at: str
    expires: Optional[datetime]
    uid: str = ""

    @property
    def ref(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"

    def in_force(self, now: datetime) -> bool:
        """True while ``now`` is before its expiry."""
        return self.expires is not None and now < self.expires

    def words(self, **more: Any) -> dict[str, Any]:
        """The str.format variables of rules/exceptions.yaml's messages (plus ``more``)."""
        return {"namespace": self.namespace, "name": self.name, "policy": self.policy,
                "expiresAt": self.expires_at, "reason": self.reason or "-", "approver": self.approver or "-",
                "ticket": self.ticket or "-", **more}


def read_grant(obj: dict, exceptable: Optional[dict] = None) -> Grant:
    """The :class:`Grant` of a PolicyException object; a field of the wrong type reads as absent.
    ``exceptable`` (policy -> the validation names that may be lifted) narrows ``validations``."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    match = spec.get("match") if isinstance(spec.get("match"), dict) else {}
    policy = _text(spec.get("policy"))
    validations = frozenset(_strings(spec.get("validations")))
    if exceptable is not None:
        validations &= exceptable.get(policy, frozenset())
    expires_at = _text(spec.get("expiresAt"))
    return Grant(namespace=_text(meta.get("namespace")), name=_text(meta.get("name")), policy=policy,
                 validations=validations, namespaces=_strings(match.get("namespaces")),
                 names=_strings(match.get("names")),
                 selector=match.get("selector") if isinstance(match.get("selector"), dict) else None,
                 condition=_text(match.get("condition")), reason=_text(spec.get("reason")),
                 ticket=_text(spec.get("ticket")), approver=_text(spec.get("approver")),
                 expires_at=expires_at, expires=parse_time(expires_at), uid=_text(meta.get("uid")))


def selector_matches(selector: Optional[dict], labels: dict) -> bool:
    """A metav1.LabelSelector (``matchLabels``, ``matchExpressions`` with In, NotIn, Exists,
    DoesNotExist) against ``labels``; None or ``{}`` selects everything, an unknown operator nothing."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for requirement in selector.get("matchExpressions") or []:
        if not isinstance(requirement, dict):
            return False
        key, op = requirement.get("key"), requirement.get("operator")
        values = requirement.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if (op == "Exists" and key not in labels) or (op == "DoesNotExist" and key in labels):
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True


class Conditions:
    """The compiled ``match.condition`` programs of one rules generation (by text, at most
    :data:`_CONDITIONS`), each run with the generation's CEL budget (``limits``)."""

    def __init__(self, limits=None):
        self.limits = limits
        self._compiled: dict[str, Optional[CelExpression]] = {}
        self._lock = threading.Lock()

    def holds(self, source: str, obj: dict) -> bool:
        """True when the condition evaluates to true on ``object``; a condition that does not compile or
        fails to evaluate (its budget spent too) holds for nothing."""
        with self._lock:
            program = self._compiled.get(source, False)
        if program is False:
            try:
                program = compile_expression(source, "PolicyException spec.match.condition")
                if self.limits is not None:
                    program.limits = self.limits
            except CelCompileError:
                program = None
            with self._lock:
                if len(self._compiled) >= _CONDITIONS:
                    self._compiled.clear()
                self._compiled[source] = program
        if program is None:
            return False
        try:
            return program.evaluate({"object": obj}) is True
        except CelEvalError:
            return False


def selects(grant: Grant, obj: dict, namespace: str, conditions: Conditions) -> bool:
    """Whether ``grant``'s match selects ``obj`` (in ``namespace``, "" when cluster-scoped)."""
    if namespace and namespace not in grant.namespaces:
        return False
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    if grant.names and meta.get("name") not in grant.names:
        return False
    if not selector_matches(grant.selector, labels_of(obj)):
        return False
    return not grant.condition or conditions.holds(grant.condition, obj)


@dataclass
class Exceptions:
    """The PolicyExceptions of one snapshot under one rules generation, by policy: only those in an allowed
    namespace naming a known policy, their ``validations`` narrowed to what the rules let be lifted."""

    spec: Optional[ExceptionPolicySpec]
    grants: dict[str, list[Grant]] = field(default_factory=dict)
    conditions: Conditions = field(default_factory=Conditions)

    def applying(self, policy: str, rule: str, obj: dict, namespace: str,
                 now: Optional[datetime]) -> list[Grant]:
        """The exceptions that apply to ``obj`` (in ``namespace``) for ``rule`` of ``policy`` at ``now``, in
        namespace/name order; none when ``now`` is None (no instant given: nothing is excepted)."""
        if now is None:
            return []
        return [g for g in self.grants.get(policy, ()) if rule in g.validations and g.in_force(now)
                and selects(g, obj, namespace, self.conditions)]

    def warning(self, grant: Grant, rule: str) -> str:
        """The AdmissionReview warning of ``rule`` lifted by ``grant`` (rules/exceptions.yaml ``warning``)."""
        return self.spec.warning.format(**grant.words(rule=rule)) if self.spec else grant.ref

    def skip_message(self, grant: Grant, rule: str) -> str:
        """The audit's skip message of ``rule`` lifted by ``grant`` (rules/exceptions.yaml ``skip``)."""
        return self.spec.skip.format(**grant.words(rule=rule)) if self.spec else grant.ref


def exception_spec(policy) -> Optional[ExceptionPolicySpec]:
    """The ExceptionPolicy of ``policy``'s rules, None without one (then no exception applies)."""
    found = policy.ruleset.all("ExceptionPolicy")
    return found[0].spec if found else None


def build_exceptions(spec: Optional[ExceptionPolicySpec], table: dict, snapshot: Snapshot,
                     conditions: Conditions) -> Exceptions:
    """:class:`Exceptions` of ``snapshot``'s PolicyExceptions; ``table`` is the ``exceptions`` param
    (:func:`runtime.rules.vocabulary.exception_params`: namespaces, policies and what each lets be lifted)."""
    allowed = set(table.get("namespaces") or ()) if spec is not None else set()
    exceptable = {name: frozenset(p["validations"]) - frozenset(p["notExceptable"])
                  for name, p in (table.get("policies") or {}).items()}
    out = Exceptions(spec, {}, conditions)
    for obj in snapshot.list(EXCEPTION_KIND):
        grant = read_grant(obj, exceptable)
        if grant.namespace in allowed and grant.validations:
            out.grants.setdefault(grant.policy, []).append(grant)
    return out


def lifted_words(grant: Grant, rule: str) -> dict[str, str]:
    """The properties an audit result of a lifted ``rule`` carries (PolicyReport ``properties``)."""
    return {"exception": grant.ref, "rule": rule, "reason": grant.reason, "approver": grant.approver,
            "ticket": grant.ticket, "expiresAt": grant.expires_at}


def recently_expired(grant: Grant, now: datetime, seconds: int) -> bool:
    """Expired at or before ``now`` and less than ``seconds`` ago."""
    expires = grant.expires
    return expires is not None and expires <= now and (now - expires).total_seconds() < seconds


__all__ = ["EXCEPTION_KIND", "Conditions", "Exceptions", "Grant", "build_exceptions", "exception_spec",
           "format_time", "lifted_words", "read_grant", "recently_expired", "selects", "selector_matches"]


_HELD_KEY = "policyExceptions"   # the view's ``held`` entry: (engine, Exceptions)


def conditions_of(policy) -> Conditions:
    """A :class:`Conditions` with the run-time CEL budget of ``policy``'s rules (rules/cel.yaml)."""
    found = policy.ruleset.all("CelLimits")
    return Conditions(found[0].spec.runtime if found else None)


def exceptions_of(engine, view) -> Exceptions:
    """The :class:`Exceptions` of ``view``'s snapshot under ``engine``'s rules, built once per view and
    engine (kept in ``view.held``)."""
    held = view.held.get(_HELD_KEY)
    if held is not None and held[0] is engine:
        return held[1]
    found = build_exceptions(engine.exception_spec, engine.exception_table, view.snapshot, engine.conditions)
    view.held[_HELD_KEY] = (engine, found)
    return found


def lift(engine, name: str, request, view, now: Optional[datetime], outcome) -> None:
    """Lift, in ``outcome`` (of validating policy ``name`` on ``request``), every field error whose rule an
    exception applying at ``now`` covers (:meth:`Exceptions.applying`): the error leaves ``errors``, the
    ``(rule, Grant)`` pair joins ``lifted`` and the review carries the warning naming the exception and its
    expiry. A rule that answered alone, or a denial, is never lifted (the engine stopped there)."""
    if now is None or not outcome.errors or engine.policies[name].type != "validating":
        return
    found = exceptions_of(engine, view)
    if not found.grants.get(name):
        return
    obj = request.object or request.old_object
    kept = []
    for error in outcome.errors:
        grants = found.applying(name, error.rule, obj, request.namespace, now)
        if grants:
            outcome.lifted.append((error.rule, grants[0]))
        else:
            kept.append(error)
    outcome.errors = kept
    for rule, grant in dict.fromkeys(outcome.lifted):
        outcome.warnings.append(found.warning(grant, rule))
