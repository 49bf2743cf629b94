"""Accelerators out of service, said (docs/concepts/out-of-service.md): per node, each accelerator its Devices
marks unhealthy (the health rule and fact, until when) or in maintenance (the object, its owner, expiry and
reason), with the Pods still holding it, and each closed node (cordoned or tainted) with its accelerators.

:func:`out_of_service` gives them as :class:`OutOfService` rows in the words of rules/audit.yaml
``outOfService``; ``accelpolicy explain instancetype`` prints the rows of the pool's nodes and ``accelpolicy
audit`` reports each as a finding (:func:`out_of_service_results`), which the HTML page and the PolicyReports
carry like every finding. Pure: reads a Snapshot and a :class:`runtime.engine.pools.derive.DesiredState`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from runtime.engine.devices.devicesobject import out_of_service as out_of_service_reason
from runtime.engine.devices.maintenance import pods_holding
from runtime.engine.policy import Policy
from runtime.engine.pools import DesiredState
from runtime.engine.pools.accelerators import walk_devices
from runtime.engine.snapshot import Snapshot, name_of
from runtime.model.audit import OutOfServiceSpec
from runtime.report.results import ObjectRef, Result


@dataclass(frozen=True)
class OutOfService:
    """One row: ``node``, ``reason`` (``unhealthy``, ``maintenance`` or ``closed``), the accelerator
    (``accelerator`` id, ``index``; "" and -1 for a closed node), ``pods`` still holding it, the rendered
    ``message`` and the rule it is reported under."""

    node: str
    reason: str
    accelerator: str
    index: int
    pods: tuple[str, ...]
    message: str
    rule: str


def words(policy: Policy) -> OutOfServiceSpec | None:
    """rules/audit.yaml ``outOfService``; None when the rules do not say it (then nothing is reported)."""
    try:
        return policy.ruleset.get("AuditPolicy").outOfService
    except KeyError:
        return None


def _accelerator_rows(policy: Policy, spec: OutOfServiceSpec, devices: dict,
                      pods: list[dict]) -> list[OutOfService]:
    node = name_of(devices)
    out = []
    for group, accel in walk_devices(devices):
        status = accel.get("status") or {}
        reason = out_of_service_reason(accel)
        if reason is None:
            continue
        uuid, index = str(accel.get("id")), int(accel.get("index") or 0)
        holding = tuple(pods_holding(policy, pods, node, {uuid}))
        fields = {"node": node, "accelerator": uuid, "index": index, "group": group.get("id", ""),
                  "pods": ", ".join(holding) or spec.noPods}
        if reason == "unhealthy":
            health = status.get("health") or {}
            until = spec.cleanUntil.format(until=health["until"]) if health.get("until") \
                else spec.stillFailing
            message = spec.unhealthy.message.format(fact=health.get("fact") or "lost", until=until,
                                                    rule=health.get("rule") or "lost", **fields)
        else:
            held = status["maintenance"]
            message = spec.maintenance.message.format(
                name=held.get("name", ""), reason=held.get("reason", ""), owner=held.get("owner", ""),
                expiry=held.get("expiry", ""), **fields)
        out.append(OutOfService(node, reason, uuid, index, holding, message, reason))
    return out


def out_of_service(policy: Policy, snapshot: Snapshot, desired: DesiredState,
                   nodes: Iterable[str] | None = None) -> list[OutOfService]:
    """The rows of ``nodes`` (None: every node with a Devices object or closed), node then accelerator order:
    a closed node's row first."""
    spec = words(policy)
    if spec is None:
        return []
    wanted = sorted(set(nodes) if nodes is not None else
                    {name_of(d) for d in snapshot.list("Devices")} | set(desired.closed_nodes))
    pods_by_node: dict[str, list[dict]] = {}
    for pod in snapshot.list("Pod"):
        pods_by_node.setdefault((pod.get("spec") or {}).get("nodeName") or "", []).append(pod)
    out: list[OutOfService] = []
    for node in wanted:
        devices = snapshot.get("Devices", node)
        if node in desired.closed_nodes:
            count = sum(1 for _ in walk_devices(devices)) if devices is not None else 0
            out.append(OutOfService(node, "closed", "", -1, (), spec.closed.message.format(
                node=node, why=desired.closed_nodes[node], count=count), "closed-node"))
        if devices is not None:
            out += _accelerator_rows(policy, spec, devices, pods_by_node.get(node, []))
    return out


def out_of_service_results(policy: Policy, snapshot: Snapshot, desired: DesiredState) -> list[Result]:
    """One finding per row of :func:`out_of_service`: on the node's Devices (an accelerator) or its Node
    (closed), with the accelerator, its index and the Pods still on it as properties."""
    spec = words(policy)
    out = []
    for row in out_of_service(policy, snapshot, desired):
        finding = getattr(spec, row.reason)
        kind = "Node" if row.reason == "closed" else "Devices"
        obj = snapshot.get(kind, row.node) or {"kind": kind, "metadata": {"name": row.node}}
        props = {"node": row.node}
        if row.accelerator:
            props.update(accelerator=row.accelerator, index=str(row.index), pods=", ".join(row.pods))
        out.append(Result(spec.policy, row.rule, finding.result, ObjectRef.of(obj), row.message, "", props))
    return out
