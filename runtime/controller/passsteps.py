"""Steps of a reconcile pass that the :class:`~runtime.controller.reconciler.Controller` takes around its
plan: derive warnings logged once, the fit labels' coalescing window (docs/agent.md "Capacity and fit
labels"), the Workload check answers (docs/concepts/pools-and-flavors.md "The AdmissionCheck
`gpustack-node-devices`") and the InvalidSetting Events (docs/concepts/settings.md "Settings"). A mixin: it
reads and sets the Controller's own fields (``_served`` and ``_pass_policy``, the rules generation behind
:attr:`PassSteps.policy`; ``settings_namespace``, ``_requeue_at``, ``_fit_since``, ``_warned``, ``_reported``,
``_pass``), reads the time from its ``clock`` and calls its ``_create_event``."""
from __future__ import annotations

import time

from loguru import logger

from runtime.controller.settings_seed import invalid_setting_event
from runtime.controller.workloadchecks import plan_workload_checks
from runtime.engine.plan import Action
from runtime.engine.policy import Policy
from runtime.engine.pools import DesiredState
from runtime.engine.settings import decode_secret_data


class PassSteps:
    """The pass steps above; mixed into the Controller."""

    # -- the rules generation --------------------------------------------------------------------------
    @property
    def policy(self) -> Policy:
        """The rules generation in force: during a pass, the one that pass read when it began (every
        step of the pass and its applier see that one object, however many
        reloads happen meanwhile); between passes, the newest assigned."""
        pinned = self._pass_policy
        return pinned if pinned is not None else self._served

    @policy.setter
    def policy(self, policy: Policy) -> None:
        """A reload: one assignment; the next pass reads it, a pass in progress keeps its own."""
        self._served = policy

    def _requeue(self, due: float) -> None:
        """Ask for a pass at ``due`` (time.monotonic()), or earlier when one is already asked for."""
        self._requeue_at = due if self._requeue_at is None else min(self._requeue_at, due)

    def _log_warnings(self, warnings: list[str]) -> None:
        """Log each derive warning (refused facts of decision 19, untrusted NodeFeatures of decision
        20, ...) once while it lasts; one that goes away and comes back is logged again."""
        for warning in warnings:
            if warning not in self._warned:
                logger.warning("derive: {}", warning)
        self._warned = set(warnings)

    def _hold_fit_labels(self, actions: list[Action]) -> tuple[list[Action], list[Action]]:
        """(actions to run now, fit label patches deferred): the coalescing window of
        docs/agent.md "Capacity and fit labels" (see the module docstring). A deferral requeues a pass for
        when the window closes."""
        fit = [a for a in actions if a.kind == "Node"]
        now = time.monotonic()
        if not fit or self.fit_coalesce_seconds <= 0:
            self._fit_since = None
            return actions, []
        if self._fit_since is None:
            self._fit_since = now
        due = self._fit_since + self.fit_coalesce_seconds
        if now >= due:
            self._fit_since = None
            return actions, []
        self._requeue(due)
        return [a for a in actions if a.kind != "Node"], fit

    # -- the gpustack-node-devices answers (docs/concepts/pools-and-flavors.md "The AdmissionCheck
    # `gpustack-node-devices`") ---
    def _workload_check_actions(self, snapshot) -> list[Action]:
        """Plan the Workload check answers (:mod:`runtime.controller.workloadchecks`); a Retry waiting
        for its re-evaluation requeues a pass for that moment."""
        checks = plan_workload_checks(self.policy, snapshot, self.clock(), self.settings_namespace)
        for error in checks.errors:
            logger.warning("admission check {}: {}", self.policy.derivation.admissionCheck.name, error)
        if checks.requeue is not None:
            due = time.monotonic() + checks.requeue
            self._requeue(due)
        self._pass = (snapshot, checks.verdicts)
        return checks.actions

    def _report_invalid_settings(self, state: DesiredState, snapshot) -> None:
        """A Warning Event ``InvalidSetting`` on the settings Secret for each stored value that does
        not parse (docs/concepts/settings.md "Settings"), once per setting and value in this process."""
        catalog = self.policy.settings
        secret = snapshot.get("Secret", catalog.secretName, self.settings_namespace)
        if secret is None:
            return
        raw = decode_secret_data(secret)
        for name in state.settings.invalid:
            key = (name, raw.get(name, ""))
            if key in self._reported:
                continue
            self._reported.add(key)
            self._create_event(invalid_setting_event(self.policy.settings, secret, name, key[1],
                                                     self.clock()))
