"""Hot reload of the controller's rules (issue 12 item 7): a :class:`~runtime.rules.reload.RulesWatcher`
wired to a running :class:`~runtime.controller.reconciler.Controller` and, when served, its webhooks.

A new generation is swapped in one assignment per holder (the controller's Policy, which its applier
reads through the controller, and which a pass in progress does not see: each pass reads its
generation once, :attr:`~runtime.controller.reconciler.Controller.policy`; the webhooks'
AdmissionEngine and a new live view of the new policy, together as one served generation,
:meth:`~runtime.controller.webhooks.ControllerWebhooks.swap`), then the controller reconciles once. A
refused set leaves every holder on the working generation. Each outcome is logged, counted in
``accelpolicy_rules_generation`` (gauge) and ``accelpolicy_rules_reload_failures_total`` (counter),
and recorded as an Event on the controller's namespace: reason, type and message are the
``rulesReloaded`` / ``rulesRefused`` entries of ``events`` in rules/pools/derivation.yaml. Routes are fixed when the server starts: a policy added with a new ``path`` needs a restart.
"""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from loguru import logger
from prometheus_client import CollectorRegistry

from runtime.engine.admission import AdmissionEngine
from runtime.engine.policy import Policy
from runtime.kube.session import KubeApiError
from runtime.rules.loader import RuleLoadError, RuleSet
from runtime.rules.reload import RulesWatcher
from runtime.webhook.reload import ReloadMetrics, reload_message


def rules_event(namespace: str, reason: str, kind: str, message: str, now: datetime) -> dict:
    """A core/v1 Event on the Namespace ``namespace`` (where ``kubectl get events -n`` shows it)."""
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"apiVersion": "v1", "kind": "Event", "type": kind, "reason": reason,
            "metadata": {"name": f"accelpolicy-rules.{int(now.timestamp() * 1000):x}", "namespace": namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Namespace", "name": namespace, "namespace": namespace},
            "message": message, "source": {"component": "accelpolicy"}, "reportingComponent": "accelpolicy",
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1}


class ControllerRulesReload:
    """Watch ``root`` and swap the controller's (and ``webhooks``') rules; see the module docstring.

    ``registry``: where the two metrics go (the webhook server's registry when it serves ``/metrics``).
    """

    def __init__(self, controller, root: Path | str, webhooks=None, registry: Optional[CollectorRegistry] = None,
                 interval: float = 2.0):
        self.controller = controller
        self.webhooks = webhooks
        metrics = ReloadMetrics(registry)
        self.registry, self.generation, self.failures = metrics.registry, metrics.generation, metrics.failures
        self.generation.set(controller.policy.ruleset.generation)
        self.watcher = RulesWatcher(root, self._swap, self._refused, interval=interval,
                                    initial=controller.policy.ruleset)

    def start(self) -> "ControllerRulesReload":
        self.watcher.start()
        return self

    def stop(self) -> None:
        self.watcher.stop()

    def _event(self, outcome: str, message: str) -> None:
        template = getattr(self.controller.policy.derivation.events, outcome)
        event = rules_event(self.controller.settings_namespace, template.reason, template.type, message,
                            datetime.now(timezone.utc))
        try:
            self.controller.applier.create(event)
        except KubeApiError as exc:
            logger.warning("{} event: {}", template.reason, exc)

    def _swap(self, ruleset: RuleSet) -> None:
        policy = Policy(ruleset)
        try:
            engine = AdmissionEngine(policy) if self.webhooks is not None else None
        except KeyError as exc:  # a dangling paramsFrom/builtin: refuse like a lint finding
            self._refused(RuleLoadError([]), str(exc.args[0]))
            return
        self.controller.policy = policy   # one assignment: the next pass reads it (and its applier with it)
        if self.webhooks is not None:
            self.webhooks.swap(policy, engine)
        self.generation.set(ruleset.generation)
        message = reload_message(ruleset, "rulesReloaded", generation=ruleset.generation, root=ruleset.root,
                                 seconds=self.watcher.last_seconds)
        logger.info(message)
        self._event("rulesReloaded", message)
        self.controller.request_reconcile()

    def _refused(self, exc: RuleLoadError, detail: str = "") -> None:
        self.failures.inc()
        message = reload_message(self.controller.policy.ruleset, "rulesRefused", root=self.watcher.root,
                                 generation=self.controller.policy.ruleset.generation,
                                 problems=[str(p) for p in exc.problems] or [detail])
        logger.error(message)
        self._event("rulesRefused", message)
