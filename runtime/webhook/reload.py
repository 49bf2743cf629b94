"""Hot reload of the standalone webhook server's rules (issue 12 item 7), as the controller does it.

:class:`WebhookRulesReload` wires a :class:`runtime.rules.reload.RulesWatcher` (a mounted ConfigMap's
``..data`` symlink swap counts as one change) to a :class:`runtime.webhook.app.WebhookState`: a new
rule set is compiled into an :class:`runtime.engine.admission.AdmissionEngine` and a cluster view of
the same snapshot, then installed as one :class:`runtime.webhook.app.Generation` (one assignment), so
each review is judged wholly by the old generation or wholly by the new one. A set that does not
load (every ``file:line:col`` problem), does not compile into an engine, or serves a different set of
webhook paths (the routes are fixed when the server starts: adding, removing or moving a webhook needs
a restart) is refused and the working generation keeps answering.

Each outcome is logged and counted in ``accelpolicy_rules_generation`` (gauge) and
``accelpolicy_rules_reload_failures_total`` (counter) on the server's ``/metrics`` (:class:`ReloadMetrics`,
shared with the controller's reload). The standalone server has no cluster connection, so it records
no Event.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from loguru import logger
from prometheus_client import CollectorRegistry, Counter, Gauge

from runtime.engine.admission import AdmissionEngine, AdmissionView
from runtime.engine.policy import Policy
from runtime.rules.loader import RuleLoadError, RuleSet
from runtime.rules.reload import RulesWatcher

MAX_SHOWN_PROBLEMS = 10


class ReloadMetrics:
    """A reload's two collectors, ``accelpolicy_rules_generation`` and
    ``accelpolicy_rules_reload_failures_total``, in ``registry`` (a new one when None)."""

    def __init__(self, registry: Optional[CollectorRegistry] = None):
        self.registry = registry or CollectorRegistry()
        self.generation = Gauge("accelpolicy_rules_generation", "Generation of the rules in force",
                                registry=self.registry)
        self.failures = Counter("accelpolicy_rules_reload_failures", "Rule sets refused by a reload",
                                registry=self.registry)


def reload_message(ruleset: RuleSet, outcome: str, **variables) -> str:
    """The log (and Event) text of a reload ``outcome`` (``rulesReloaded`` or ``rulesRefused``): the
    ``events`` template of ``ruleset``'s PoolDerivation (rules/pools/derivation.yaml; the set in force,
    since a refused set has none) formatted with ``variables``. For ``rulesRefused``, ``problems`` is a
    list shown one per line, the first :data:`MAX_SHOWN_PROBLEMS`, then how many more."""
    problems = variables.get("problems")
    if isinstance(problems, list):
        shown = problems[:MAX_SHOWN_PROBLEMS] + ([f"... and {len(problems) - MAX_SHOWN_PROBLEMS} more"]
                                                 if len(problems) > MAX_SHOWN_PROBLEMS else [])
        variables["problems"] = "\n".join(shown)
    return getattr(ruleset.get("PoolDerivation").events, outcome).message.format(**variables)


class WebhookRulesReload:
    """Watch ``root`` every ``interval`` seconds and swap ``state``'s generation; see the module docstring.

    ``paths``: the served routes (HTTPS path -> policy name); ``view_of(policy)``: the cluster view a
    new policy judges against (the same snapshot, read once at start); ``initial``: the RuleSet the
    server started with.
    """

    def __init__(self, state, paths: dict[str, str], root: Path | str, view_of: Callable[[Policy], AdmissionView],
                 initial: RuleSet, interval: float = 2.0):
        self.state, self.paths, self.view_of = state, dict(paths), view_of
        self.metrics = ReloadMetrics(state.metrics.registry)
        self.metrics.generation.set(initial.generation)
        self.serving = initial   # the RuleSet whose generation answers now
        self.watcher = RulesWatcher(root, self._swap, self._refused, interval=interval, initial=initial)

    def start(self) -> "WebhookRulesReload":
        """Start polling (a daemon thread; nothing when the interval is 0); returns self."""
        self.watcher.start()
        return self

    def stop(self) -> None:
        """Stop polling."""
        self.watcher.stop()

    def _swap(self, ruleset: RuleSet) -> None:
        policy = Policy(ruleset)
        try:
            engine = AdmissionEngine(policy)
        except KeyError as exc:  # a dangling paramsFrom/builtin/shape: refuse like a lint finding
            self._refused(RuleLoadError([]), str(exc.args[0]) if exc.args else str(exc))
            return
        paths = {spec.path: name for name, spec in engine.policies.items()}
        if paths != self.paths:
            changed = sorted(set(paths.items()) ^ set(self.paths.items()))
            self._refused(RuleLoadError([]), "the webhooks served changed (path -> policy: "
                          + ", ".join(f"{p} -> {n}" for p, n in changed) + "); restart the server to serve them")
            return
        self.state.set_ready(engine, self.view_of(policy))
        self.serving = ruleset
        self.metrics.generation.set(ruleset.generation)
        logger.info(reload_message(ruleset, "rulesReloaded", generation=ruleset.generation, root=ruleset.root,
                                   seconds=self.watcher.last_seconds))

    def _refused(self, exc: RuleLoadError, detail: str = "") -> None:
        self.metrics.failures.inc()
        self.watcher.current = self.serving   # a set refused after it loaded is not in force either
        problems = [str(p) for p in exc.problems] or [detail]
        logger.error(reload_message(self.serving, "rulesRefused", root=self.watcher.root,
                                    generation=self.serving.generation, problems=problems))
