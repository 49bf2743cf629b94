"""Whether a pool can keep what it promises (docs/audit.md "Pools that cannot schedule"): the Nodes its
flavors' ``spec.nodeLabels`` really select, and the accelerators its nodes' Devices can really use.

The derivation reads a node's *effective* labels: its NodeFeatures win over the Node's own copies
(docs/node-facts-robustness.md, "Labels that vanish"). The scheduler reads the Node. When NFD stops
applying the labels (or an administrator strips them) while the NodeFeatures remain, a flavor keeps
its contributors but its ``spec.nodeLabels`` select none of them, and no Pod of the pool can land.
Likewise a node whose driver fails keeps its labels (the last good facts) while its Devices reports
its accelerators unhealthy.

* :func:`flavor_reach`: per derived ResourceFlavor, its contributors and, for each whose Node lacks a
  ``spec.nodeLabels`` pair, the pairs it lacks (:class:`FlavorReach`).
* :func:`usable_accelerators`: per aKey, the healthy accelerators of one Devices object (what the four
  views count, docs/concepts/four-views.md "The four views"); :func:`usable_quota` the accelerators a device
  flavor's quota counts (spec: docs/concepts/pools-and-flavors.md, "Quota follows the usable accelerators").
* :func:`shortfalls`: per contributing node and aKey whose labels count more accelerators than its
  Devices can use (:class:`Shortfall`).
* :func:`pool_flavors`: per pool (InstanceType), the flavors its ClusterQueue names.

Pure: reads a Snapshot and a :class:`runtime.engine.pools.derive.DesiredState`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from runtime.engine.pools.accelerators import walk_devices
from runtime.engine.snapshot import Snapshot, is_deleting, labels_of, name_of


@dataclass(frozen=True)
class FlavorReach:
    """One derived ResourceFlavor against the live Nodes that contribute to it.

    ``nodes``: the contributors (name order); ``missing``: contributor -> the ``(key, value)`` pairs of
    the flavor's ``spec.nodeLabels`` its Node does not carry (absent or another value), key order;
    contributors whose Node carries them all are absent.
    """

    flavor: str
    nodes: tuple[str, ...]
    missing: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)

    @property
    def selected(self) -> int:
        """How many contributors the flavor's ``spec.nodeLabels`` select."""
        return len(self.nodes) - len(self.missing)


@dataclass(frozen=True)
class Shortfall:
    """A contributing node whose labels count more accelerators of ``akey`` than its Devices can use.

    ``labelled``: the per-node count of the flavor (``<aKey>.count``); ``usable``: the accelerators of the
    group in service in its Devices; ``unhealthy``: those marked unhealthy; ``devices``: ``present``,
    ``missing`` (no Devices object) or ``refused`` (a fact of decision 19: counts in no view);
    ``maintenance``: those in maintenance (docs/concepts/out-of-service.md "Maintenance").
    """

    node: str
    akey: str
    flavor: str
    labelled: int
    usable: int
    unhealthy: int
    devices: str
    maintenance: int = 0


def contributors(node_flavors: Mapping[str, Iterable[str]]) -> dict[str, list[str]]:
    """flavor -> its contributing nodes (name order), from ``DesiredState.node_flavors``."""
    out: dict[str, list[str]] = {}
    for node in sorted(node_flavors):
        for flavor in node_flavors[node]:
            out.setdefault(flavor, []).append(node)
    return out


def flavor_reach(snapshot: Snapshot, flavors: Iterable[dict],
                 node_flavors: Mapping[str, Iterable[str]]) -> dict[str, FlavorReach]:
    """Derived flavor name -> :class:`FlavorReach`: each ``spec.nodeLabels`` pair checked against the
    labels of the contributing Node as the cluster holds it (not the effective labels). A contributor
    whose Node is gone or being deleted is left out."""
    by_flavor = contributors(node_flavors)
    out: dict[str, FlavorReach] = {}
    for flavor in flavors:
        name = name_of(flavor)
        wanted = sorted((((flavor.get("spec") or {}).get("nodeLabels")) or {}).items())
        nodes, missing = [], {}
        for node_name in by_flavor.get(name, ()):
            node = snapshot.get("Node", node_name)
            if node is None or is_deleting(node):
                continue
            nodes.append(node_name)
            labels = labels_of(node)
            lacks = tuple((k, v) for k, v in wanted if labels.get(k) != v)
            if lacks:
                missing[node_name] = lacks
        out[name] = FlavorReach(name, tuple(nodes), missing)
    return out


def usable_accelerators(devices: dict) -> dict[str, tuple[int, int, int]]:
    """aKey -> (in service, unhealthy, in maintenance) accelerators of one Devices object's capability
    (``spec``; docs/concepts/out-of-service.md)."""
    out: dict[str, list[int]] = {}
    for group, accel in walk_devices(devices):
        counts = out.setdefault(f"{group.get('manufacturer')}-{group.get('id')}", [0, 0, 0])
        status = accel.get("status") or {}
        counts[1 if status.get("unhealthy") else 2 if status.get("maintenance") else 0] += 1
    return {akey: tuple(counts) for akey, counts in out.items()}


def usable_quota(count: int, akey: str, nodes: Iterable[str], usable: Mapping[str, Mapping[str, int]]) -> int:
    """The accelerators a device flavor's quota counts: per contributor the smaller of its per-node
    ``count`` (labels) and the healthy accelerators of ``akey`` in its counted Devices (``usable``:
    node -> aKey -> healthy, only nodes whose Devices count in the views)."""
    return sum(min(count, (usable.get(node) or {}).get(akey, 0)) for node in nodes)


def shortfalls(snapshot: Snapshot, device_flavors: Iterable[tuple[str, str, int, Iterable[str]]],
               usable: Mapping[str, Mapping[str, int]]) -> list[Shortfall]:
    """Every (node, aKey) of a device flavor whose Devices can use fewer accelerators than the flavor's
    per-node count, by node then flavor. ``device_flavors``: ``(flavor, aKey, per-node count,
    contributors)``; ``usable``: as for :func:`usable_quota`."""
    out = []
    for flavor, akey, count, nodes in device_flavors:
        for node in nodes:
            healthy = (usable.get(node) or {}).get(akey, 0)
            if healthy >= count:
                continue
            devices = snapshot.get("Devices", node)
            state = "missing" if devices is None else ("present" if node in usable else "refused")
            _, unhealthy, maintenance = usable_accelerators(devices).get(akey, (0, 0, 0)) \
                if devices is not None else (0, 0, 0)
            out.append(Shortfall(node, akey, flavor, count, healthy, unhealthy, state, maintenance))
    return sorted(out, key=lambda s: (s.node, s.flavor))


def pool_flavors(queues: Iterable[dict]) -> dict[str, list[str]]:
    """pool (ClusterQueue = InstanceType name) -> the flavors its ``spec.resourceGroups`` name, in order."""
    return {name_of(q): [f.get("name") for g in (q.get("spec") or {}).get("resourceGroups") or []
                         for f in g.get("flavors") or [] if isinstance(f, dict)] for q in queues}
