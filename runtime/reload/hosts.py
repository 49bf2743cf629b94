"""The hosts of a :class:`runtime.reload.holder.RulesHolder`: what each process can try of a new rules
generation, and how it installs one (docs/rule-authoring.md "How a rules change goes live").

A host has a ``name`` (``/generation``'s ``component``), ``trial(serving, ruleset)`` (a
:class:`~runtime.reload.trial.Trial`; a KeyError is a ``compile`` refusal), ``install(ruleset, trial,
generation)`` (one assignment per holder of the rules, so a request or a pass sees one generation or the
other, never a mix) and ``paths()`` (the webhook paths it serves now). The hosts reach their process's
parts by their attributes only (this package sits below the controller and the agent):

- :class:`ControllerHost`: the controller and, when served here, its webhooks. It tries the most: the
  rule suites, every existing object of its caches, the reviews its webhooks answered recently, and the
  consequences on its pools (:func:`runtime.reload.consequences.consequences`). Installing marks the
  ClusterQueues the generation empties (never drained), then swaps the controller's Policy and the
  webhooks' engine and view, and reconciles once; it records the reload's Events;
- :class:`AdmissionHost`: an ``accelpolicy admission`` replica: the suites and its recent reviews, judged
  against the published objects;
- :class:`WebhookHost`: the standalone ``accelpolicy webhook``: the suites, its ``--snapshot`` objects and
  recent reviews;
- :class:`AgentHost`: an agent: the suites (it has no reviews and judges no objects); from its next pass
  on it plans with the new generation (the manufacturer env overrides applied again).
"""
from __future__ import annotations

import os
from typing import Callable, Optional

from loguru import logger

from runtime.engine.admission import AdmissionEngine, AdmissionView, admission_view
from runtime.engine.policy import Policy
from runtime.kube.session import KubeApiError
from runtime.reload.consequences import consequences
from runtime.reload.report import record_event
from runtime.reload.trial import Trial, suite_problems, try_generation
from runtime.rules.loader import RuleSet


class _Engines:
    """The engine each tried RuleSet compiled to, kept for its install (the latest few)."""

    def __init__(self):
        self._held: list[tuple[RuleSet, AdmissionEngine]] = []

    def compile(self, ruleset: RuleSet) -> AdmissionEngine:
        engine = AdmissionEngine(Policy(ruleset))   # KeyError: a compile refusal
        self._held = self._held[-3:] + [(ruleset, engine)]
        return engine

    def of(self, ruleset: RuleSet) -> AdmissionEngine:
        return next((e for r, e in self._held if r is ruleset), None) or self.compile(ruleset)


def _resize(state, ruleset: RuleSet) -> None:
    gate = ruleset.get("ReloadGate")
    state.sample.resize(gate.sampleReviews, gate.sampleBytes)


class ControllerHost:
    """The controller (``controller``: its ``policy``, ``cache``, ``applier``, ``clock``,
    ``settings_namespace``, ``request_reconcile()``) and its ``webhooks`` (None when it serves none:
    ``swap(policy, engine)``, ``state``, ``engine``). ``configmap``: ``(namespace, name)`` of the rules
    ConfigMap, where its Events go (else the settings Namespace). ``on_install``: called after each install
    (the registrar's nudge)."""

    name = "controller"

    def __init__(self, controller, webhooks=None, configmap: Optional[tuple[str, str]] = None):
        self.controller, self.webhooks, self.configmap = controller, webhooks, configmap
        self.engines = _Engines()
        self.on_install: list[Callable[[], None]] = []

    def trial(self, serving: Policy, ruleset: RuleSet) -> Trial:
        engine = self.engines.compile(ruleset)
        snapshot = self.controller.cache.snapshot()
        reviews = self.webhooks.state.sample.reviews() if self.webhooks is not None else []
        trial = try_generation(serving, ruleset, snapshot, reviews, engine=engine)
        if trial.accepted:
            trial.consequences = consequences(serving, Policy(ruleset), snapshot)
        return trial

    def install(self, ruleset: RuleSet, trial: Trial, generation: str) -> None:
        policy = Policy(ruleset)
        self._mark_emptied(policy, getattr(trial.consequences, "emptied", []), generation)
        self.controller.policy = policy   # one assignment: the next pass reads it (and its applier with it)
        if self.webhooks is not None:
            self.webhooks.swap(policy, self.engines.of(ruleset))
            _resize(self.webhooks.state, ruleset)
        self.controller.request_reconcile()
        for hook in list(self.on_install):
            hook()

    def _mark_emptied(self, policy: Policy, pools: list[str], generation: str) -> None:
        """The ClusterQueues of ``pools`` get the ``queueEmptiedByRules`` annotation before the generation
        that empties them serves: their pools are kept, not drained (docs/concepts/pools-and-flavors.md
        "Queues and the entrance")."""
        key = policy.key("queueEmptiedByRules")
        for pool in pools:
            try:
                self.controller.applier.merge_patch("ClusterQueue", pool,
                                                    {"metadata": {"annotations": {key: generation}}})
            except KubeApiError as exc:
                logger.warning("ClusterQueue {}: mark {}={}: {}", pool, key, generation, exc)

    def paths(self) -> list[str]:
        engine = self.webhooks.engine if self.webhooks is not None else None
        return [spec.path for spec in engine.policies.values()] if engine is not None else []

    def events(self, outcome: str, message: str, templates: RuleSet, generation: str) -> None:
        """Record the Event of ``outcome`` (rules/reload.yaml ``events``) on the rules ConfigMap."""
        namespace, name = self.configmap or (self.controller.settings_namespace, None)
        record_event(self.controller.applier, templates, outcome, message, self.controller.clock(), namespace,
                     name, generation)


