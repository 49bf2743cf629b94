"""Field errors, their rendering, and the AdmissionReview v1 response (docs/reference/controller.md "Pod
admission").

Pure functions: :func:`render_error` renders one field error the way kube-apiserver does
(``<path>: <Type>: <detail>``); :func:`build_response` turns an :class:`Outcome` into the
``response`` of an AdmissionReview v1 (uid echoed; denial ``status``; base64 JSONPatch).

Status codes (our choice; docs/webhook-hardening.md): a field-error list is ``422 Invalid``; a mutating
webhook's denial is ``403 Forbidden``; an internal, retryable failure is ``500 InternalError``
answered alone (decision 16); a malformed review is ``400 BadRequest``.
"""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from runtime.model.admission import all_validations

if TYPE_CHECKING:
    from runtime.engine.policy import Policy

MISSING = object()

# reason -> (rendered type, StatusCause reason)
_TYPES = {
    "Forbidden": ("Forbidden", "FieldValueForbidden"),
    "Required": ("Required value", "FieldValueRequired"),
    "Invalid": ("Invalid value", "FieldValueInvalid"),
    "NotFound": ("Not found", "FieldValueNotFound"),
    "Unsupported": ("Unsupported value", "FieldValueNotSupported"),
    "TooMany": ("Too many", "FieldValueTooMany"),
    "TooLong": ("Too long", "FieldValueTooLong"),
}
_WITH_VALUE = {"Invalid", "NotFound", "Unsupported", "TooMany"}


@dataclass(frozen=True)
class FieldError:
    """One field error: ``reason`` (Forbidden, Required, Invalid, NotFound, Unsupported, TooMany,
    TooLong), the field
    path (``spec.containers[0].resources.limits[nvidia.com/gpu.sliced]``), the offending value
    (JSON; :data:`MISSING` when none) and the detail text. ``rule`` names the rule (metrics)."""

    reason: str
    field: str
    detail: str
    value: Any = MISSING
    rule: str = ""

    def body(self) -> str:
        """``<Type>: <detail>`` (Kubernetes ErrorBody)."""
        label = _TYPES[self.reason][0]
        if self.reason in _WITH_VALUE:
            label = f"{label}: {render_value('' if self.value is MISSING else self.value)}"
        return f"{label}: {self.detail}" if self.detail else label

    def render(self) -> str:
        """``<path>: <Type>: <detail>``."""
        return f"{self.field}: {self.body()}" if self.field else self.body()


