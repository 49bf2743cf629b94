"""Hot reload of the standalone webhook server's rules, as the controller does it (docs/rule-authoring.md
"Hot reload").

:class:`WebhookRulesReload` wires a :class:`runtime.rules.reload.RulesWatcher` (a mounted ConfigMap's
``..data`` symlink swap counts as one change) to a :class:`runtime.webhook.app.WebhookState`: a new
rule set is compiled into an :class:`runtime.engine.admission.AdmissionEngine` and a cluster view of
the same snapshot, then installed as one :class:`runtime.webhook.app.Generation` (one assignment), so
each review is judged wholly by the old generation or wholly by the new one. A set that does not
load (every ``file:line:col`` problem), does not compile into an engine, or serves a different set of
webhook paths (the routes are fixed when the server starts: adding, removing or moving a webhook needs
a restart) is refused and the working generation keeps answering.

A set that loads is then tried by the reload gate (``gate``: :func:`runtime.gate.try_generation` on this
server's objects and the reviews it answered recently, :class:`runtime.webhook.sample.ReviewSample`);
the verdicts it changes are logged. An admission replica (``leader_verdict``) then follows the
controller's leader: the verdict the leader recorded on the rules ConfigMap for the same fingerprint
decides (docs/rule-authoring.md "How a rules change goes live").

Each outcome is logged and counted in ``accelpolicy_rules_generation`` (gauge) and
``accelpolicy_rules_reload_failures_total`` and ``accelpolicy_rules_refused_total{reason}`` (counters) on the
server's ``/metrics`` (:class:`ReloadMetrics`,
shared with the controller's reload). The standalone server has no cluster connection, so it records
no Event.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from loguru import logger
from prometheus_client import CollectorRegistry, Counter, Gauge

from runtime.engine.admission import AdmissionEngine, AdmissionView
from runtime.engine.policy import Policy
from runtime.rules.loader import RuleLoadError, RuleSet
from runtime.rules.reload import RulesWatcher, Trial

MAX_SHOWN_PROBLEMS = 10


def refusal_lines(trial: Trial) -> list[str]:
    """The ``{problems}`` of a refused set's message: a lint finding as ``file:line:col ...`` (as
    ``accelpolicy lint`` prints it), any other ``<reason>: <problem>``."""
    return list(trial.problems) if trial.reason in (None, "lint") else [
        f"{trial.reason}: {p}" for p in trial.problems]


class ReloadMetrics:
    """A reload's two collectors, ``accelpolicy_rules_generation`` and
    ``accelpolicy_rules_reload_failures_total``, in ``registry`` (a new one when None)."""

    def __init__(self, registry: Optional[CollectorRegistry] = None):
        self.registry = registry or CollectorRegistry()
        self.generation = Gauge("accelpolicy_rules_generation", "Generation of the rules in force",
                                registry=self.registry)
        self.failures = Counter("accelpolicy_rules_reload_failures", "Rule sets refused by a reload",
                                registry=self.registry)
        self.refused = Counter("accelpolicy_rules_refused",
                               "Rule sets the reload gate refused, by reason: lint, "
                               "compile, suite, replay-object, replay-review, held, paths, leader "
                               "(docs/rule-authoring.md)", ["reason"], registry=self.registry)

    def refusal(self, reason: str) -> None:
        """Count one refused set (both counters)."""
        self.failures.inc()
        self.refused.labels(reason).inc()


def reload_message(ruleset: RuleSet, outcome: str, **variables) -> str:
    """The log (and Event) text of a reload ``outcome`` (``rulesReloaded``, ``rulesRefused``,
    ``rulesVerdictsChanged``): the ``events`` template of ``ruleset``'s PoolDerivation
    (rules/pools/derivation.yaml; the set in force, since a refused set has none) formatted with
    ``variables``. A list (``problems``, ``changes``) is shown one per line, the first
    :data:`MAX_SHOWN_PROBLEMS`, then how many more."""
    for key, value in variables.items():
        if isinstance(value, list):
            shown = [str(v) for v in value[:MAX_SHOWN_PROBLEMS]]
            if len(value) > MAX_SHOWN_PROBLEMS:
                shown.append(f"... and {len(value) - MAX_SHOWN_PROBLEMS} more")
            variables[key] = "\n".join(shown)
    return getattr(ruleset.get("PoolDerivation").events, outcome).message.format(**variables)


@dataclass
class _Pending:
    """A generation that loaded and was tried here, waiting for the leader's verdict on ``fingerprint``."""

    ruleset: RuleSet
    engine: AdmissionEngine
    trial: Trial
    fingerprint: str
    since: float
    decided: bool = False   # refused here once the wait ran out: a later leader "accepted" still installs it


