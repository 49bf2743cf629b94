"""The node agent's Prometheus metrics (docs/observability.md "The agent's metrics"), served on its health
port (:func:`runtime.agent.health.serve_health`, ``/metrics``).

Per accelerator of the last plan's Devices object (labels ``node``, ``group``, ``accelerator``: the
node's name, the accelerator group id and the accelerator's id as published; bounded by the
node's accelerators): the ledger's ``mode`` and ``remaining`` credits (docs/agent.md "The Devices object and
its ledger", ``status.groups[].accelerators[]``) and health (``spec`` ``status.unhealthy``); each health
transition (docs/concepts/out-of-service.md "Health": the accelerator, the rule, out or back). Per pass: the
probe's duration, and errors of each probe and of the kubelet PodResources read (one per failing pass, ERROR
level only: a CPU node without the NVIDIA library or ``auto`` without the socket is no error).
"""
from __future__ import annotations

from typing import Iterator, Optional

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

PROBE_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# OnceLog topics (runtime/agent/oncelog.py, named in runtime/agent/runner.py) -> the probe label of
# accelpolicy_agent_probe_errors_total
PROBE_TOPICS = {"cpu probe": "cpu", "accelerator probe": "accelerator", "facts": "facts"}
PODRESOURCES_TOPIC = "allocations"
LABELS = ["node", "group", "accelerator"]


def accelerator_samples(devices: dict | None) -> Iterator[tuple[str, str, str, float]]:
    """``(group, accelerator id, what, value)`` of one Devices object; ``what``: ``mode``,
    ``remaining`` (ledger, ``status``) or ``healthy`` (1/0, ``spec``)."""
    if not devices:
        return
    for side, fields in (("status", ("mode", "remaining")), ("spec", ())):
        for group in (devices.get(side) or {}).get("groups") or []:
            for acc in group.get("accelerators") or []:
                ids = (str(group.get("id", "")), str(acc.get("id", "")))
                if side == "spec":
                    yield *ids, "healthy", 0.0 if (acc.get("status") or {}).get("unhealthy") else 1.0
                for name in fields:
                    if isinstance(acc.get(name), int):
                        yield *ids, name, float(acc[name])


class _LedgerCollector(Collector):
    def __init__(self, owner: "AgentMetrics"):
        self.owner = owner

    def _families(self) -> dict[str, GaugeMetricFamily]:
        return {"mode": GaugeMetricFamily(
                    "accelpolicy_agent_accelerator_mode",
                    "Ledger mode of an accelerator: 0 free, 1 exclusive, "
                    "2 shared, 3 sliced, 4 partitioned", labels=LABELS),
                "remaining": GaugeMetricFamily(
                    "accelpolicy_agent_ledger_remaining_credits", "Credits left on an accelerator's ledger "
                    "(a whole accelerator: creditsPerAccelerator of rules/constants.yaml)", labels=LABELS),
                "healthy": GaugeMetricFamily(
                    "accelpolicy_agent_accelerator_healthy",
                    "1 while the probe reads an accelerator healthy, "
                    "else 0", labels=LABELS)}

    def describe(self):
        return list(self._families().values())

    def collect(self):
        families = self._families()
        devices = self.owner.devices
        for group, acc, what, value in accelerator_samples(devices):
            families[what].add_metric([self.owner.node, group, acc], value)
        return list(families.values())


class AgentMetrics:
    """The agent's collectors in ``registry`` (a new one when None); :meth:`bind` an agent."""

    def __init__(self, registry: Optional[CollectorRegistry] = None):
        self.registry = registry or CollectorRegistry()
        self.node = ""
        self.devices: dict | None = None
        self.registry.register(_LedgerCollector(self))
        self.probe_seconds = Histogram("accelpolicy_agent_probe_seconds", "Time one probe of the node took "
                                       "(CPU and accelerators)", buckets=PROBE_BUCKETS,
                                       registry=self.registry)
        self.probe_errors = Counter("accelpolicy_agent_probe_errors", "Passes whose probe failed, by probe "
                                    "(cpu, accelerator, facts)", ["probe"], registry=self.registry)
        self.podresources_errors = Counter("accelpolicy_agent_podresources_errors", "Passes whose kubelet "
                                           "PodResources read failed", registry=self.registry)
        self.health_transitions = Counter(
            "accelpolicy_agent_accelerator_health_transitions", "Accelerators judged unhealthy or back in "
            "service by a rule of rules/health.yaml", ["node", "accelerator", "rule", "to"],
            registry=self.registry)

    def bind(self, agent) -> "AgentMetrics":
        """Observe ``agent`` (a :class:`runtime.agent.runner.NodeAgent`): its passes and problems."""
        self.node = agent.node_name
        agent.observers.append(self.observe)
        agent.log.listeners.append(self.problem)
        return self

    def observe(self, plan, probe_seconds: float) -> None:
        """One pass: its plan (None when it failed) and the probe's duration in seconds. A plan whose
        accelerators are unknown (a failed probe) keeps the last published ledger."""
        self.probe_seconds.observe(probe_seconds)
        if plan is not None and plan.accelerators_known:
            self.devices = plan.devices
        for move in (plan.health_transitions if plan is not None else []):
            self.health_transitions.labels(self.node, move.uuid, move.rule, move.to).inc()

    def problem(self, topic: str, level: str) -> None:
        """A problem the agent logged (or would have: it logs each once) under ``topic``."""
        if level != "ERROR":  # a CPU node without the NVIDIA library, no PodResources socket under auto
            return
        if topic in PROBE_TOPICS:
            self.probe_errors.labels(PROBE_TOPICS[topic]).inc()
        elif topic == PODRESOURCES_TOPIC:
            self.podresources_errors.inc()
