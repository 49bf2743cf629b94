"""How a reload says what happened: its metrics, the words of its log lines and Events (the ``events`` of
rules/reload.yaml), and the Events themselves (docs/rule-authoring.md "How a rules change goes live").

Every line names a generation by its content hash (:func:`runtime.reload.watcher.generation_id`), so the
same edit reads the same in every process and after every restart. An Event is named by the generation
and its outcome (``accelpolicy-rules.<id>.<outcome>``): the same outcome of the same generation recorded
again (a restarted leader deciding it again) is the one Event already there, not a second one.
"""
from __future__ import annotations

from datetime import datetime
from typing import Optional

from loguru import logger
from prometheus_client import CollectorRegistry, Counter, Gauge

from runtime.kube.events import CONTROLLER_COMPONENT, event
from runtime.kube.session import KubeApiError
from runtime.rules.loader import RuleSet

MAX_SHOWN_PROBLEMS = 10
REFUSAL_REASONS = ("lint", "compile", "suite", "replay-object", "replay-review", "replica", "leader")


def refusal_lines(reason: Optional[str], problems: list[str]) -> list[str]:
    """The ``{problems}`` of a refused set's message: a lint finding as ``file:line:col ...`` (as
    ``accelpolicy lint`` prints it), any other ``<reason>: <problem>``."""
    return list(problems) if reason in (None, "lint") else [f"{reason}: {p}" for p in problems]


class ReloadMetrics:
    """A reload's collectors in ``registry`` (a new one when None):

    - ``accelpolicy_rules_generation{generation}``: 1 for the generation in force (its content hash id);
    - ``accelpolicy_rules_held{generation}``: 1 while that generation is held for an approval;
    - ``accelpolicy_rules_reload_failures_total`` and ``accelpolicy_rules_refused_total{reason}``."""

    def __init__(self, registry: Optional[CollectorRegistry] = None):
        self.registry = registry or CollectorRegistry()
        self.generation = Gauge("accelpolicy_rules_generation", "The rules generation in force: 1 for its "
                                "content hash (generation)", ["generation"], registry=self.registry)
        self.held = Gauge("accelpolicy_rules_held", "1 while a rules generation is held until an operator "
                          "approves its content hash (generation)", ["generation"], registry=self.registry)
        self.failures = Counter("accelpolicy_rules_reload_failures", "Rule sets refused by a reload",
                                registry=self.registry)
        self.refused = Counter("accelpolicy_rules_refused",
                               "Rule sets the reload gate refused, by reason: " + ", ".join(REFUSAL_REASONS)
                               + " (docs/rule-authoring.md)", ["reason"], registry=self.registry)
        self._serving: Optional[str] = None
        self._held: Optional[str] = None

    def serving(self, generation: str) -> None:
        """``generation`` (an id) is in force: the gauge names it alone."""
        if self._serving is not None and self._serving != generation:
            self.generation.remove(self._serving)
        self._serving = generation
        self.generation.labels(generation).set(1)
        if self._held == generation:
            self.holding(None)

    def holding(self, generation: Optional[str]) -> None:
        """``generation`` is held (None: none is)."""
        if self._held is not None and self._held != generation:
            self.held.remove(self._held)
        self._held = generation
        if generation is not None:
            self.held.labels(generation).set(1)

    def refusal(self, reason: str) -> None:
        """Count one refused set (both counters)."""
        self.failures.inc()
        self.refused.labels(reason).inc()


def reload_message(ruleset: RuleSet, outcome: str, **variables) -> str:
    """The log (and Event) text of a reload ``outcome`` (``reloaded``, ``refused``, ``verdictsChanged``,
    ``held``, ``approved``): the ``events`` template of ``ruleset``'s ReloadGate (rules/reload.yaml; the
    serving set's, since a refused set has none) formatted with ``variables``. A list (``problems``,
    ``changes``, ``reasons``) is shown one per line, the first :data:`MAX_SHOWN_PROBLEMS`, then how many
    more."""
    for key, value in variables.items():
        if isinstance(value, list):
            shown = [str(v) for v in value[:MAX_SHOWN_PROBLEMS]]
            if len(value) > MAX_SHOWN_PROBLEMS:
                shown.append(f"... and {len(value) - MAX_SHOWN_PROBLEMS} more")
            variables[key] = "\n".join(shown)
    return getattr(ruleset.get("ReloadGate").events, outcome).message.format(**variables)


def rules_event(namespace: str, reason: str, kind: str, message: str, now: datetime,
                configmap: Optional[str] = None, generation: str = "", outcome: str = "") -> dict:
    """A core/v1 Event on the rules ConfigMap ``configmap`` in ``namespace`` when named, else on the
    Namespace ``namespace`` (where ``kubectl get events -n`` shows it either way), named
    ``accelpolicy-rules.<generation>.<outcome>`` (module docstring)."""
    involved = ({"apiVersion": "v1", "kind": "ConfigMap", "name": configmap,
                 "namespace": namespace} if configmap
                else {"apiVersion": "v1", "kind": "Namespace", "name": namespace, "namespace": namespace})
    return event(involved, kind, reason, message, CONTROLLER_COMPONENT, now,
                 name=f"accelpolicy-rules.{generation or '-'}.{outcome.lower() or 'event'}")


def record_event(applier, templates: RuleSet, outcome: str, message: str, now: datetime, namespace: str,
                 configmap: Optional[str], generation: str) -> None:
    """Create the Event of ``outcome`` (rules/reload.yaml ``events``) of ``generation`` through ``applier``
    (one that exists already, the same generation's same outcome, is left as it is). A failure is logged,
    never raised."""
    template = getattr(templates.get("ReloadGate").events, outcome)
    body = rules_event(namespace, template.reason, template.type, message, now, configmap, generation,
                       outcome)
    try:
        applier.create(body)
    except KubeApiError as exc:
        logger.warning("{} event: {}", template.reason, exc)