class WebhookRulesReload:
    """Watch ``root`` every ``interval`` seconds and swap ``state``'s generation; see the module docstring.

    ``paths``: the served routes (HTTPS path -> policy name); ``view_of(policy)``: the cluster view a
    new policy judges against (the same snapshot, read once at start); ``initial``: the RuleSet the
    server started with. ``gate(serving policy, ruleset, engine, reviews)``: the reload gate
    (:func:`runtime.gate.try_generation` bound to this server's objects; None: none). ``leader_verdict()``:
    the rules ConfigMap's verdict annotation (``accepted:<fingerprint>``/``refused:<fingerprint>``, None
    when unset), or None for a server that follows no leader.
    """

    def __init__(self, state, paths: dict[str, str], root: Path | str,
                 view_of: Callable[[Policy], AdmissionView], initial: RuleSet, interval: float = 2.0,
                 gate: Optional[Callable[..., Trial]] = None,
                 leader_verdict: Optional[Callable[[], Optional[str]]] = None):
        self.state, self.paths, self.view_of = state, dict(paths), view_of
        self.gate, self.leader_verdict = gate, leader_verdict
        self.metrics = ReloadMetrics(state.metrics.registry)
        self.metrics.generation.set(initial.generation)
        self.serving = initial   # the RuleSet whose generation answers now
        self.pending: Optional[_Pending] = None
        self.last_trial: Optional[Trial] = None
        self._resize(initial)
        self.watcher = RulesWatcher(root, self._swap, self._refused, interval=interval, initial=initial,
                                    on_idle=self.follow)

    def start(self) -> "WebhookRulesReload":
        """Start polling (a daemon thread; nothing when the interval is 0); returns self."""
        self.watcher.start()
        return self

    def stop(self) -> None:
        """Stop polling."""
        self.watcher.stop()

    def _resize(self, ruleset: RuleSet) -> None:
        gate = ruleset.get("PoolDerivation").reloadGate
        self.state.sample.resize(gate.sampleReviews, gate.sampleBytes)

    def _swap(self, ruleset: RuleSet) -> bool:
        """Try ``ruleset``: True when it serves now, False when refused or waiting for the leader."""
        policy = Policy(ruleset)
        try:
            engine = AdmissionEngine(policy)
        except KeyError as exc:  # a dangling paramsFrom/builtin/shape: refuse like a lint finding
            self._refuse(Trial("compile", [str(exc.args[0]) if exc.args else str(exc)]))
            return False
        paths = {spec.path: name for name, spec in engine.policies.items()}
        if paths != self.paths:
            changed = sorted(set(paths.items()) ^ set(self.paths.items()))
            self._refuse(Trial("paths", ["the webhooks served changed (path -> policy: "
                                         + ", ".join(f"{p} -> {n}" for p, n in changed)
                                         + "); restart the server to serve them"]))
            return False
        trial = Trial() if self.gate is None else self.gate(Policy(self.serving), ruleset, engine,
                                                            self.state.sample.reviews())
        self.last_trial = trial
        if trial.changes:
            logger.warning(reload_message(ruleset, "rulesVerdictsChanged", generation=ruleset.generation,
                                          count=len(trial.changes), changes=list(trial.changes)))
        if self.leader_verdict is None:
            if not trial.accepted:
                self._refuse(trial)
                return False
            self._install(ruleset, engine)
            return True
        if not trial.accepted:
            logger.error(reload_message(self.serving, "rulesRefused", root=self.watcher.root,
                                        generation=self.serving.generation,
                                        problems=refusal_lines(trial)))
        self.pending = _Pending(ruleset, engine, trial, self.watcher.seen, time.monotonic())
        self.watcher.current = self.serving
        self.follow()
        return self.pending is None and self.serving is ruleset

    def follow(self) -> None:
        """Settle a generation waiting on the leader: its ``accepted:`` installs it (even one refused here:
        replicas serve one generation, the leader's, which replayed the whole cluster), its ``refused:``
        refuses it; past ``reloadGate.followSeconds`` without either, this server's own verdict holds."""
        pending = self.pending
        if pending is None:
            return
        try:
            verdict = self.leader_verdict() if self.leader_verdict is not None else None
        except Exception as exc:  # noqa: BLE001 - an unreadable ConfigMap: wait, then decide alone
            logger.warning("rules verdict: {}", exc)
            verdict = None
        if verdict == f"accepted:{pending.fingerprint}":
            if not pending.trial.accepted:
                logger.warning("rules generation {}: refused here ({}) but accepted by the controller's "
                               "leader: "
                               "serving it as every replica does", pending.ruleset.generation,
                               pending.trial.reason)
            self.pending = None
            self._install(pending.ruleset, pending.engine)
        elif verdict == f"refused:{pending.fingerprint}":
            self.pending = None
            self._refuse(Trial("leader",
                               ["refused by the controller's leader (its RulesRefused Event on the rules "
                                          "ConfigMap says why)"]))
        elif not pending.decided and time.monotonic() - pending.since >= self._follow_seconds(pending):
            if pending.trial.accepted:
                self.pending = None
                self._install(pending.ruleset, pending.engine)
            else:
                pending.decided = True
                self._refuse(pending.trial)

    @staticmethod
    def _follow_seconds(pending: _Pending) -> float:
        return pending.ruleset.get("PoolDerivation").reloadGate.followSeconds

    def _install(self, ruleset: RuleSet, engine: AdmissionEngine) -> None:
        self.state.set_ready(engine, self.view_of(Policy(ruleset)))
        self.serving = self.watcher.current = ruleset
        self._resize(ruleset)
        self.metrics.generation.set(ruleset.generation)
        logger.info(reload_message(ruleset, "rulesReloaded", generation=ruleset.generation, root=ruleset.root,
                                   seconds=self.watcher.last_seconds))

    def _refused(self, exc: RuleLoadError) -> None:
        self.pending = None
        self._refuse(Trial("lint", [str(p) for p in exc.problems]))

    def _refuse(self, trial: Trial) -> None:
        self.last_trial = trial
        self.metrics.refusal(trial.reason or "lint")
        self.watcher.current = self.serving   # a set refused after it loaded is not in force either
        logger.error(reload_message(self.serving, "rulesRefused", root=self.watcher.root,
                                    generation=self.serving.generation,
                                    problems=refusal_lines(trial)))
