"""Pools that cannot keep what they promise, in the words of rules/audit.yaml ``reach`` (docs/audit.md).

The facts come from :mod:`runtime.engine.pools.reach` (a derived flavor whose ``spec.nodeLabels`` select
fewer of its contributing Nodes than contribute; a node whose labels count more accelerators than its
Devices can use). This module words them once for the three readers:

* ``accelpolicy audit`` (:func:`pool_findings` -> results of policy ``reach.policy``, one per pool and
  flavor, or pool, flavor and node, on the pool's InstanceType);
* the controller (the same findings as Events on the InstanceType and as metrics,
  :mod:`runtime.controller.reach`);
* ``accelpolicy explain instancetype`` (:func:`node_lines`: per node of the pool, whether its labels are
  applied and how many of its accelerators its Devices can use).
"""
from __future__ import annotations

from dataclasses import dataclass

from runtime.engine.policy import Policy
from runtime.engine.pools import DesiredState
from runtime.engine.pools.reach import FlavorReach, Shortfall, flavor_reach, pool_flavors
from runtime.engine.snapshot import Snapshot, name_of
from runtime.model.audit import ReachSpec


@dataclass(frozen=True)
class PoolFinding:
    """One pool that cannot keep a promise: ``rule`` (``reach.unselected.rule`` or
    ``reach.unusable.rule``), ``result`` kind, ``message``; ``flavor``; ``node`` ("" for a flavor
    finding); ``key``: what stays the same while the finding lasts (pool, rule, flavor, node)."""

    pool: str
    rule: str
    result: str
    flavor: str
    node: str
    message: str

    @property
    def key(self) -> tuple[str, str, str, str]:
        return self.pool, self.rule, self.flavor, self.node


def reach_spec(policy: Policy) -> ReachSpec | None:
    """rules/audit.yaml ``reach``; None when the rules hold no AuditPolicy (it is not a required kind:
    then nothing is reported, and the controller's reconcile goes on)."""
    try:
        return policy.ruleset.get("AuditPolicy").reach
    except KeyError:
        return None


def pairs_text(pairs) -> str:
    """``key=value, key=value`` of ``(key, value)`` pairs."""
    return ", ".join(f"{k}={v}" for k, v in pairs)


def missing_text(spec: ReachSpec, reach: FlavorReach) -> str:
    """``nodeLacks`` for each contributor whose Node lacks labels, ``; ``-joined (node order)."""
    return "; ".join(spec.unselected.nodeLacks.format(node=node, pairs=pairs_text(reach.missing[node]))
                     for node in sorted(reach.missing))


def why_text(spec: ReachSpec, shortfall: Shortfall) -> str:
    """Why the node's Devices can use fewer accelerators than its labels count (``reach.why``)."""
    if shortfall.devices == "present":
        parts = [spec.why.present.format(unhealthy=shortfall.unhealthy)] \
            if shortfall.unhealthy or not shortfall.maintenance else []
        if shortfall.maintenance:
            parts.append(spec.why.maintenance.format(maintenance=shortfall.maintenance))
        return ", ".join(parts)
    return spec.why.missing if shortfall.devices == "missing" else spec.why.refused


def flavor_reaches(snapshot: Snapshot, desired: DesiredState) -> dict[str, FlavorReach]:
    """:func:`runtime.engine.pools.reach.flavor_reach` of ``desired``'s flavors against ``snapshot``'s
    Nodes."""
    return flavor_reach(snapshot, desired.resource_flavors, desired.node_flavors)


def pool_findings(policy: Policy, snapshot: Snapshot, desired: DesiredState,
                  reaches: dict[str, FlavorReach] | None = None) -> list[PoolFinding]:
    """Every finding of every pool (InstanceType with a ClusterQueue in ``desired``), pool then flavor
    then node order ([] without an AuditPolicy). ``reaches``: :func:`flavor_reaches` when the caller already
    has it."""
    spec = reach_spec(policy)
    if spec is None:
        return []
    reaches = flavor_reaches(snapshot, desired) if reaches is None else reaches
    short: dict[str, list[Shortfall]] = {}
    for shortfall in desired.shortfalls:
        short.setdefault(shortfall.flavor, []).append(shortfall)
    out = []
    for pool, flavors in sorted(pool_flavors(desired.cluster_queues).items()):
        for flavor in flavors:
            reach = reaches.get(flavor)
            if reach is not None and reach.missing:
                finding = spec.unselected.none if reach.selected == 0 else spec.unselected.some
                out.append(PoolFinding(pool, spec.unselected.rule, finding.result, flavor, "",
                                       finding.message.format(
                    pool=pool, flavor=flavor, selected=reach.selected, nodes=len(reach.nodes),
                    missing=missing_text(spec, reach))))
            for s in short.get(flavor, ()):
                finding = spec.unusable.finding
                out.append(PoolFinding(pool, spec.unusable.rule, finding.result, flavor, s.node,
                                       finding.message.format(
                    pool=pool, flavor=flavor, node=s.node, akey=s.akey, labelled=s.labelled, usable=s.usable,
                    why=why_text(spec, s))))
    return out


def node_lines(policy: Policy, snapshot: Snapshot, desired: DesiredState,
               flavors: list[str]) -> dict[str, str]:
    """node -> ``explain``'s line for each contributor of ``flavors``: its labels applied (or the
    ``key=value`` pairs its Node lacks, over all those flavors) and, where its Devices can use fewer
    accelerators than its labels count, how many."""
    spec = reach_spec(policy)
    if spec is None:
        return {}
    reaches = flavor_reaches(snapshot, desired)
    lacks: dict[str, dict[str, str]] = {}
    for flavor in flavors:
        reach = reaches.get(flavor)
        for node in reach.nodes if reach else ():
            lacks.setdefault(node, {}).update(reach.missing.get(node, ()))
    lines = {node: (spec.explain.notApplied.format(missing=pairs_text(sorted(pairs.items()))) if pairs
                    else spec.explain.applied) for node, pairs in lacks.items()}
    for s in desired.shortfalls:
        if s.flavor in flavors and s.node in lines:
            lines[s.node] += "; " + spec.explain.accelerators.format(akey=s.akey, labelled=s.labelled,
                                                                     usable=s.usable, why=why_text(spec, s))
    return dict(sorted(lines.items()))


def flavor_names(desired: DesiredState, pool: str) -> list[str]:
    """The flavors the ClusterQueue of ``pool`` names in ``desired`` ([] without one)."""
    return pool_flavors([q for q in desired.cluster_queues if name_of(q) == pool]).get(pool, [])
