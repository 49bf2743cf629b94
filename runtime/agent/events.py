"""The agent's Events (docs/observability.md "Events"): each Event of a plan (the ledger's, the health
transitions', an unreadable DRA device's) recorded once per process per (object, message), since every pass
rebuilds the ledger and repeats them."""
from __future__ import annotations

from typing import Any

from loguru import logger

from runtime.engine.devices import AgentPlan

COMPONENT = "accelpolicy-agent"


class EventRecorder:
    """Records a plan's Events through ``cluster`` (:meth:`runtime.agent.cluster.NodeCluster.warn`), once
    each."""

    def __init__(self) -> None:
        self.recorded: set[tuple[str, str, str, str]] = set()

    def record(self, cluster: Any, devices_kind, plan: AgentPlan, node_uid: str) -> None:
        """Record each new Event of ``plan``; ``devices_kind``: rules/agent.yaml ``devices`` (the Devices'
        apiVersion and kind); ``node_uid``: the Node's, for an Event on it."""
        for ev in plan.events:
            key = (ev.kind, ev.namespace, ev.name, ev.message)
            if key in self.recorded:
                continue
            self.recorded.add(key)
            if ev.kind == devices_kind.kind:
                involved = {"apiVersion": devices_kind.apiVersion, "kind": devices_kind.kind, "name": ev.name}
            else:
                involved = {"apiVersion": "v1", "kind": ev.kind, "name": ev.name, "namespace": ev.namespace}
                # an unreadable DRA device (docs/node-facts-robustness.md "A malformed fact costs only its
                # node (decision 19)")
                if ev.kind == "Node":
                    involved["uid"] = node_uid
            level = "WARNING" if ev.type == "Warning" else "INFO"
            logger.log(level, "{} {}/{}: {}: {}", ev.kind, ev.namespace, ev.name, ev.reason, ev.message)
            cluster.warn(involved, ev.reason, ev.message, COMPONENT, ev.type)
