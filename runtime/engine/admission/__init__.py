"""Admission: AdmissionPolicy rule files evaluated against AdmissionReview requests.

- :mod:`.engine`: :class:`AdmissionEngine` (policies of one rules generation), requests.
- :mod:`.review`: parse an AdmissionReview v1 body / build one offline.
- :mod:`.verdict`: field errors, their rendering, the AdmissionReview v1 response.
- :mod:`.patch`: writes -> canonical JSONPatch.
- :mod:`.context`: the cluster view (snapshot after derivation, settings).

Pure: no I/O (import-linter contract).
"""
from runtime.engine.admission.context import AdmissionView, admission_view, published_kinds, view_kinds, \
    view_of_state
from runtime.engine.admission.engine import AdmissionEngine, AdmissionRequest, DeadlineExceeded
from runtime.engine.admission.review import BadReview, is_text, parse_review, review_for
from runtime.engine.admission.verdict import FieldError, Outcome, bad_request, build_response


def decide(engine: AdmissionEngine, body, view: AdmissionView, policy: str | None = None,
           cancel=None, now=None) -> tuple[dict, Outcome]:
    """One review body -> ``(AdmissionReview response, Outcome)``; never raises for bad input.

    ``policy`` None chains every matching policy (offline ``admit``); a name runs that one webhook
    (the HTTPS server: one path per webhook). A request the policy does not match is allowed.
    ``cancel`` (a :class:`threading.Event`) stops the evaluation with :class:`DeadlineExceeded`.
    ``now`` (an aware datetime from the caller's clock) is the instant PolicyExceptions are judged at
    (:mod:`runtime.engine.admission.exceptions`); None: none applies.
    """
    try:
        request = parse_review(body)
    except BadReview as exc:
        outcome = Outcome(policy=policy or "", denial=(400, "BadRequest", str(exc)))
        return bad_request(exc.uid or "", str(exc)), outcome
    if policy is None:
        outcome = engine.admit(request, view, cancel, now)
    elif engine.matches(engine.policies[policy], request):
        outcome = engine.run(policy, request, view, cancel, now)
    else:
        outcome = Outcome(policy=policy, name=request.name)
    return build_response(request.uid, outcome), outcome


__all__ = ["AdmissionEngine", "AdmissionRequest", "AdmissionView", "BadReview", "DeadlineExceeded",
           "FieldError", "Outcome", "admission_view", "bad_request", "is_text", "published_kinds",
           "view_kinds", "view_of_state", "build_response", "decide", "parse_review", "review_for"]
