"""Rule kind ``ExceptionPolicy`` (rules/exceptions.yaml): what a ``PolicyException`` may do and the words
accelpolicy uses about one (docs/concepts/exceptions.md "Governed exceptions").

A PolicyException (crds/worker.gpustack.ai_policyexceptions.yaml) lets objects it matches past named
validations of one AdmissionPolicy until its ``expiresAt``. This document says where exceptions may live
(``namespaces``: RBAC on those namespaces is who may grant one), how far ahead an expiry may be
(``maxDuration``), how long an expired one stays listed by the audit (``recentlyExpired``), the warning an
allowed-by-exception review carries, the audit's ``skip`` message and findings, and the Events of an
exception starting and ending to apply. Which validations may be lifted is each validation's own
``exceptable`` (rules/admission/*.yaml).
"""
from __future__ import annotations

import re
import string

from pydantic import Field, field_validator, model_validator

from runtime.model import rulefiles
from runtime.model.base import Strict
from runtime.model.stateevents import StateEvent

_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")

# The str.format variables of the messages below (runtime/engine/admission/exceptions.py fills them).
GRANT_VARIABLES = frozenset({"namespace", "name", "policy", "rule", "expiresAt", "reason", "approver",
                             "ticket"})
FINDING_VARIABLES = frozenset({"namespace", "name", "policy", "expiresAt", "reason", "approver", "ticket",
                               "covered"})


def duration_seconds(text: str) -> int:
    """``720h``, ``90m``, ``1h30m``, ``45s`` -> seconds. Raises ValueError naming the text."""
    found = _DURATION.match(text or "")
    if not text or found is None:
        raise ValueError(f"{text!r} is not a duration such as 720h, 90m or 1h30m")
    hours, minutes, seconds = (int(g or 0) for g in found.groups())
    return hours * 3600 + minutes * 60 + seconds


def known_variables(template: str, known: frozenset[str]) -> str:
    """``template`` when every str.format field it names is in ``known``; else ValueError naming them."""
    unknown = {name for _, name, _, _ in string.Formatter().parse(template) if name} - known
    if unknown:
        raise ValueError(f"unknown variables {sorted(unknown)} (known: {sorted(known)})")
    return template


class ExceptionFinding(Strict):
    """A finding of the audit about an exception itself: its ``rule``, ``result`` and ``message``."""

    rule: str = Field(min_length=1)
    result: str = Field(pattern=r"^(pass|fail|warn|error|skip)$")
    message: str = Field(min_length=1, description="str.format with namespace, name, policy, expiresAt, "
                                                   "reason, approver, ticket, covered")

    @field_validator("message")
    @classmethod
    def _known_variables(cls, value: str) -> str:
        return known_variables(value, FINDING_VARIABLES)


class ExceptionAudit(Strict):
    """What `accelpolicy audit` says about exceptions: the results' ``policy`` name, an exception that
    expired within ``recentlyExpired`` (``expired``) and one in force that matches no object
    (``unmatched``)."""

    policy: str = Field(min_length=1)
    expired: ExceptionFinding
    unmatched: ExceptionFinding


class ExceptionEvents(Strict):
    """The Events on a PolicyException (docs/observability.md "Events"): it starts applying (in force:
    valid and before its expiry) and it ends (expired, or no longer valid under the rules)."""

    started: StateEvent
    ended: StateEvent


class ExceptionPolicySpec(Strict):
    """``kind: ExceptionPolicy`` (rules/exceptions.yaml): the namespaces PolicyExceptions may live in, how far
    ahead their expiry may be, how long the audit lists an expired one, and the words of the warning, the
    audit's skip result and findings, and the Events (docs/concepts/exceptions.md "Governed exceptions")."""

    namespaces: list[str] = Field(min_length=1, description="the only namespaces a PolicyException may live "
                                                            "in (and apply from)")
    maxDuration: str = Field(description="how far ahead of the review that creates or updates it an "
                                         "exception's expiresAt may be (e.g. 720h)")
    recentlyExpired: str = Field("24h", description="how long the audit lists an exception after it expired")
    warning: str = Field(min_length=1, description="the AdmissionReview warning of a review allowed by an "
                                                   "exception; str.format with namespace, name, policy, "
                                                   "rule, expiresAt, reason, approver, ticket")
    skip: str = Field(min_length=1, description="the message of the audit's skip result of an excepted rule; "
                                                "the same variables")
    audit: ExceptionAudit
    events: ExceptionEvents

    @field_validator("maxDuration", "recentlyExpired")
    @classmethod
    def _duration(cls, value: str) -> str:
        if duration_seconds(value) <= 0:
            raise ValueError(f"{value!r} must be longer than 0s")
        return value

    @field_validator("warning", "skip")
    @classmethod
    def _grant_variables(cls, value: str) -> str:
        return known_variables(value, GRANT_VARIABLES)

    @model_validator(mode="after")
    def _event_variables(self) -> "ExceptionPolicySpec":
        for which in ("started", "ended"):
            try:
                known_variables(getattr(self.events, which).message, FINDING_VARIABLES)
            except ValueError as exc:
                raise ValueError(f"events.{which}.message: {exc}") from None
        return self

    @property
    def recent_seconds(self) -> int:
        """``recentlyExpired`` in seconds."""
        return duration_seconds(self.recentlyExpired)


rulefiles.SPEC_MODELS["ExceptionPolicy"] = ExceptionPolicySpec
