"""The controller's background audit (docs/audit.md "The background audit"): every ``interval`` seconds, the
audit of :mod:`runtime.report.audit` on the controller's watch caches, written as openreports.io ``Report``
(per namespace) and ``ClusterReport`` objects.

Only reports whose content changed since the last write are applied (server-side apply, field manager
``accelpolicy``); a namespace whose findings are gone gets an empty report rather than a stale one.
``accelpolicy_audit_results{result}`` counts the latest run per result kind; an object that newly
fails (``fail`` or ``error``) gets the ``auditFailed`` Event of rules/controller.yaml ``events``
(Warning ``AuditFailed``) with the message. The audit runs on
the rules in force (a hot reload applies from the next run).

Each leader term's first run waits for the end of the controller's next reconcile pass (its first in
the term): the audit derives the whole cluster from its own copy of the caches, about as much work as
that first pass, and in one process the two would share the interpreter. At 10,000 nodes running
both at once made the first pass 13.5-16.8 s instead of 7.6-10.2; the table is what a starting
controller owes first, the reports an hour later matter less.
"""
from __future__ import annotations

import threading
import time
from datetime import datetime
from typing import Optional

from loguru import logger
from prometheus_client import CollectorRegistry, Gauge

from runtime.kube.events import CONTROLLER_COMPONENT, event
from runtime.kube.session import KubeApiError
from runtime.model.stateevents import StateEvent
from runtime.report.audit import audit
from runtime.report.results import RESULT_KINDS, Result, reports, summary
from runtime.reload.watcher import Periodic

MANAGED_BY = {"app.kubernetes.io/managed-by": "accelpolicy"}


def failed_event(template: StateEvent, result: Result, now: datetime) -> dict:
    """The Event of ``template`` (the ``auditFailed`` entry of ``events`` in rules/controller.yaml:
    type, reason, message with ``{policy}``, ``{rule}``, ``{message}``) on the object of ``result``,
    at ``now`` (aware datetime); the message cut at 1,024 characters."""
    ref = result.resource
    involved = {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name,
                "namespace": ref.namespace or None, "uid": ref.uid or None}
    message = template.message.format(policy=result.policy, rule=result.rule or "-", message=result.message)
    return event(involved, template.type, template.reason, message[:1024], CONTROLLER_COMPONENT, now,
                 name=f"{ref.name}.audit.{int(now.timestamp() * 1000):x}")


class AuditMetrics:
    """The audit's gauge in ``registry`` (a new one when None)."""

    def __init__(self, registry: Optional[CollectorRegistry] = None):
        self.registry = registry or CollectorRegistry()
        self.results = Gauge("accelpolicy_audit_results", "Results of the latest background audit",
                             ["result"], registry=self.registry)


class BackgroundAudit(Periodic):
    """Run :meth:`run_once` every ``interval`` seconds in a thread (0: never); see the module docstring."""

    def __init__(self, controller, interval: float = 3600.0, registry: Optional[CollectorRegistry] = None):
        self.controller = controller
        self.interval = interval
        metrics = AuditMetrics(registry)
        self.registry, self.results_gauge = metrics.registry, metrics.results
        self._written: dict[tuple[str, str], dict] = {}  # (kind, namespace) -> report body last applied
        self._failing: set[tuple] = set()
        self.runs = 0
        self._warned_missing = False   # a 404 (no openreports.io CRDs) is logged once, not every run
        self.first, self.name = True, "background-audit"
        self._passed = threading.Event()   # a reconcile pass ended since start(): the first run may go
        controller.observers.append(lambda _result: self._passed.set())

    def start(self):
        """Start the thread for a new term: its first run waits for the controller's next pass."""
        self._passed.clear()
        return super().start()

    def ready(self, stop: threading.Event) -> bool:
        """Wait for the end of a reconcile pass after :meth:`start` (the term's first); False when
        ``stop`` came first."""
        while not self._passed.wait(0.25):
            if stop.is_set():
                return False
        return not stop.is_set()

    def run_once(self) -> list[Result]:
        """Audit the cache once; apply changed reports; Events for newly failing objects."""
        t0, cpu0 = time.monotonic(), time.thread_time()
        policy = self.controller.policy
        spec = policy.ruleset.get("AuditPolicy")
        snapshot = self.controller.cache.snapshot()
        results = audit(policy, snapshot, now=self.controller.clock())
        counts = summary(results)
        for kind, count in counts.items():
            self.results_gauge.labels(kind).set(count)
        bodies = {(r["kind"], r["metadata"].get("namespace", "")): r
                  for r in reports(results, spec.reportName, spec.source, labels=MANAGED_BY)}
        for key in set(self._written) - set(bodies):  # findings gone: an empty report replaces the old one
            kind, namespace = key
            meta = {"name": spec.reportName, "labels": dict(MANAGED_BY),
                    **({"namespace": namespace} if namespace else {})}
            bodies[key] = {"apiVersion": "openreports.io/v1alpha1", "kind": kind, "metadata": meta,
                           "source": spec.source, "summary": dict.fromkeys(RESULT_KINDS, 0), "results": []}
        for key, body in sorted(bodies.items()):
            if self._written.get(key) == body:
                continue
            try:
                self.controller.applier.apply(body)
                self._written[key] = body
            except KubeApiError as exc:
                if exc.status == 404 and not self._warned_missing:   # the CRDs are not installed
                    self._warned_missing = True
                    logger.warning("audit reports not written: the API server does not serve {} ({}); "
                                   "install the openreports.io CRDs (github.com/openreports/reports-api "
                                   "config/crd) or set "
                                   "--audit-interval=0", body["apiVersion"], exc)
                elif exc.status != 404:
                    logger.warning("audit report {} {}: {}", key[0], key[1] or "(cluster)", exc)
        failing = {
            (r.resource, r.policy, r.rule, r.field): r for r in results if r.result in ("fail", "error")}
        now = self.controller.clock()
        template = self.controller.policy.controller.events.auditFailed
        for key in sorted(set(failing) - self._failing, key=str):
            try:
                self.controller.applier.create(failed_event(template, failing[key], now))
            except KubeApiError as exc:
                logger.warning("{} event for {}: {}", template.reason, key[0], exc)
        self._failing = set(failing)
        self.runs += 1
        objects = sum(len(held) for held in snapshot.objects.values())
        logger.info("background audit: {} objects, {} in {:.3f}s ({:.3f}s CPU)", objects,
                    ", ".join(f"{counts[kind]} {kind}" for kind in RESULT_KINDS), time.monotonic() - t0,
                    time.thread_time() - cpu0)
        return results

    def tick(self) -> None:
        self.run_once()
