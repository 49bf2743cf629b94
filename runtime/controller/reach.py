"""Pools that cannot keep what they promise, live: Events and metrics, each pass (docs/audit.md).

After every derive the controller asks :class:`ReachWatch` for the pool findings of
:func:`runtime.report.reach.pool_findings` (the audit's rule ``pool-reach``: a flavor whose
``spec.nodeLabels`` select fewer of its contributing Nodes than contribute; a node whose labels count
more accelerators than its Devices can use). A finding that appears or whose message changes is a
Warning Event on the pool's InstanceType (``flavorSelectsTooFewNodes`` / ``acceleratorsUnusable`` of
rules/controller.yaml ``events``); one that goes away, a Normal Event (``flavorSelectsItsNodes`` /
``acceleratorsUsable``). Findings that hold when the process starts are reported by its first pass.

:class:`ReachCollector` publishes the last pass's figures at scrape time (labels are ResourceFlavor,
InstanceType and rule names, never a Node):

* ``accelpolicy_resourceflavor_nodes{resourceflavor}``: the nodes contributing to a derived flavor;
* ``accelpolicy_resourceflavor_selected_nodes{resourceflavor}``: of them, those whose Node carries the
  flavor's ``spec.nodeLabels`` (what the scheduler can use);
* ``accelpolicy_resourceflavor_accelerators{resourceflavor,source}``: a device flavor's accelerators as its
  nodes' labels count them (``source="labels"``) and as their Devices can use them (``source="devices"``,
  what its quota counts);
* ``accelpolicy_instancetype_reach_findings{instancetype,rule}``: the pool's current findings per rule.
"""
from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Callable

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from runtime.controller.transitions import state_event
from runtime.engine.policy import Policy
from runtime.engine.pools import DesiredState
from runtime.engine.pools.reach import FlavorReach
from runtime.engine.snapshot import Snapshot, name_of
from runtime.report.reach import PoolFinding, flavor_reaches, pool_findings, reach_spec


class ReachWatch:
    """The last pass's findings and per-flavor figures; :meth:`update` each pass returns its Events."""

    def __init__(self) -> None:
        self.findings: dict[tuple, PoolFinding] = {}
        self.reaches: dict[str, FlavorReach] = {}
        self.accelerators: dict[str, tuple[int, int]] = {}
        self._key: tuple | None = None  # what the reaches were computed from (the Node map, the flavors)

    def _reaches(self, snapshot: Snapshot, state: DesiredState) -> dict[str, FlavorReach]:
        """:func:`runtime.report.reach.flavor_reaches`, kept while the Nodes, the flavors and the nodes'
        contributions are the same (an idle pass reads nothing again)."""
        key = (id(snapshot.objects.get("Node")), tuple(id(f) for f in state.resource_flavors))
        if self._key is None or key != self._key[0] or state.node_flavors != self._key[1]:
            self.reaches = flavor_reaches(snapshot, state)
            self._key = (key, state.node_flavors, snapshot.objects.get("Node"), state.resource_flavors)
        return self.reaches

    def update(self, policy: Policy, snapshot: Snapshot, state: DesiredState, now: datetime) -> list[dict]:
        """Record this pass (``state`` derived from ``snapshot`` at ``now``) and return the Events of the
        findings that appeared, changed or went away since the last one (see the module docstring)."""
        findings = {f.key: f for f in pool_findings(policy, snapshot, state, self._reaches(snapshot, state))}
        before, self.findings = self.findings, findings
        self.accelerators = dict(state.flavor_accelerators)
        if before == findings:  # the common pass
            return []
        templates, spec = policy.controller.events, reach_spec(policy)
        if spec is None:  # rules without an AuditPolicy (a reload dropped it): nothing to word
            return []
        raised = {spec.unselected.rule: templates.flavorSelectsTooFewNodes,
                  spec.unusable.rule: templates.acceleratorsUnusable}
        cleared = {spec.unselected.rule: templates.flavorSelectsItsNodes,
                   spec.unusable.rule: templates.acceleratorsUsable}
        types = {name_of(it): it for it in state.instance_types}
        out = []
        for key in sorted(set(before) | set(findings)):
            new, old = findings.get(key), before.get(key)
            if new is not None and (old is None or old.message != new.message):
                finding, template, extra = new, raised[new.rule], {"message": new.message}
            elif new is None:
                finding, template, extra = old, cleared[old.rule], {}
            else:
                continue
            it = snapshot.get("InstanceType", finding.pool) or types.get(finding.pool)
            if it is None:
                continue
            variables = {"pool": finding.pool, "flavor": finding.flavor, **extra}
            if finding.node:
                variables["node"] = finding.node
            out.append(state_event(template, it, "InstanceType", now + timedelta(microseconds=len(out)),
                                   **variables))
        return out


class ReachCollector(Collector):
    """The figures of the last pass of ``watch()`` (a :class:`ReachWatch`, or None before a controller
    is bound), read at scrape time."""

    def __init__(self, watch: Callable[[], ReachWatch | None]):
        self.watch = watch

    def describe(self):
        return self._families()

    @staticmethod
    def _families() -> list[GaugeMetricFamily]:
        return [
            GaugeMetricFamily("accelpolicy_resourceflavor_nodes",
                              "Nodes contributing to a derived ResourceFlavor", labels=["resourceflavor"]),
            GaugeMetricFamily("accelpolicy_resourceflavor_selected_nodes",
                              "Contributing Nodes that carry the ResourceFlavor's spec.nodeLabels (the ones "
                              "the "
                              "scheduler can place its Pods on)", labels=["resourceflavor"]),
            GaugeMetricFamily("accelpolicy_resourceflavor_accelerators",
                              "Accelerators of a device ResourceFlavor: source=labels as its nodes' labels "
                              "count them, source=devices as their Devices can use them (its quota)",
                              labels=["resourceflavor", "source"]),
            GaugeMetricFamily("accelpolicy_instancetype_reach_findings",
                              "Findings of the audit rule pool-reach on a pool now (a flavor selecting too "
                              "few of its nodes, accelerators its Devices cannot use), by rule",
                              labels=["instancetype", "rule"]),
        ]

    def collect(self):
        nodes, selected, accelerators, findings = families = self._families()
        watch = self.watch()
        if watch is None:
            return families
        for name, reach in watch.reaches.items():
            nodes.add_metric([name], len(reach.nodes))
            selected.add_metric([name], reach.selected)
        for name, (labelled, usable) in watch.accelerators.items():
            accelerators.add_metric([name, "labels"], labelled)
            accelerators.add_metric([name, "devices"], usable)
        for (pool, rule), count in sorted(Counter((f.pool, f.rule) for f in watch.findings.values()).items()):
            findings.add_metric([pool, rule], count)
        return families
