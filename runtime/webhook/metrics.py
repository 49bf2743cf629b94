"""The webhook server's Prometheus collectors and its rate-limited WARNING lines
(docs/reference/metrics.md; docs/webhook-hardening.md "Every review gets a well-formed answer").

:class:`WebhookMetrics` counts every answered review by verdict, the rules that fired, the reviews a
PolicyException let through, the malformed bodies, and times each review; a review stopped before its
verdict (budget spent, deadline passed, a rule error) or a malformed body is logged at WARNING, at most
one line per webhook and reason every :data:`MALFORMED_LOG_SECONDS` (the next line says how many were
not logged).
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram

from runtime.engine.admission import Outcome
from runtime.engine.admission.verdict import RULE_ERROR

_LOG = logging.getLogger(__name__)
MALFORMED_REASONS = ("body-too-large", "not-json", "not-a-review")
MALFORMED_LOG_SECONDS = 10.0
_BUCKETS = (0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


@dataclass
class WebhookMetrics:
    """Prometheus collectors in their own registry (no process globals): ``reviews``, ``rules``,
    ``latency``, ``excepted``, ``malformed`` (their names and help in docs/reference/metrics.md)."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self):
        self.reviews = Counter("accelpolicy_admission_reviews", "Admission reviews answered, by verdict: "
                               "allowed, patched, invalid, forbidden, internal, bad-request, warned, "
                               "dryrun-denied, excepted (allowed by a PolicyException), budget-exceeded "
                               "(a rule's CEL budget spent), timeout (not judged within the deadline), "
                               "rule-error (a rule failed to evaluate; under failurePolicy Ignore the review "
                               "was allowed)",
                               ["webhook", "verdict"], registry=self.registry)
        self.rules = Counter("accelpolicy_admission_rule_hits", "Rules that fired (denials, mutations)",
                             ["webhook", "rule"], registry=self.registry)
        self.latency = Histogram("accelpolicy_admission_review_seconds", "Time to answer one review",
                                 ["webhook"], buckets=_BUCKETS, registry=self.registry)
        self.excepted = Counter("accelpolicy_admission_excepted_reviews", "Reviews a PolicyException let "
                                "through, by policy, lifted rule and exception (namespace/name; "
                                "docs/concepts/exceptions.md)", ["policy", "rule", "exception"],
                                registry=self.registry)
        self.malformed = Counter("accelpolicy_admission_malformed_reviews", "Request bodies answered with a "
                                 "BadRequest denial without being judged, by reason: body-too-large, "
                                 "not-json, not-a-review (not an AdmissionReview v1 with a usable request)",
                                 ["webhook", "reason"], registry=self.registry)
        self._logged: dict[tuple[str, str], tuple[float | None, int]] = {}
        self._log_lock = threading.Lock()

    def malformed_review(self, webhook: str, reason: str, message: str, client: str) -> None:
        """Count a review that could not be judged (``reason``: one of :data:`MALFORMED_REASONS`) and log
        it: a WARNING line per webhook and reason at most every :data:`MALFORMED_LOG_SECONDS`, the
        next one saying how many were not logged meanwhile (a flood of bad bodies cannot flood the log)."""
        self.malformed.labels(webhook, reason).inc()
        self._warn_limited(webhook, reason,
                           f"webhook {webhook}: malformed review from {client} ({reason}): {message}")

    def _warn_limited(self, webhook: str, reason: str, line: str) -> None:
        """Log ``line`` at WARNING, at most once per webhook and reason every :data:`MALFORMED_LOG_SECONDS`;
        the next line says how many were not logged meanwhile."""
        now = time.monotonic()
        with self._log_lock:
            last, skipped = self._logged.get((webhook, reason), (None, 0))
            if last is not None and now - last < MALFORMED_LOG_SECONDS:
                self._logged[(webhook, reason)] = (last, skipped + 1)
                return
            self._logged[(webhook, reason)] = (now, 0)
        more = f" ({skipped} more since the last line)" if skipped else ""
        _LOG.warning("%s%s", line, more)

    def observe(self, webhook: str, outcome: Outcome, seconds: float) -> None:
        """Count one answered review (verdict, rules that fired, latency); a review stopped before its
        verdict (budget spent, deadline passed) is logged too (see the module docstring)."""
        self.reviews.labels(webhook, outcome.verdict()).inc()
        if outcome.halt:
            obj = f"{outcome.namespace}/{outcome.name}" if outcome.namespace else outcome.name
            # a rule error: one line per policy, rule and error class; a budget or deadline: per verdict
            key = outcome.halt if outcome.halt != RULE_ERROR else \
                f"{RULE_ERROR} {outcome.policy} {outcome.halt_rule} {outcome.halt_class}"
            cls = f" {outcome.halt_class}" if outcome.halt == RULE_ERROR else ""
            self._warn_limited(webhook, key,
                               f"webhook {webhook}: review stopped ({outcome.halt}{cls}): policy "
                               f"{outcome.policy}, rule {outcome.halt_rule or '-'}, "
                               f"{outcome.object_kind or 'object'} {obj or '-'}: {outcome.halt_detail}")
        for rule in outcome.rules:
            self.rules.labels(webhook, rule).inc()
        if outcome.allowed:
            for rule, grant in dict.fromkeys(outcome.lifted):
                self.excepted.labels(outcome.policy, rule, grant.ref).inc()
        self.latency.labels(webhook).observe(seconds)
