"""ResourceFlavor derivation (docs/concepts/pools-and-flavors.md "ResourceFlavors: what each node
contributes"): contributions per managed node, grouped by name.

Names and contribution conditions are CEL in rules/pools/derivation.yaml (``spec.flavors``); label
keys come from rules/labels.yaml. Notes are taken from the first contributor in node-name order.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable, Optional

from runtime.engine.pools.accelerators import walk_devices
from runtime.engine.pools.nodes import NodeView
from runtime.engine.policy import Policy
from runtime.engine.snapshot import Snapshot


@dataclass
class FlavorPlan:
    """One derived ResourceFlavor before rendering.

    ``kind`` is "cpu" or "device"; ``count`` the per-node count (cores or accelerators);
    ``contributors`` node names in name order; ``node_labels`` the flavor's ``spec.nodeLabels``.
    """

    name: str
    kind: str
    gkey: str
    akey: str
    os: str
    arch: str
    count: int
    node_labels: dict[str, str]
    contributors: list[str] = field(default_factory=list)
    notes: dict[str, str] = field(default_factory=dict)

    @property
    def capacity(self) -> int:
        return len(self.contributors) * self.count

    @property
    def own_key(self) -> str:
        return self.akey if self.kind == "device" else self.gkey


def plan_flavors(policy: Policy, snapshot: Snapshot, nodes: list[NodeView], mixed: bool,
                 contributions: Optional[Callable[[Policy, NodeView, bool], list]] = None,
                 notes: Optional[Callable[[Policy, Snapshot, "FlavorPlan", NodeView], dict]] = None,
                 ) -> dict[str, FlavorPlan]:
    """Flavor name -> plan, from the managed nodes.

    ``contributions`` and ``notes`` stand for :func:`node_contributions` and :func:`flavor_notes` (same
    arguments, same answers): a :class:`runtime.engine.pools.incremental.DeriveMemo`'s, which reuse each
    node's contributions and each flavor's notes while their inputs are the same objects.
    """
    contributions = contributions or node_contributions
    notes = notes or flavor_notes
    plans: dict[str, FlavorPlan] = {}
    for node in nodes:  # name order
        for name, kind, akey, count, labels in contributions(policy, node, mixed):
            _contribute(plans, name, kind, node, node.gkey, akey, count, labels)
    by_name = {n.name: n for n in nodes}
    for plan in plans.values():
        plan.notes = notes(policy, snapshot, plan, by_name[plan.contributors[0]])
    return dict(sorted(plans.items()))


def node_contributions(policy: Policy, node: NodeView, mixed: bool) -> list[tuple[str, str, str, int, dict]]:
    """What one node contributes: ``(flavor name, kind, aKey, per-node count, spec.nodeLabels)`` for its
    CPU flavor and each accelerator flavor, per the CEL of rules/pools/derivation.yaml ``spec.flavors``;
    [] for a node unmanaged or without gKey/os/arch."""
    if not node.managed or not node.gkey or not node.os or not node.arch:
        return []
    rules = policy.derivation.flavors
    general = policy.prefix("general")
    acc = policy.prefix("acceleratable")
    out: list[tuple[str, str, str, int, dict]] = []
    has_acc = any(count > 0 for count in node.akeys.values())
    base_labels = {policy.key("os"): node.os, policy.key("arch"): node.arch, policy.key("managed"): "true",
                   f"{general}{node.gkey}": "true"}
    prefix = policy.derivation.namePrefix
    cpu_vars = {"namePrefix": prefix, "gKey": node.gkey, "aKey": "", "os": node.os, "arch": node.arch,
                "count": node.cores, "mixed": mixed, "hasAccelerators": has_acc}
    if rules["cpu"].when.evaluate(cpu_vars):
        labels = dict(base_labels)
        labels[f"{general}{node.gkey}{policy.suffix('count')}"] = str(node.cores)
        if not mixed:
            labels[policy.key("cpuOnly")] = "true"
        out.append((rules["cpu"].name.evaluate(cpu_vars), "cpu", "", node.cores, labels))
    for akey, count in node.akeys.items():
        dev_vars = {"namePrefix": prefix, "gKey": node.gkey, "aKey": akey, "os": node.os, "arch": node.arch,
                    "count": count, "mixed": mixed, "hasAccelerators": has_acc}
        if not rules["device"].when.evaluate(dev_vars):
            continue
        labels = dict(base_labels)
        labels[f"{acc}{akey}"] = "true"
        labels[f"{acc}{akey}{policy.suffix('count')}"] = str(count)
        out.append((rules["device"].name.evaluate(dev_vars), "device", akey, count, labels))
    return out


def _contribute(plans, name, kind, node, gkey, akey, count, labels) -> None:
    plan = plans.get(name)
    if plan is None:
        plan = plans[name] = FlavorPlan(name=name, kind=kind, gkey=gkey, akey=akey, os=node.os,
                                        arch=node.arch, count=count, node_labels=dict(labels))
    plan.contributors.append(node.name)


def flavor_notes(policy: Policy, snapshot: Snapshot, plan: FlavorPlan, first: NodeView) -> dict[str, str]:
    """The ``note.gpustack.ai/*`` annotations, from the first contributor."""
    if plan.kind == "cpu":
        notes = {"acceleratable": "false", "generalGroup": plan.gkey,
                 "manufacturer": plan.gkey.split("-", 1)[0],
                 "product": first.annotations.get(policy.key("cpuNameAnnotation"), ""),
                 "family": first.annotations.get(policy.key("cpuFamilyAnnotation"), "")}
    else:
        acc = policy.prefix("acceleratable")
        manufacturer = policy.manufacturer_of_key(plan.akey)
        logical, physical = _slicing_capability(policy, snapshot, first.name, plan.akey, manufacturer)
        feature = {"logicalSliced": {"maxSize": logical,
                                     "coresPercentageOvercommit": bool(
                                         manufacturer and manufacturer.coresOvercommit),
                                     "memoryPercentageStep": 1},
                   "physicalSliced": {"maxSize": physical}}
        notes = {"acceleratable": "true", "generalGroup": plan.gkey, "acceleratorGroup": plan.akey,
                 "manufacturer": plan.akey.split("-", 1)[0],
                 "product": first.labels.get(f"{acc}{plan.akey}.product", ""),
                 "family": first.labels.get(f"{acc}{plan.akey}.family", ""),
                 "memory": first.labels.get(f"{acc}{plan.akey}.memory", ""),
                 "cores": first.labels.get(f"{acc}{plan.akey}.cores", ""),
                 "sliceable": "true" if logical > 0 else "false",
                 "feature": json.dumps(feature, separators=(",", ":"))}
    return {k: v for k, v in notes.items() if v != ""}


def _slicing_capability(policy, snapshot, node_name, akey, manufacturer) -> tuple[int, int]:
    """(L, P) from the first contributor's Devices object."""
    slices = manufacturer.logicalSlices if manufacturer else 0
    devices = snapshot.get("Devices", node_name)
    if devices is None:
        return slices, 0
    logical_ok = False
    physical = 0
    for _, accel in walk_devices(devices, akey=akey):
        status = accel.get("status") or {}
        p_count = int(((status.get("physicalSliced") or {}).get("count")) or 0)
        physical = max(physical, p_count)
        if status.get("unhealthy"):
            continue
        if p_count == 0 and int(((status.get("logicalSliced") or {}).get("count")) or 0) > 0:
            logical_ok = True
    return (slices if logical_ok else 0), physical


def render_flavor(policy: Policy, plan: FlavorPlan) -> dict:
    """The ResourceFlavor object (labels, notes, ``spec.nodeLabels`` only)."""
    general = policy.prefix("general")
    acc = policy.prefix("acceleratable")
    own_prefix = acc if plan.kind == "device" else general
    labels = {policy.key("os"): plan.os, policy.key("arch"): plan.arch,
              policy.key("acceleratable"): "true" if plan.kind == "device" else "false"}
    if plan.kind == "device":
        labels[f"{general}{plan.gkey}"] = "true"
    labels[f"{own_prefix}{plan.own_key}"] = "true"
    labels[f"{own_prefix}{plan.own_key}{policy.suffix('count')}"] = str(plan.count)
    labels[f"{own_prefix}{plan.own_key}{policy.suffix('capacity')}"] = str(plan.capacity)
    labels[policy.key("resourceType")] = policy.derivation.resourceTypes["flavor"]
    note = policy.prefix("note")
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": plan.name, "labels": labels,
                     "annotations": {f"{note}{k}": v for k, v in plan.notes.items()}},
        "spec": {"nodeLabels": dict(plan.node_labels)},
    }
