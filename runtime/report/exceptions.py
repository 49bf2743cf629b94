"""What the audit says about PolicyExceptions (docs/concepts/exceptions.md "In the audit"), and how many
objects each covers now (the controller writes it into the exception's status).

- :func:`lifted_results`: a ``skip`` result per rule a PolicyException lifted on an existing object, naming
  the exception, its reason and its expiry (never ``pass``, never ``fail``);
- :func:`exception_results`: the exceptions that expired within rules/exceptions.yaml ``recentlyExpired`` and
  those in force that match no object (rules/exceptions.yaml ``audit``);
- :func:`coverage`: per exception, whether it is in force and how many existing objects it selects.

All judge at the caller's ``now`` through :meth:`runtime.engine.admission.exceptions.Exceptions.applying`'s
rules (:func:`runtime.engine.admission.exceptions.selects`), so they agree with the webhooks at that instant.
Pure: no clock, no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Iterable, Optional

from runtime.engine.admission import AdmissionEngine, AdmissionView, Outcome
from runtime.engine.admission.exceptions import (EXCEPTION_KIND, exceptions_of, lifted_words, read_grant,
                                                 recently_expired, selects)
from runtime.report.results import ObjectRef, Result


def lifted_results(engine: AdmissionEngine, view: AdmissionView, name: str, outcome: Outcome, ref: ObjectRef,
                   operation: str) -> list[Result]:
    """A ``skip`` result per ``(rule, exception)`` of ``outcome.lifted`` (policy ``name``, object ``ref``):
    rules/exceptions.yaml ``skip`` as the message; the exception, its reason, approver, ticket and expiry as
    properties."""
    found = exceptions_of(engine, view)
    return [Result(name, rule, "skip", ref, found.skip_message(grant, rule), "",
                   {"operation": operation, **lifted_words(grant, rule)})
            for rule, grant in dict.fromkeys(outcome.lifted)]


@dataclass(frozen=True)
class Coverage:
    """One PolicyException at an instant: ``in_force`` (valid under the rules and before its expiry),
    ``covered`` (existing objects its policy matches and its match selects, 0 when not in force) and ``why``
    it does not apply ("" when it does)."""

    namespace: str
    name: str
    in_force: bool
    covered: int
    why: str


def _why_not(grant, valid: bool, now: datetime) -> str:
    if not valid:
        return "refused by the rules in force (accelpolicy audit names the reason)"
    if grant.expires is None:
        return "no readable spec.expiresAt"
    return "" if grant.in_force(now) else f"expired at {grant.expires_at}"


def coverage(engine: AdmissionEngine, view: AdmissionView, now: datetime,
             judged: Iterable[tuple]) -> dict[tuple[str, str], Coverage]:
    """``(namespace, name) -> Coverage`` of every PolicyException of ``view`` at ``now``; the objects counted
    are ``judged``: ``(policy name, object, request)`` of every object a policy judges
    (:func:`runtime.report.audit.audited_requests`)."""
    valid = {(g.namespace, g.name): g
             for grants in exceptions_of(engine, view).grants.values() for g in grants}
    counts = dict.fromkeys(valid, 0)
    conditions = engine.conditions
    live = {key: g for key, g in valid.items() if g.in_force(now)}
    if live:
        for policy, obj, _request in judged:
            namespace = str((obj.get("metadata") or {}).get("namespace") or "")
            for key, grant in live.items():
                if grant.policy == policy and selects(grant, obj, namespace, conditions):
                    counts[key] += 1
    out = {}
    for obj in view.snapshot.list(EXCEPTION_KIND):
        grant = read_grant(obj)
        key = (grant.namespace, grant.name)
        why = _why_not(valid.get(key, grant), key in valid, now)
        out[key] = Coverage(grant.namespace, grant.name, not why, counts.get(key, 0) if not why else 0, why)
    return out


def exception_results(engine: AdmissionEngine, view: AdmissionView, now: Optional[datetime],
                      judged: Iterable[tuple]) -> list[Result]:
    """The audit's findings about the exceptions themselves at ``now`` (none when ``now`` is None or the
    rules hold no ExceptionPolicy; ``judged`` as :func:`coverage`'s): rules/exceptions.yaml ``audit.expired``
    for one that expired less than ``recentlyExpired`` ago, ``audit.unmatched`` for one in force that
    matches no object."""
    spec = engine.exception_spec
    if now is None or spec is None:
        return []
    out: list[Result] = []
    covered = coverage(engine, view, now, judged)
    for obj in view.snapshot.list(EXCEPTION_KIND):
        grant = read_grant(obj)
        state = covered[(grant.namespace, grant.name)]
        if recently_expired(grant, now, spec.recent_seconds):
            finding = spec.audit.expired
        elif state.in_force and state.covered == 0:
            finding = spec.audit.unmatched
        else:
            continue
        out.append(Result(spec.audit.policy, finding.rule, finding.result, ObjectRef.of(obj),
                          finding.message.format(**grant.words(covered=state.covered)), "",
                          {"exception": grant.ref, "expiresAt": grant.expires_at}))
    return out