def render_value(value: Any) -> str:
    """A field value as the API server prints it: strings quoted, numbers and booleans bare."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def aggregate(errors: list[FieldError]) -> str:
    """The single rendered error, or ``[e1, e2, ...]`` with identical strings once."""
    seen: list[str] = []
    for err in errors:
        text = err.render()
        if text not in seen:
            seen.append(text)
    return seen[0] if len(seen) == 1 else "[" + ", ".join(seen) + "]"


@dataclass
class Outcome:
    """What one review decided.

    ``errors`` non-empty -> 422 Invalid; ``denial`` ``(code, reason, message)`` -> that status;
    otherwise allowed with ``patch`` (JSONPatch operations, possibly empty). ``rules`` names the
    rules that fired (metrics); ``mutated`` is the patched object (allowed mutations only);
    ``lifted`` the ``(rule, Grant)`` pairs whose errors a PolicyException lifted
    (:mod:`runtime.engine.admission.exceptions`).
    """

    policy: str
    kind: str = ""
    group: str = ""
    object_kind: str = ""
    name: str = ""
    errors: list[FieldError] = field(default_factory=list)
    denial: Optional[tuple[int, str, str]] = None
    patch: list[dict] = field(default_factory=list)
    mutated: Optional[dict] = None
    rules: list[str] = field(default_factory=list)
    enforcement: str = "deny"
    would_deny: str = ""
    warnings: list[str] = field(default_factory=list)
    namespace: str = ""
    halt: str = ""          # a review stopped before its verdict: HALT_BUDGET, HALT_TIMEOUT or RULE_ERROR
    halt_rule: str = ""     # the rule (or ``lookups.x`` / ``variables``) being judged when it stopped
    halt_class: str = ""    # what stopped it: a rule error's class (KeyError...), a budget's reason (cost...)
    halt_detail: str = ""   # where and why (the expression's file:line field and the budget spent)
    lifted: list = field(default_factory=list)   # (rule, Grant): errors a PolicyException lifted

    @property
    def allowed(self) -> bool:
        return not self.errors and self.denial is None

    def verdict(self) -> str:
        """``allowed``, ``patched``, ``invalid``, ``forbidden``, ``internal``, ``bad-request``, for a
        denial a ``warn``/``dryrun`` policy let through ``warned`` / ``dryrun-denied``, ``excepted`` when
        every error was lifted by a PolicyException, and for a review stopped before its verdict
        ``budget-exceeded`` / ``timeout`` / ``rule-error`` (a rule failed to evaluate), whatever was
        answered (under ``failurePolicy: Ignore``: allowed)."""
        if self.halt:
            return self.halt
        if self.would_deny:
            return "warned" if self.enforcement == "warn" else "dryrun-denied"
        if self.errors:
            return "invalid"
        if self.denial is not None:
            return {403: "forbidden", 500: "internal", 400: "bad-request"}.get(self.denial[0], "denied")
        if self.lifted:
            return "excepted"
        return "patched" if self.patch else "allowed"


HALT_BUDGET = "budget-exceeded"   # a rule's CEL budget was spent (docs/rule-authoring.md "Run-time budget")
SHAPE = "shape"            # the object failed its kind's schema before any rule ran
RULE_ERROR = "rule-error"  # an expression failed to evaluate
HALT_TIMEOUT = "timeout"          # the review's deadline passed


def timeout_denial(policy: str, seconds: float) -> tuple[int, str, str]:
    """The denial of a review not judged within its deadline: ``504 Timeout``, retryable."""
    return (504, "Timeout",
            f"webhook {policy}: the review was not judged within its {seconds:g}s deadline; retry")


def status_of(outcome: Outcome) -> Optional[dict]:
    """The ``metav1.Status`` of a denial, or None when allowed."""
    if outcome.errors:
        message = f'{outcome.object_kind} "{outcome.name}" is invalid: {aggregate(outcome.errors)}'
        details: dict[str, Any] = {"name": outcome.name, "kind": outcome.kind,
                                   "causes": [{"reason": _TYPES[e.reason][1], "message": e.body(),
                                               "field": e.field} for e in outcome.errors]}
        if outcome.group:
            details["group"] = outcome.group
        return {"status": "Failure", "message": message, "reason": "Invalid", "details": details,
                "code": 422}
    if outcome.denial is not None:
        code, reason, message = outcome.denial
        if reason == "InternalError":
            message = f"Internal error occurred: {message}"
        return {"status": "Failure", "message": message, "reason": reason, "code": code}
    return None


def enforce(outcome: Outcome, enforcement: str) -> Outcome:
    """Apply a policy's ``enforcement`` (docs/audit.md "Enforcement modes") to its outcome, in place.

    ``deny`` (the default, spec behaviour) and allowed outcomes are unchanged; so is a malformed review
    (400). ``warn``: allowed, the denial's message (as the API server would have printed it) in
    ``warnings``. ``dryrun``: allowed silently; ``would_deny`` keeps the message for metrics and audit.
    """
    if enforcement == "deny" or outcome.allowed or (outcome.denial or (0,))[0] == 400:
        return outcome
    message = status_of(outcome)["message"]
    outcome.errors, outcome.denial, outcome.patch, outcome.mutated = [], None, [], None
    outcome.enforcement, outcome.would_deny = enforcement, message
    if enforcement == "warn":
        outcome.warnings.append(message)
    return outcome


def build_response(uid: str, outcome: Outcome) -> dict:
    """The full AdmissionReview v1 answer for request ``uid``.

    Allowed with a non-empty patch -> ``patchType: JSONPatch`` and the patch base64-encoded.
    """
    response: dict[str, Any] = {"uid": uid, "allowed": outcome.allowed}
    status = status_of(outcome)
    if status is not None:
        response["status"] = status
    elif outcome.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(
            json.dumps(outcome.patch, separators=(",", ":")).encode()).decode()
    if outcome.warnings:
        response["warnings"] = list(outcome.warnings)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def bad_request(uid: str, message: str) -> dict:
    """A well-formed denial for a review the server could read a uid from but not judge."""
    return build_response(uid, Outcome(policy="", denial=(400, "BadRequest", message)))


def rule_names(policy: Policy) -> frozenset[str]:
    """The names an admission outcome's ``rules`` may hold under ``policy``: every validation, group
    included; every mutation and ``mutation/denial``; the engine's ``shape``, ``rule-error`` and
    ``budget-exceeded``."""
    names = {SHAPE, RULE_ERROR, HALT_BUDGET}
    for doc in policy.ruleset.all("AdmissionPolicy"):
        names.update(v.name for v in all_validations(doc.spec.validations))
        for m in doc.spec.mutations:
            names.add(m.name)
            names.update(f"{m.name}/{d.name}" for d in m.denials)
    names.discard("")
    return frozenset(names)
