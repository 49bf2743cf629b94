"""Hot reload of the controller's rules (docs/rule-authoring.md "4. Hot reload"): a
:class:`~runtime.rules.reload.RulesWatcher` wired to a running
:class:`~runtime.controller.reconciler.Controller` and, when served, its webhooks.

A set that loads is tried first (the reload gate, :func:`runtime.gate.try_generation`, on the controller's
view of the cluster and the reviews its webhooks answered recently; docs/rule-authoring.md "How a rules
change goes live"); a refused one leaves every holder on the working generation, its reason counted in
``accelpolicy_rules_refused_total{reason}``, and the verdicts it would change are reported either way
(log, Event ``rulesVerdictsChanged``). A new generation is swapped in one assignment per holder (the
controller's Policy, which its applier reads through the controller, and which a pass in progress does
not see: each pass reads its generation once, :attr:`~runtime.controller.reconciler.Controller.policy`;
the webhooks' AdmissionEngine and a new live view of the new policy, together as one served generation,
:meth:`~runtime.controller.webhooks.ControllerWebhooks.swap`), then the controller reconciles once. A
refused set leaves every holder on the working generation. Each outcome is logged, counted in
``accelpolicy_rules_generation`` (gauge) and ``accelpolicy_rules_reload_failures_total`` (counter),
and recorded as an Event on the rules ConfigMap (``configmap``; else on the controller's namespace):
reason, type and message are the ``rulesReloaded`` / ``rulesRefused`` / ``rulesVerdictsChanged``
entries of ``events`` in rules/pools/derivation.yaml. With a ConfigMap the verdict is also written in
its ``reloadGate.verdictAnnotation`` (``accepted:<fingerprint>`` / ``refused:<fingerprint>``), which the
admission replicas follow (:class:`runtime.webhook.reload.WebhookRulesReload`). Routes are fixed when the
server starts: a policy added with a new ``path`` needs a restart.
"""
from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Optional

from loguru import logger
from prometheus_client import CollectorRegistry

from runtime.engine.admission import AdmissionEngine
from runtime.engine.policy import Policy
from runtime.gate import try_generation
from runtime.kube.events import CONTROLLER_COMPONENT, event
from runtime.kube.session import KubeApiError
from runtime.rules.loader import RuleLoadError, RuleSet
from runtime.rules.reload import RulesWatcher, Trial
from runtime.webhook.reload import ReloadMetrics, refusal_lines, reload_message


def rules_event(namespace: str, reason: str, kind: str, message: str, now: datetime,
                configmap: Optional[str] = None) -> dict:
    """A core/v1 Event on the rules ConfigMap ``configmap`` in ``namespace`` when named, else on the
    Namespace ``namespace`` (where ``kubectl get events -n`` shows it either way)."""
    involved = ({"apiVersion": "v1", "kind": "ConfigMap", "name": configmap,
                 "namespace": namespace} if configmap
                else {"apiVersion": "v1", "kind": "Namespace", "name": namespace, "namespace": namespace})
    return event(involved, kind, reason, message, CONTROLLER_COMPONENT, now,
                 name=f"accelpolicy-rules.{int(now.timestamp() * 1000):x}")


