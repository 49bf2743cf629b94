"""The one holder of a process's rules generation, used by every host: the controller, `accelpolicy
admission`, `accelpolicy webhook` and the agent (docs/rule-authoring.md "How a rules change goes live").

A :class:`RulesHolder` watches the rules directory (:class:`runtime.reload.watcher.RulesWatcher`). A changed
set that loads is tried by its host (``host.trial``: what that host can judge, :mod:`runtime.reload.hosts`)
and becomes a **candidate**; it serves only when one verdict lets it:

- **the decider** (the controller's leader, or a process with no rules ConfigMap to follow) decides: a
  refusal of its own trial refuses it; otherwise it asks every serving replica
  (:class:`runtime.reload.replicas.ReplicaReports`) for its own trial of the same generation (waiting at
  most ``followSeconds`` of the serving rules for those that have not seen it yet), and a refusal by any
  of them refuses it (``reason="replica"``); then the consequences and the recent reviews of all of them
  go through the hold (:func:`runtime.reload.consequences.hold_reasons`, thresholds of the **serving**
  generation; a revert to the serving generation's parent is never held). Held, it waits for an approval
  naming its id on the rules ConfigMap; else it is accepted. Each decision is recorded on the rules
  ConfigMap (:class:`runtime.reload.board.Board`) and as an Event;
- **a follower** (an admission replica, an agent, a controller that does not lead) serves a candidate
  only once the recorded verdict accepted (or approved) that very generation, and keeps the generation
  in force while it is held, refused, or not decided yet: one verdict for every component, never one of
  its own.

A generation is named by its content hash everywhere (:func:`runtime.reload.watcher.generation_id`).
:meth:`RulesHolder.report` is what this process says at ``/generation``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from loguru import logger

from runtime.engine.policy import Policy
from runtime.kube.session import KubeApiError
from runtime.reload.board import Board, Verdict
from runtime.reload.consequences import hold_reasons
from runtime.reload.replicas import ReplicaReports
from runtime.reload.report import ReloadMetrics, refusal_lines, reload_message
from runtime.reload.trial import Trial
from runtime.reload.watcher import RulesWatcher, content_hash, generation_id
from runtime.rules.loader import RuleLoadError, RuleSet


@dataclass
class Candidate:
    """A changed rules set that loaded and was tried here: ``state`` ``new`` (not decided), ``held``,
    ``refused`` (final) or ``waiting`` (a follower waiting for the verdict)."""

    ruleset: RuleSet
    digest: str
    trial: Trial
    since: float
    state: str = "new"
    said: set = field(default_factory=set)   # what was logged once already

    @property
    def id(self) -> str:
        return generation_id(self.digest)


class RulesHolder:
    """The rules generation in force for ``host`` (module docstring).

    ``root``: the rules directory; ``initial``: the RuleSet the host serves now (``digest``: its content
    hash, default that of the directory it was loaded from: the serving copy, :func:`starting_rules`, when
    the mounted rules are not the generation in force); ``board``: the rules ConfigMap (None: this process
    decides alone);
    ``decides()``: whether this process decides (the leader); ``replicas``: the serving replicas to ask
    (None: none apart from this process); ``events(outcome, message, templates, generation)``: records an
    Event (the decider's); ``registry``: where the metrics go; ``interval``: seconds between polls.
    """

    def __init__(self, host, root: Path | str, initial: RuleSet, *, board: Optional[Board] = None,
                 decides: Callable[[], bool] = lambda: True, replicas: Optional[ReplicaReports] = None,
                 events: Optional[Callable[..., None]] = None, registry=None, interval: float = 2.0,
                 digest: Optional[str] = None, clock: Callable[[], float] = time.monotonic):
        self.host, self.board, self.decides, self.replicas = host, board, decides, replicas
        self.events, self.clock = events, clock
        self.metrics = ReloadMetrics(registry)
        self.serving = initial
        self.digest = digest if digest is not None else content_hash(Path(initial.root))
        self.pending: Optional[Candidate] = None
        self.last_trial: Optional[Trial] = None
        self.tried: Optional[Candidate] = None   # the latest candidate, whatever became of it
        self.metrics.serving(self.id)
        self.watcher = RulesWatcher(root, self._swap, self._refused, interval=interval, initial=initial,
                                    on_idle=self.settle, seen=self.digest)

    @property
    def id(self) -> str:
        """The id of the generation in force."""
        return generation_id(self.digest)

    def start(self) -> "RulesHolder":
        """Start polling (a daemon thread; nothing when the interval is 0); returns self. The decider first
        records the generation it starts with when the rules ConfigMap names none (a first install)."""
        if self.board is not None and self._deciding():
            self._first_record()
        self.watcher.start()
        return self

    def _first_record(self) -> None:
        """A ConfigMap without a verdict gets ``accepted:<id>`` of the generation in force, and the serving
        copy its files (:meth:`Board.save_serving`) unless another generation serves; one whose verdict
        refused or holds the very generation this process started with (a restart while it was held, the
        serving copy missing: :func:`starting_rules` could only start on the mounted rules) says so."""
        try:
            configmap = self.board.read()
        except KubeApiError as exc:
            logger.warning("rules ConfigMap {}/{}: {}", self.board.namespace, self.board.name, exc)
            return
        verdict = self.board.verdict(configmap)
        if verdict is None and configmap:
            self.board.record(Verdict("accepted", self.id), [f"generation {self.id} in force (accepted)"],
                              serving=self.id)
        serving = self.board.annotations(configmap).get(self.gate().annotations.serving)
        if configmap and serving in (None, self.id):
            self.board.save_serving(Path(self.serving.root), self.id)
        elif verdict is not None and verdict.generation == self.id and not verdict.served:
            logger.error("rules generation {} is {} on the rules ConfigMap, but it is what the mounted rules "
                         "hold now and this process started with them: approve it or put the rules that "
                         "served back", self.id, verdict.outcome)

    def stop(self) -> None:
        self.watcher.stop()

    def gate(self):
        """The ``ReloadGate`` of the generation in force (its hold thresholds and waits apply)."""
        return self.serving.get("ReloadGate")

    # -- a changed set -----------------------------------------------------------------------------------
    def _swap(self, ruleset: RuleSet) -> bool:
        digest = self.watcher.seen
        try:
            trial = self.host.trial(Policy(self.serving), ruleset)
        except KeyError as exc:   # a dangling paramsFrom/builtin/shape: refused like a lint finding
            trial = Trial("compile", [str(exc.args[0]) if exc.args else str(exc)])
        candidate = Candidate(ruleset, digest, trial, self.clock())
        self.pending, self.tried, self.last_trial = candidate, candidate, trial
        self.watcher.current = self.serving
        self._report_changes(candidate)
        self.settle()
        return self.serving is ruleset

    def _refused(self, exc: RuleLoadError) -> None:
        """A set that does not load: refused everywhere alike (every component lints the same bytes)."""
        candidate = Candidate(self.serving, self.watcher.seen, Trial("lint", [str(p) for p in exc.problems]),
                              self.clock())
        self.pending, self.tried, self.last_trial = None, candidate, candidate.trial
        self._refuse(candidate, candidate.trial, record=self._deciding())

    def _deciding(self) -> bool:
        return self.board is None or bool(self.decides())

    # -- settling ----------------------------------------------------------------------------------------
    def settle(self) -> None:
        """Move the candidate on (every idle poll): decide it (the decider) or follow the verdict."""
        candidate = self.pending
        if candidate is None or candidate.state == "refused":
            return
        configmap: dict = {}
        if self.board is not None:
            try:
                configmap = self.board.read()
            except KubeApiError as exc:
                self._once(candidate, f"read {exc}", "rules ConfigMap {}/{}: {} (the generation in force "
                           "keeps serving)", self.board.namespace, self.board.name, exc)
                return
        if self._deciding():
            self._decide(candidate, configmap)
        else:
            self._follow(candidate, configmap)

    def _decide(self, candidate: Candidate, configmap: dict) -> None:
        if candidate.state == "held":
            approval = self.board.approval(configmap) if self.board is not None else None
            if approval is not None and approval.generation in (candidate.id, candidate.digest):
                self._install(candidate, "approved", approval)
            return
        if not candidate.trial.accepted:
            self._refuse(candidate, candidate.trial, record=True)
            return
        votes = self._votes(candidate)
        if votes is None:
            return
        refusals = [f"{where}: {line}" for where, report in votes.items() if report.get("reason")
                    for line in refusal_lines(report["reason"], report.get("problems") or [])[:3]]
        if refusals:
            self._refuse(candidate, Trial("replica", refusals, candidate.trial.changes), record=True)
            return
        reasons = [] if self._reverts(candidate, configmap) else hold_reasons(
            candidate.trial.consequences, _with_votes(candidate.trial, votes), self.gate().hold)
        if reasons:
            self._hold(candidate, reasons)
        else:
            self._install(candidate, "accepted")

    def _reverts(self, candidate: Candidate, configmap: dict) -> bool:
        """Whether ``candidate`` is the generation the serving one replaced (never held)."""
        parent = self.board.annotations(configmap).get(self.gate().annotations.parent) if self.board else None
        return bool(parent) and parent == candidate.id

    def _votes(self, candidate: Candidate) -> Optional[dict[str, dict]]:
        """The serving replicas' own trials of ``candidate`` (``{where: tried}``); None while one has not
        tried it yet and ``followSeconds`` have not passed."""
        if self.replicas is None:
            return {}
        reports = self.replicas.fetch()
        tried = {where: report["tried"] for where, report in reports.items()
                 if report is not None and (report.get("tried") or {}).get("generation") == candidate.id}
        missing = sorted(set(reports) - set(tried))
        if missing and self.clock() - candidate.since < self.gate().followSeconds:
            return None
        if missing:
            self._once(candidate, "missing", "rules generation {}: replica(s) {} did not try it within "
                       "{:g}s; decided without them (they follow the verdict)", candidate.id,
                       ", ".join(missing), self.gate().followSeconds)
        return tried

    def _follow(self, candidate: Candidate, configmap: dict) -> None:
        verdict = self.board.verdict(configmap)
        if verdict is None or verdict.generation != candidate.id:
            self._once(candidate, "waiting", "rules generation {}: waiting for the controller's leader to "
                       "decide (generation {} keeps serving)", candidate.id, self.id)
            return
        if verdict.served:
            if not candidate.trial.accepted:
                logger.warning("rules generation {}: refused here ({}) but {} by the controller's leader: "
                               "serving it as every component does", candidate.id, candidate.trial.reason,
                               verdict.outcome)
            self._install(candidate, verdict.outcome)
        elif verdict.outcome == "refused":
            self._refuse(candidate, Trial("leader", ["refused by the controller's leader (its RulesRefused "
                                                     "Event and the rules ConfigMap's status say why)"]),
                         record=False)
        elif candidate.state != "held":
            candidate.state = "held"
            self.metrics.holding(candidate.id)
            logger.warning("rules generation {}: held by the controller's leader (the rules ConfigMap's "
                           "status says why); generation {} keeps serving", candidate.id, self.id)

    # -- outcomes ----------------------------------------------------------------------------------------
    def _install(self, candidate: Candidate, outcome: str, approval=None) -> None:
        """Serve ``candidate`` (the host installs it), record it and say so."""
        parent = self.id
        self.host.install(candidate.ruleset, candidate.trial, candidate.id)
        self.serving, self.digest, self.pending = candidate.ruleset, candidate.digest, None
        self.watcher.current = candidate.ruleset
        self.metrics.serving(self.id)
        message = reload_message(self.serving, "reloaded", generation=self.id, root=self.serving.root,
                                 seconds=self.watcher.last_seconds)
        logger.info(message)
        if not self._deciding():
            return
        status = [f"generation {self.id} in force ({outcome})"]
        if self.board is not None:
            self.board.record(Verdict(outcome, self.id), status, serving=self.id, parent=parent)
            self.board.save_serving(Path(self.serving.root), self.id)
        if approval is not None:
            self._event("approved", reload_message(self.serving, "approved", generation=self.id,
                                                   by=approval.by, at=approval.at))
        self._event("reloaded", message)

    def _hold(self, candidate: Candidate, reasons: list[str]) -> None:
        candidate.state = "held"
        self.metrics.holding(candidate.id)
        approve = self.board.approve_command(candidate.id) if self.board is not None else \
            "no rules ConfigMap to approve it on: an edit replaces it"
        message = reload_message(self.serving, "held", generation=candidate.id, serving=self.id,
                                 reasons=reasons, approve=approve)
        logger.warning(message)
        if self.board is not None:
            self.board.record(Verdict("held", candidate.id), [f"generation {candidate.id} held: {approve}"]
                              + reasons)
        self._event("held", message, candidate.id)

    def _refuse(self, candidate: Candidate, trial: Trial, record: bool) -> None:
        """Count, log and (``record``: the decider) record ``trial``'s refusal; the generation in force
        keeps serving."""
        candidate.state, self.last_trial = "refused", trial
        self.metrics.refusal(trial.reason or "lint")
        self.watcher.current = self.serving
        lines = refusal_lines(trial.reason, trial.problems)
        message = reload_message(self.serving, "refused", generation=candidate.id, root=self.watcher.root,
                                 serving=self.id, problems=lines)
        logger.error(message)
        if record and self.board is not None:
            self.board.record(Verdict("refused", candidate.id),
                              [f"generation {candidate.id} refused"] + lines)
        if record:
            self._event("refused", message, candidate.id)

    def _report_changes(self, candidate: Candidate) -> None:
        """Log (and, deciding, record) the verdicts ``candidate`` changes, if any."""
        changes = candidate.trial.changes
        if not changes:
            return
        message = reload_message(self.serving, "verdictsChanged", generation=candidate.id, count=len(changes),
                                 changes=list(changes))
        logger.warning(message)
        if self._deciding():
            self._event("verdictsChanged", message, candidate.id)

    def _event(self, outcome: str, message: str, generation: Optional[str] = None) -> None:
        if self.events is not None and self._deciding():
            self.events(outcome, message, self.serving, generation or self.id)

    def _once(self, candidate: Candidate, key: str, template: str, *args) -> None:
        if key not in candidate.said:
            candidate.said.add(key)
            logger.info(template, *args)

    # -- what this process says --------------------------------------------------------------------------
    def report(self) -> dict:
        """``/generation``: ``component``, the ``generation`` in force, the ``paths`` it serves, and
        ``tried``: its own trial of the latest candidate (``generation``, ``reason`` and ``problems`` when
        refused here, ``reviews`` replayed and ``deniedReviews`` it newly denies)."""
        out = {"component": self.host.name, "generation": self.id, "paths": sorted(self.host.paths())}
        candidate = self.tried
        if candidate is not None:
            trial = candidate.trial
            out["tried"] = {"generation": candidate.id, "reason": trial.reason,
                            "problems": list(trial.problems[:10]), "reviews": trial.reviews,
                            "deniedReviews": trial.denied_reviews}
        return out


def starting_rules(root: Path | str, board: Optional[Board], workdir: Path | str) -> RuleSet:
    """The rules a process starts with (module docstring): the mounted ones under ``root``, unless the rules
    ConfigMap (``board``) says another generation serves (its ``serving`` annotation) and the verdict has
    not let the mounted one through: then the serving copy (:meth:`Board.load_serving`, written under
    ``workdir``). Raises :class:`RuleLoadError` when the rules chosen do not load. Without a board: the
    mounted ones."""
    from runtime.rules.loader import load_rules

    mounted = generation_id(content_hash(Path(root)))
    if board is not None:
        try:
            configmap = board.read()
        except KubeApiError as exc:
            logger.warning("rules ConfigMap {}/{}: {}: starting on the mounted rules", board.namespace,
                           board.name, exc)
            configmap = {}
        serving = board.annotations(configmap).get(board.keys().serving)
        verdict = board.verdict(configmap)
        let_through = verdict is not None and verdict.served and verdict.generation == mounted
        if serving and serving != mounted and not let_through:
            copy = Path(workdir) / "serving-rules"
            if board.load_serving(copy) == serving:
                logger.warning("the mounted rules (generation {}) are not in force ({}): starting on the "
                               "generation in force, {}", mounted, verdict or "no verdict", serving)
                return load_rules(copy)
            logger.error("the mounted rules (generation {}) are not in force ({}) and the serving copy of "
                         "generation {} is missing: starting on the mounted rules", mounted,
                         verdict or "no verdict", serving)
    return load_rules(root)


def _with_votes(trial: Trial, votes: dict[str, dict]) -> Trial:
    """``trial`` with the replicas' recent reviews added (their counts: the hold judges them together)."""
    reviews = trial.reviews + sum(int(v.get("reviews") or 0) for v in votes.values())
    denied = trial.denied_reviews + sum(int(v.get("deniedReviews") or 0) for v in votes.values())
    return Trial(trial.reason, trial.problems, trial.changes, objects=trial.objects, reviews=reviews,
                 denied_reviews=denied, consequences=trial.consequences)