class AdmissionHost:
    """An ``accelpolicy admission`` replica (``server``: its ``state``, ``cache``, ``settings_namespace``,
    ``swap(policy, engine)``)."""

    name = "admission"

    def __init__(self, server):
        self.server = server
        self.engines = _Engines()

    def trial(self, serving: Policy, ruleset: RuleSet) -> Trial:
        """The suites and this replica's recent reviews, each generation judging against the published
        objects as the replica does (no object replay: it holds no Pods or Instances; the leader's covers
        them)."""
        engine = self.engines.compile(ruleset)
        snapshot = self.server.cache.snapshot()
        namespace = self.server.settings_namespace
        return try_generation(serving, ruleset, None, self.server.state.sample.reviews(), engine=engine,
                              review_view=lambda policy: admission_view(policy, snapshot, derive_state=False,
                                                                        settings_namespace=namespace))

    def install(self, ruleset: RuleSet, trial: Trial, generation: str) -> None:
        self.server.swap(Policy(ruleset), self.engines.of(ruleset))
        _resize(self.server.state, ruleset)

    def paths(self) -> list[str]:
        engine = self.server.state.engine
        return [spec.path for spec in engine.policies.values()] if engine is not None else []


class WebhookHost:
    """The standalone webhook server: ``server`` (its webhook host: ``state``, ``install(engine, view)``)
    and ``view_of(policy)`` (the view of its ``--snapshot`` objects, ``cluster``, for a policy)."""

    name = "webhook"

    def __init__(self, server, cluster, view_of: Callable[[Policy], AdmissionView]):
        self.server, self.cluster, self.view_of = server, cluster, view_of
        self.engines = _Engines()

    def trial(self, serving: Policy, ruleset: RuleSet) -> Trial:
        engine = self.engines.compile(ruleset)
        reviews = self.server.state.sample.reviews()
        return try_generation(serving, ruleset, self.cluster, reviews, engine=engine)

    def install(self, ruleset: RuleSet, trial: Trial, generation: str) -> None:
        self.server.install(self.engines.of(ruleset), self.view_of(Policy(ruleset)))
        _resize(self.server.state, ruleset)

    def paths(self) -> list[str]:
        return sorted(self.server.state.routes())


class AgentHost:
    """An agent (``agent.use_policy(policy)``, ``agent.policy``); ``apply_env(policy, environ)``: its
    manufacturer overrides (applied to each generation before it serves)."""

    name = "agent"

    def __init__(self, agent, apply_env: Callable[[Policy, dict], list]):
        self.agent, self.apply_env = agent, apply_env

    def trial(self, serving: Policy, ruleset: RuleSet) -> Trial:
        """The rule suites beside the rules (the part of the gate an agent can run)."""
        problems = suite_problems(Policy(ruleset)) if serving.ruleset.get("ReloadGate").suites else []
        return Trial("suite", problems) if problems else Trial()

    def install(self, ruleset: RuleSet, trial: Trial, generation: str) -> None:
        policy = Policy(ruleset)
        self.apply_env(policy, dict(os.environ))
        self.agent.use_policy(policy)

    def paths(self) -> list[str]:
        return []
