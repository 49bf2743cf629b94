"""The parts of a reconcile pass the :class:`~runtime.controller.reconciler.Controller` holds around its plan,
each with explicit inputs and the state it keeps between passes:

* :class:`RulesGeneration`: the rules generation a pass reads, once, whatever reloads land meanwhile;
* :class:`Requeue`: the next pass asked for without an event (an Instance, a Retry, a window, the guard);
* :class:`FitLabelWindow`: the fit labels' coalescing window (docs/agent.md "Capacity and fit labels");
* :class:`WarningsOnce`: derive warnings logged once while they last;
* :class:`InvalidSettingReports`: the InvalidSetting Events (docs/concepts/settings.md "Settings");
* :func:`workload_check_step`: the Workload check answers (docs/concepts/pools-and-flavors.md "The
  AdmissionCheck `gpustack-node-devices`"); :func:`maintenance_step`: the AcceleratorMaintenance status
  (docs/concepts/out-of-service.md "Maintenance");
* :class:`Pass`: what one pass read (its generation, its snapshot, the check verdicts), handed to the
  steps that run its actions.

Times: ``now`` is the pass's wall clock (aware UTC, from the Controller's injected clock); ``monotonic``
arguments and due times are ``time.monotonic()`` seconds.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable, Iterator

from loguru import logger

from runtime.controller.settings_seed import invalid_setting_event
from runtime.controller.instances import RetryMessages
from runtime.controller.maintenance import plan_maintenance
from runtime.controller.workloadchecks import plan_workload_checks
from runtime.engine.plan import Action
from runtime.engine.policy import Policy
from runtime.engine.pools import DesiredState
from runtime.engine.settings import decode_secret_data
from runtime.engine.snapshot import Snapshot


@dataclass(frozen=True)
class Pass:
    """One pass's inputs, fixed once it has planned: the rules generation it read, its snapshot and the
    Workload check ``verdicts`` (``{workload key: verdict}``) it planned; the Events after each action
    are judged from these."""

    policy: Policy
    snapshot: Snapshot
    verdicts: dict = field(default_factory=dict)


class RulesGeneration:
    """The rules generation in force: during a pass, the one that pass read when it began (every step of
    the pass and its applier see that one object, however many reloads land meanwhile); between passes,
    the newest assigned."""

    def __init__(self, policy: Policy):
        self._served = policy
        self._pinned: Policy | None = None

    @property
    def current(self) -> Policy:
        """The pinned generation while a pass runs, else the newest assigned."""
        pinned = self._pinned
        return pinned if pinned is not None else self._served

    def assign(self, policy: Policy) -> None:
        """A reload: one assignment; the next pass reads it, a pass in progress keeps its own."""
        self._served = policy

    @contextmanager
    def pinned(self) -> Iterator[Policy]:
        """Read the newest generation once and hold it for the block (one pass)."""
        self._pinned = self._served
        try:
            yield self._pinned
        finally:
            self._pinned = None


class Requeue:
    """The ``time.monotonic()`` moment of the next pass asked for without an event, or None."""

    def __init__(self) -> None:
        self.at: float | None = None

    def ask(self, due: float) -> None:
        """A pass at ``due``, or earlier when one is already asked for."""
        self.at = due if self.at is None else min(self.at, due)

    def restart(self, due: float | None) -> None:
        """Forget earlier asks: a new pass's first ask (the Instances'), or none."""
        self.at = due

    def is_due(self, monotonic: float) -> bool:
        """Whether the asked-for moment has come."""
        return self.at is not None and monotonic >= self.at


class FitLabelWindow:
    """The coalescing window: the pass that first plans a fit label patch (an Action on a Node)
    defers it; the first pass at least ``seconds`` later runs the patches it plans. ``seconds`` 0 or
    less: no window."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self._since: float | None = None  # when a fit label patch was first deferred

    def hold(self, actions: list[Action], monotonic: float
             ) -> tuple[list[Action], list[Action], float | None]:
        """``(actions to run now, fit label patches deferred, when the window closes or None)``."""
        fit = [a for a in actions if a.kind == "Node"]
        if not fit or self.seconds <= 0:
            self._since = None
            return actions, [], None
        if self._since is None:
            self._since = monotonic
        due = self._since + self.seconds
        if monotonic >= due:
            self._since = None
            return actions, [], None
        return [a for a in actions if a.kind != "Node"], fit, due


class WarningsOnce:
    """Derive warnings (refused facts, untrusted NodeFeatures, ...) logged once while they last; one that
    goes away and comes back is logged again."""

    def __init__(self) -> None:
        self._last: set[str] = set()

    def log(self, warnings: list[str]) -> None:
        """Log the warnings not in the previous pass's list."""
        for warning in warnings:
            if warning not in self._last:
                logger.warning("derive: {}", warning)
        self._last = set(warnings)


class InvalidSettingReports:
    """A Warning Event ``InvalidSetting`` on the settings Secret for each stored value that does not
    parse, once per setting and value in this process."""

    def __init__(self) -> None:
        self._reported: set[tuple[str, str]] = set()

    def events(self, policy: Policy, state: DesiredState, snapshot: Snapshot, namespace: str,
               now: datetime) -> list[dict]:
        """The Events not yet reported for ``state.settings.invalid`` (the Secret read from ``snapshot``
        in ``namespace``)."""
        catalog = policy.settings
        secret = snapshot.get("Secret", catalog.secretName, namespace)
        if secret is None:
            return []
        raw = decode_secret_data(secret)
        events = []
        for name in state.settings.invalid:
            key = (name, raw.get(name, ""))
            if key in self._reported:
                continue
            self._reported.add(key)
            events.append(invalid_setting_event(catalog, secret, name, key[1], now))
        return events


def workload_check_step(policy: Policy, snapshot: Snapshot, now: datetime, namespace: str,
                        monotonic: Callable[[], float], requeue: Requeue,
                        retries: RetryMessages | None = None) -> tuple[list[Action], dict]:
    """The Workload check answers (:mod:`runtime.controller.workloadchecks`): ``(actions, verdicts)``; a
    Retry waiting for its re-evaluation asks ``requeue`` for that moment, and each error is logged.
    ``retries`` remembers each Retry for the Instance it holds back."""
    checks = plan_workload_checks(policy, snapshot, now, namespace)
    if retries is not None:
        retries.update(snapshot, checks.verdicts)
    for error in checks.errors:
        logger.warning("admission check {}: {}", policy.queues.admissionCheck.name, error)
    if checks.requeue is not None:
        requeue.ask(monotonic() + checks.requeue)
    return checks.actions, checks.verdicts


def maintenance_step(policy: Policy, snapshot: Snapshot, now: datetime, monotonic: Callable[[], float],
                     requeue: Requeue) -> list[Action]:
    """The AcceleratorMaintenance status writes (:mod:`runtime.controller.maintenance`); the next expiry asks
    ``requeue`` for a pass then (its status changes without an event)."""
    plan = plan_maintenance(policy, snapshot, now)
    if plan.requeue is not None:
        requeue.ask(monotonic() + plan.requeue)
    return plan.actions
