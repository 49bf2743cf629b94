"""The status of every AcceleratorMaintenance, planned per reconcile (docs/concepts/out-of-service.md
"Maintenance").

Pure, like :mod:`runtime.controller.workloadchecks`: :func:`plan_maintenance` reads the snapshot's
AcceleratorMaintenance objects, their nodes' Devices and Pods at ``now`` and returns one ``apply-status``
:class:`Action` per object whose status must change
(:func:`runtime.engine.devices.maintenance.maintenance_status`: state, the accelerators it takes out, the
Pods still on them, a message), and the seconds until the next expiry, when a status changes without an
event. The agents, not the controller, take the accelerators out of their Devices: the controller only
reports, and never evicts a Pod.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from runtime.engine.devices.maintenance import maintenance_status, next_expiry
from runtime.engine.plan import Action, Verb
from runtime.engine.policy import Policy
from runtime.engine.snapshot import KNOWN_KINDS, Snapshot, name_of

KIND = "AcceleratorMaintenance"   # rules/agent.yaml maintenance.kind, as the watch caches know it

@dataclass
class MaintenancePlan:
    """``actions`` (status writes), ``requeue``: seconds until the next expiry (None: none ahead)."""

    actions: list[Action] = field(default_factory=list)
    requeue: float | None = None


def plan_maintenance(policy: Policy, snapshot: Snapshot, now: datetime) -> MaintenancePlan:
    """The AcceleratorMaintenance status writes for ``snapshot`` at ``now`` (aware datetime)."""
    objects = snapshot.list(KIND)
    out = MaintenancePlan()
    if not objects:
        return out
    pods_by_node: dict[str, list[dict]] = {}
    for pod in snapshot.list("Pod"):
        pods_by_node.setdefault((pod.get("spec") or {}).get("nodeName") or "", []).append(pod)
    for obj in objects:
        node = str((obj.get("spec") or {}).get("node") or "")
        devices = snapshot.get("Devices", node)
        status = maintenance_status(policy, obj, devices, pods_by_node.get(node, []), now)
        if status == (obj.get("status") or {}):
            continue
        body = {"apiVersion": KNOWN_KINDS[KIND][0], "kind": KIND, "metadata": {"name": name_of(obj)},
                "status": status}
        out.actions.append(Action(Verb.APPLY_STATUS, KIND, name_of(obj), "", body=body,
                                  reason=f"{status['state']}: {status.get('message', '')}"))
    ahead = next_expiry(objects, now)
    if ahead is not None:
        out.requeue = (ahead - now).total_seconds()
    return out
