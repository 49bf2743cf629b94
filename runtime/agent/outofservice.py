"""The agent's side of accelerators out of service (docs/concepts/out-of-service.md): the
AcceleratorMaintenance objects in force on its node, the health of its accelerators judged by
rules/health.yaml, and when the loop must look again without an event (a maintenance expiry, the end of a
clean period).

:class:`OutOfService` resolves both at the agent's clock for one pass and hands :func:`plan_node` plain
records (the engine stays clock-free); the health history is the node's Devices as the cluster holds it, or
the last plan's without a cluster. The backend's XID event thread (NVML: probes/nvmlevents.py) is started and
stopped here too.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Callable

from runtime.agent.cluster import MaintenanceUnreadable
from runtime.agent.oncelog import OnceLog
from runtime.engine.devices.health import Transition, health_events, health_rules, judge
from runtime.engine.devices.maintenance import in_force
from runtime.engine.devices.nodefacts import agent_rules
from runtime.engine.policy import Policy
from runtime.model.facts import NodeFactsDoc


class OutOfService:
    """One agent's maintenance, health and wake-up state. ``clock``: the wall clock (aware UTC)."""

    def __init__(self, node: str, log: OnceLog, clock: Callable[[], datetime] | None = None):
        self.node, self.log = node, log
        self.clock = clock or (lambda: datetime.now(timezone.utc))
        self.wake_at: datetime | None = None   # the next maintenance expiry or clean-period end
        self.last_devices: dict | None = None  # the last plan's Devices: the health history without a cluster

    def resolve(self, policy: Policy, cluster: Any, facts: NodeFactsDoc,
                known: bool = True) -> tuple[dict, dict, list[Transition]]:
        """(UUID -> maintenance entry in force, UUID -> health record, this pass's health transitions) at
        the clock's now (nothing while the accelerators are not ``known``: a failed probe); :attr:`wake_at`
        becomes the earliest moment one of them changes."""
        self.wake_at = None
        if not known:
            return {}, {}, []
        maintenance = self.maintenance(policy, cluster, facts)
        health, moves = self.health(policy, cluster, facts)
        return maintenance, health, moves

    def maintenance(self, policy: Policy, cluster: Any, facts: NodeFactsDoc) -> dict[str, dict]:
        """Accelerator UUID -> the AcceleratorMaintenance entry in force on it now
        (docs/concepts/out-of-service.md "Maintenance"); the earliest expiry ahead becomes :attr:`wake_at`, so
        the accelerator returns at its expiry without anyone acting. While the objects cannot be read (no CRD,
        RBAC) nothing is in maintenance, logged once."""
        if cluster is None:
            return {}
        try:
            objects = cluster.maintenances()
            self.log.ok("maintenance")
        except MaintenanceUnreadable as exc:
            kind = agent_rules(policy).maintenance.kind
            self.log.problem("maintenance", f"cannot read {kind} objects, none applied: {exc}", "WARNING")
            return {}
        pairs = [(a.uuid, a.index) for a in facts.accelerators]
        found, wake = in_force(objects, self.node, pairs, self.clock())
        self._wake(wake)
        return found

    def health(self, policy: Policy, cluster: Any,
               facts: NodeFactsDoc) -> tuple[dict[str, dict], list[Transition]]:
        """Each accelerator's health record judged now by rules/health.yaml against the history its Devices
        carries (docs/concepts/out-of-service.md "Health"), and this pass's transitions; a clean period's end
        ahead brings :attr:`wake_at` forward."""
        devices = cluster.devices() if cluster is not None else self.last_devices
        records, moves, wake = judge(policy, facts.accelerators, devices, self.clock())
        self._wake(wake)
        return records, moves

    def finish(self, policy: Policy, plan: Any, moves: list[Transition]) -> None:
        """Hand ``plan`` (an AgentPlan) this pass's transitions and their Events (on the node's Devices), and
        keep its Devices as the next judgement's history when there is no cluster."""
        plan.health_transitions = moves
        plan.events += health_events(policy, self.node, moves)
        if plan.accelerators_known:
            self.last_devices = plan.devices

    def _wake(self, at: datetime | None) -> None:
        if at is not None and (self.wake_at is None or at < self.wake_at):
            self.wake_at = at

    def wait_seconds(self, interval: float) -> float:
        """How long the loop waits for a watch event before the next pass: ``interval``, or less when a
        maintenance expiry or a clean period's end (:attr:`wake_at`) comes first."""
        if self.wake_at is None:
            return interval
        return max(0.05, min(interval, (self.wake_at - self.clock()).total_seconds() + 0.05))


def start_events(policy: Policy, backend: Any) -> bool:
    """Start the backend's XID event thread where it has one (NVML: probes/nvmlevents.py; the wait is
    rules/health.yaml ``nvml.waitMilliseconds``); whether it runs."""
    start = getattr(backend, "start_events", None)
    rules = health_rules(policy)
    if start is None or rules is None:
        return False
    return bool(start(rules.nvml.waitMilliseconds))


def stop_events(backend: Any) -> None:
    """Stop the backend's XID event thread (when it has one)."""
    stop = getattr(backend, "stop_events", None)
    if stop is not None:
        stop()