class ControllerRulesReload:
    """Watch ``root`` and swap the controller's (and ``webhooks``') rules; see the module docstring.

    ``registry``: where the metrics go (the webhook server's registry when it serves ``/metrics``);
    ``configmap``: ``(namespace, name)`` of the rules ConfigMap (``--rules-configmap``): the Events go on
    it and the gate's verdict is recorded in its ``reloadGate.verdictAnnotation``; None: Events on the
    settings Namespace, no verdict recorded. ``last_trial``: the gate's latest verdict, ``tried``: the
    RuleSet it tried (None before the first).
    """

    def __init__(self, controller, root: Path | str, webhooks=None,
                 registry: Optional[CollectorRegistry] = None, interval: float = 2.0,
                 configmap: Optional[tuple[str, str]] = None):
        self.controller = controller
        self.webhooks = webhooks
        self.configmap = configmap
        self.metrics = ReloadMetrics(registry)
        self.registry, self.generation, self.failures = self.metrics.registry, self.metrics.generation, \
            self.metrics.failures
        self.generation.set(controller.policy.ruleset.generation)
        self.last_trial: Optional[Trial] = None
        self.tried: Optional[RuleSet] = None
        self.watcher = RulesWatcher(root, self._swap, self._refused, interval=interval,
                                    initial=controller.policy.ruleset)

    def start(self) -> "ControllerRulesReload":
        self.watcher.start()
        return self

    def stop(self) -> None:
        self.watcher.stop()

    def _event(self, outcome: str, message: str, ruleset: Optional[RuleSet] = None) -> None:
        events = (ruleset or self.controller.policy.ruleset).get("PoolDerivation").events
        template = getattr(events, outcome)
        namespace, name = self.configmap or (self.controller.settings_namespace, None)
        event = rules_event(namespace, template.reason, template.type, message, self.controller.clock(),
                            name)
        try:
            self.controller.applier.create(event)
        except KubeApiError as exc:
            logger.warning("{} event: {}", template.reason, exc)

    def _record_verdict(self, verdict: str) -> None:
        """``accepted:<fingerprint>`` or ``refused:<fingerprint>`` in the rules ConfigMap's verdict
        annotation (admission replicas follow it); a failed write is logged."""
        if self.configmap is None:
            return
        key = self.controller.policy.derivation.reloadGate.verdictAnnotation
        namespace, name = self.configmap
        patch = {"metadata": {"annotations": {key: f"{verdict}:{self.watcher.seen}"}}}
        try:
            self.controller.applier.merge_patch("ConfigMap", name, patch, namespace)
        except KubeApiError as exc:
            logger.warning("rules verdict on ConfigMap {}/{}: {}", namespace, name, exc)

    def _try(self, ruleset: RuleSet, engine: Optional[AdmissionEngine]) -> Trial:
        """The reload gate on the controller's view of the cluster and its webhooks' recent reviews."""
        reviews = self.webhooks.state.sample.reviews() if self.webhooks is not None else []
        return try_generation(self.controller.policy, ruleset, self.controller.cache.snapshot(), reviews,
                              engine=engine)

    def _swap(self, ruleset: RuleSet) -> bool:
        """Try ``ruleset`` and install it when the gate accepts it; False when refused."""
        self.tried, policy = ruleset, Policy(ruleset)
        try:
            engine = AdmissionEngine(policy)
        except KeyError as exc:  # a dangling paramsFrom/builtin: refuse like a lint finding
            self._refuse(Trial("compile", [str(exc.args[0]) if exc.args else str(exc)]))
            return False
        trial = self.last_trial = self._try(ruleset, engine)
        self._report_changes(ruleset if trial.accepted else self.controller.policy.ruleset, ruleset, trial)
        if not trial.accepted:
            self._refuse(trial)
            return False
        self.controller.policy = policy   # one assignment: the next pass reads it (and its applier with it)
        if self.webhooks is not None:
            self.webhooks.swap(policy, engine)
            sample = policy.derivation.reloadGate
            self.webhooks.state.sample.resize(sample.sampleReviews, sample.sampleBytes)
        self.generation.set(ruleset.generation)
        message = reload_message(ruleset, "rulesReloaded", generation=ruleset.generation, root=ruleset.root,
                                 seconds=self.watcher.last_seconds)
        logger.info(message)
        self._event("rulesReloaded", message)
        self._record_verdict("accepted")
        self.controller.request_reconcile()
        return True

    def _report_changes(self, templates: RuleSet, ruleset: RuleSet, trial: Trial) -> None:
        """Log and record (Event ``rulesVerdictsChanged``) the verdicts ``ruleset`` changes, if any."""
        if not trial.changes:
            return
        message = reload_message(templates, "rulesVerdictsChanged", generation=ruleset.generation,
                                 count=len(trial.changes), changes=list(trial.changes))
        logger.warning(message)
        self._event("rulesVerdictsChanged", message, templates)

    def _refused(self, exc: RuleLoadError) -> None:
        self._refuse(Trial("lint", [str(p) for p in exc.problems]))

    def _refuse(self, trial: Trial) -> None:
        """Count, log and record (Event, verdict annotation) a refused set; the serving one stays."""
        self.last_trial = trial
        self.watcher.current = self.controller.policy.ruleset  # a set refused after it loaded is not in force
        self.metrics.refusal(trial.reason or "lint")
        message = reload_message(self.controller.policy.ruleset, "rulesRefused", root=self.watcher.root,
                                 generation=self.controller.policy.ruleset.generation,
                                 problems=refusal_lines(trial))
        logger.error(message)
        self._event("rulesRefused", message)
        self._record_verdict("refused")
