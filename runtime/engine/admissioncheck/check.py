"""The ``gpustack-node-devices`` AdmissionCheck: answers for Kueue Workloads
(docs/concepts/pools-and-flavors.md "The AdmissionCheck `gpustack-node-devices`").

Kueue reserves quota for a Workload in a ClusterQueue whose ``admissionChecksStrategy`` names the
check (docs/concepts/pools-and-flavors.md "Queues and the entrance"), records the assigned ResourceFlavor per
resource in ``status.admission.podSetAssignments[].flavors`` and lists the check ``Pending`` in
``status.admissionChecks``. :func:`check_workload` decides whether the managed nodes can really
hold the request now, from their Devices ledgers (docs/agent.md "The Devices object and its ledger"):

* **Candidates** of a PodSet: managed Nodes (rules/pools/derivation.yaml ``managed``, effective
  labels after NodeFeature propagation) whose labels match every assigned flavor's
  ``spec.nodeLabels`` (Kueue injects all of them into the Pod's node selector) and the PodSet
  template's own ``nodeSelector`` and required node affinity, less the closed ones: cordoned, or tainted
  with an effect of rules/pools/queues.yaml ``closedNodes`` that the template does not tolerate
  (:mod:`runtime.engine.pools.closednodes`; a Retry then names them).
* **Demand** of one Pod of the PodSet (``count`` is not multiplied: an Instance is one Pod), from its
  non-sidecar containers' requests (else limits; docs/reference/controller.md "Pod accelerator requests"), by
  family of the shared classifier (:mod:`runtime.model.resourcefamily`): exclusive ``<base>: N`` (app
  containers summed, an init container's own value when larger), shared ``<base>.shared: N`` and sliced
  ``<base>.sliced.units: U`` (the largest single container's, as the Workload fit pin reads them,
  docs/reference/controller.md "Workload fit pin"), partition ``<base>.partitioned.<kind>-<p>``. ``Value()``
  rounds up.
* **Accelerators** considered: the healthy ones of the demanded base's manufacturer, restricted to
  the groups (aKeys) the assigned flavors name in ``acceleratable.feature.gpustack.ai/<aKey>: "true"``
  node labels when they name any.
  * **Feasible** (the section's table,
  predicates of :mod:`runtime.engine.pools.accelerators`): exclusive — N accelerators with ``remaining ≥
  1,600,000``; shared — N distinct whole-capable accelerators in mode 0/2 with ``remaining ≥ 160,000``; sliced
  — one logically sliceable accelerator in mode 0/3 with ``remaining ≥ U`` and a free slice, the fullest such
  (least ``remaining``) preferred, across all candidate nodes; partition — one partitioned accelerator in mode
  0/4 with ``remainingProfiles[p] > 0``. Several demands of one Pod (which the Pod webhook would refuse) must
  each hold on the node. Without accelerator demand any candidate node holds the Pod.
* **Node chosen**: sliced — the node of the fullest accelerator (ties: node name, accelerator index);
  otherwise the first feasible candidate in name order.

The verdict is ``Ready`` when every PodSet has a node, else ``Retry`` (never ``Rejected``: capacity
may free up); messages and the retry delay are rules/pools/queues.yaml ``admissionCheck``
(``readyMessage``, ``retryMessage``, ``retryAfterSeconds``). What a Ready answer places is charged to the
nodes (:func:`charge`) so that the next answers, in the same pass or while its Pod has not started, see it
taken (docs/concepts/out-of-service.md "Promises"). :func:`check_state_apply` turns a verdict
into the server-side apply body of the Workload's ``status`` subresource. Pure: no I/O, no clock
(``now`` is passed in).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Mapping

from runtime.engine.admissioncheck.demand import Demand, node_selected, pod_demand
from runtime.engine.admissioncheck.workloadstatus import READY, RETRY, Placement, Verdict
from runtime.engine.policy import Policy
from runtime.engine.pools.accelerators import (Accelerator, accelerators, exclusive_free, has_free_share,
                                               holds_partition, holds_slice)
from runtime.engine.devices.nodefacts import agent_rules
from runtime.engine.pools.closednodes import closed_reason
from runtime.engine.pools.nodes import node_views
from runtime.engine.snapshot import Snapshot, object_ref


# --- feasibility --------------------------------------------------------------------------------------
def _mine(policy: Policy, accs: list[Accelerator], demand: Demand) -> list[Accelerator]:
    return [a for a in accs if getattr(policy.manufacturers.get(a.manufacturer), "base", None) == demand.base]


def _fit_on_node(policy: Policy, accs: list[Accelerator], demands: list[Demand]) -> tuple[
        bool, tuple[str, ...], int]:
    """(all demands hold on this node's accelerators, accelerator ids used in demand order, sliced
    preference key: the chosen sliced accelerator's remaining, 0 when no sliced demand)."""
    used: list[str] = []
    slice_remaining = 0
    for demand in demands:
        mine = _mine(policy, accs, demand)
        if demand.family == "exclusive":
            hits = [a for a in mine if exclusive_free(policy, a)][:demand.count]
            if len(hits) < demand.count:
                return False, (), 0
        elif demand.family == "shared":
            hits = [a for a in mine if has_free_share(policy, a)][:demand.count]
            if len(hits) < demand.count:
                return False, (), 0
        elif demand.family == "sliced":
            fits = sorted((a for a in mine if holds_slice(policy, a, demand.units)),
                          key=lambda a: (a.remaining, a.index))
            if not fits:
                return False, (), 0
            hits = fits[:1]
            slice_remaining = fits[0].remaining
        else:
            hits = [a for a in mine if holds_partition(policy, a, demand.profile)][:1]
            if not hits:
                return False, (), 0
        used += [a.id for a in hits]
    return True, tuple(used), slice_remaining


def _charged(policy: Policy, a: Accelerator, demand: Demand) -> Accelerator:
    """``a`` once ``demand`` holds one share of it (one accelerator of an exclusive or shared demand)."""
    modes = agent_rules(policy).ledger.modes
    if demand.family == "exclusive":
        return replace(a, mode=modes.exclusive, remaining=0)
    if demand.family == "shared":
        return replace(a, mode=modes.shared, remaining=max(a.remaining - policy.constants.share, 0))
    if demand.family == "sliced":
        return replace(a, mode=modes.sliced, remaining=max(a.remaining - demand.units, 0),
                       allocated_slices=a.allocated_slices + 1)
    left = dict(a.remaining_profiles)
    left[demand.profile] = max(left.get(demand.profile, 0) - 1, 0)
    return replace(a, mode=modes.partitioned, remaining_profiles=left)


@dataclass
class _Nodes:
    """The snapshot's managed nodes: effective labels, Devices accelerators and Node ``spec`` (for the
    closed-node test), built once per call; :func:`charge` takes what a Ready answer placed."""

    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    accelerators: dict[str, list[Accelerator]] = field(default_factory=dict)
    by_label: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    nodes: dict[str, Mapping] = field(default_factory=dict)
    _by_flavor: dict[frozenset, list[str]] = field(default_factory=dict)

    def matching(self, node_labels: Mapping[str, str]) -> list[str]:
        """Names (sorted) of the nodes carrying every label of ``node_labels`` (an inverted index of
        ``(key, value)`` -> nodes, intersected smallest first; memoised per label set)."""
        key = frozenset(node_labels.items())
        if key not in self._by_flavor:
            sets = sorted((self.by_label.get(item, set()) for item in key), key=len)
            found = set(sets[0]).intersection(*sets[1:]) if sets else set(self.labels)
            self._by_flavor[key] = sorted(found)
        return self._by_flavor[key]

    def closed(self, policy: Policy, name: str, tolerations: list) -> str | None:
        """Why node ``name`` takes no Pod with ``tolerations`` (:func:`closed_reason`), or None."""
        node = self.nodes.get(name)
        return None if node is None else closed_reason(policy, node, tolerations)


def _managed_nodes(policy: Policy, snapshot: Snapshot, namespace: str | None = None) -> _Nodes:
    out = _Nodes()
    for view in node_views(policy, snapshot, namespace=namespace):
        if not view.managed:
            continue
        out.labels[view.name] = view.labels
        for item in view.labels.items():
            out.by_label.setdefault(item, set()).add(view.name)
        devices = snapshot.get("Devices", view.name)
        out.accelerators[view.name] = list(accelerators(policy, devices)) if devices else []
        node = snapshot.get("Node", view.name)
        if node is not None:
            out.nodes[view.name] = node
    return out


def charge(policy: Policy, snapshot: Snapshot, nodes: _Nodes, workload: Mapping, verdict: Verdict) -> None:
    """Take what a Ready ``verdict`` for ``workload`` placed off ``nodes``' free accelerators: each
    PodSet's demand on the accelerators its placement names."""
    pod_sets = {(p.get("name") or "main"): p for p in (workload.get("spec") or {}).get("podSets") or []}
    for placement in verdict.placements:
        pod_spec = ((pod_sets.get(placement.pod_set) or {}).get("template") or {}).get("spec") or {}
        ids = list(placement.accelerators)
        accs = nodes.accelerators.get(placement.node, [])
        for demand in pod_demand(policy, pod_spec, object_ref(workload)):
            for _ in range(demand.count if demand.family in ("exclusive", "shared") else 1):
                if not ids:
                    break
                wanted = ids.pop(0)
                accs = [_charged(policy, a, demand) if a.id == wanted else a for a in accs]
        nodes.accelerators[placement.node] = accs


def _pod_set_flavors(workload: Mapping) -> dict[str, dict[str, str]]:
    """PodSet name -> {resource: flavor name} from ``status.admission.podSetAssignments``."""
    admission = (workload.get("status") or {}).get("admission") or {}
    return {a.get("name") or "main": dict(a.get("flavors") or {}) for a in admission.get(
        "podSetAssignments") or []}


def _message_flavor(policy: Policy, flavors: Mapping[str, str], demands: list[Demand]) -> str:
    """The flavor a message names: the one assigned to the demanded manufacturer's credits resource,
    else the first assigned (by resource name)."""
    prefix = policy.prefix("credits")
    for demand in demands:
        for manu in policy.manufacturers.values():
            if manu.base == demand.base and f"{prefix}{manu.id}" in flavors:
                return flavors[f"{prefix}{manu.id}"]
    return flavors[sorted(flavors)[0]] if flavors else ""


def _selection(policy: Policy, snapshot: Snapshot, flavors: Mapping[str, str]) -> tuple[dict, set, bool]:
    """(the ``nodeLabels`` of every assigned flavor, the aKeys they name, whether one is missing)."""
    acc_prefix = policy.prefix("acceleratable")
    node_labels: dict[str, str] = {}
    missing_flavor = False
    for flavor_name in sorted(set(flavors.values())):
        flavor = snapshot.get("ResourceFlavor", flavor_name)
        if flavor is None:
            missing_flavor = True
            continue
        node_labels.update(
            {k: str(v) for k, v in ((flavor.get("spec") or {}).get("nodeLabels") or {}).items()})
    akeys = {k[len(acc_prefix):] for k, v in node_labels.items()
             if k.startswith(acc_prefix) and v == "true" and "." not in k[len(acc_prefix):]
             and "-" in k[len(acc_prefix):]}
    return node_labels, akeys, missing_flavor


def _place(policy: Policy, nodes: _Nodes, node_labels: dict, akeys: set, pod_spec: Mapping, ps_name: str,
           demands: list[Demand]) -> tuple[Placement | None, list[str]]:
    """(where one PodSet fits: the fullest sliced accelerator's node, else the first feasible candidate in
    name order; None when none, the closed candidates' reasons)."""
    best: tuple | None = None
    closed: list[str] = []
    tolerations = list(pod_spec.get("tolerations") or [])
    for node in nodes.matching(node_labels):
        if not node_selected(pod_spec, node, nodes.labels[node]):
            continue
        reason = nodes.closed(policy, node, tolerations)
        if reason is not None:
            closed.append(reason)
            continue
        accs = [a for a in nodes.accelerators[node] if not akeys or a.akey in akeys]
        ok, used, slice_remaining = _fit_on_node(policy, accs, demands)
        if not ok:
            continue
        rank = (slice_remaining, node)
        if best is None or rank < best[0]:
            best = (rank, Placement(ps_name, node, used))
        if not any(d.family == "sliced" for d in demands):
            break
    return (best[1] if best is not None else None), closed


def check_workload(policy: Policy, snapshot: Snapshot, workload: Mapping,
                   nodes: _Nodes | None = None) -> Verdict:
    """The verdict of the ``gpustack-node-devices`` check for ``workload`` (a ``kueue.x-k8s.io/v1beta2``
    Workload with its quota reserved) against ``snapshot`` (Nodes, NodeFeatures, Devices, ResourceFlavors).

    ``nodes``: :func:`managed_nodes` of the snapshot, when several Workloads are judged against one
    snapshot (less what :func:`charge` took). Returns a :class:`Verdict` (``Ready`` or ``Retry``; a Retry
    names the PodSet's closed candidate nodes). Raises :class:`AdmissionCheckError` for a request quantity
    that does not parse.
    """
    rules = policy.queues.admissionCheck
    if nodes is None:
        nodes = _managed_nodes(policy, snapshot)
    assigned = _pod_set_flavors(workload)
    placements: list[Placement] = []
    for pod_set in (workload.get("spec") or {}).get("podSets") or []:
        ps_name = pod_set.get("name") or "main"
        pod_spec = ((pod_set.get("template") or {}).get("spec")) or {}
        demands = pod_demand(policy, pod_spec, f"{object_ref(workload)} podSet {ps_name!r}")
        flavors = assigned.get(ps_name, {})
        node_labels, akeys, missing_flavor = _selection(policy, snapshot, flavors)
        placement, closed = (None, []) if missing_flavor else _place(
            policy, nodes, node_labels, akeys, pod_spec, ps_name, demands)
        if placement is None:
            flavor = _message_flavor(policy, flavors, demands)
            message = str(rules.retryMessage.evaluate({"flavor": flavor, "podSet": ps_name,
                                                       "closed": "; ".join(closed)}))
            return Verdict(RETRY, message, flavor=flavor, pod_set=ps_name,
                           requeue_after_seconds=rules.retryAfterSeconds)
        placements.append(placement)
    if not placements:
        return Verdict(RETRY, str(rules.retryMessage.evaluate({"flavor": "", "podSet": "", "closed": ""})),
                       requeue_after_seconds=rules.retryAfterSeconds)
    message = str(rules.readyMessage.evaluate({"node": placements[0].node,
                                               "nodes": [p.node for p in placements],
                                               "podSet": placements[0].pod_set}))
    return Verdict(READY, message, placements=tuple(placements))


def managed_nodes(policy: Policy, snapshot: Snapshot, namespace: str | None = None) -> _Nodes:
    """The managed nodes' effective labels and accelerators, for :func:`check_workload`'s ``nodes``.
    ``namespace``: the system namespace whose NodeFeatures count (decision 20; None: the rules')."""
    return _managed_nodes(policy, snapshot, namespace)


def flavor_that_holds(policy: Policy, snapshot: Snapshot, workload: Mapping, verdict: Verdict,
                      nodes: _Nodes | None = None) -> tuple[str, str] | None:
    """For a ``Retry`` ``verdict`` on ``workload``: ``(flavor, node)`` for the first other flavor of its
    ClusterQueue (``status.admission.clusterQueue``, in the queue's order) on which the check would
    answer Ready, with that node; None when no other flavor would (or the verdict is not a Retry).

    The loop Kueue cannot leave by itself (docs/concepts/instances.md, "Pinned to a node"): the
    Workload's placement does not tell Kueue's flavor assigner which flavor holds a node that can take
    it, so it is given the same flavor after every eviction.
    """
    if verdict.state != RETRY or not verdict.flavor:
        return None
    queue = snapshot.get("ClusterQueue",
                         ((workload.get("status") or {}).get("admission") or {}).get("clusterQueue", ""))
    if queue is None:
        return None
    if nodes is None:
        nodes = _managed_nodes(policy, snapshot)
    for group in (queue.get("spec") or {}).get("resourceGroups") or []:
        for ref in group.get("flavors") or []:
            other = ref.get("name", "")
            if other == verdict.flavor or snapshot.get("ResourceFlavor", other) is None:
                continue
            moved = copy.deepcopy(dict(workload))
            for assignment in moved["status"]["admission"].get("podSetAssignments") or []:
                assignment["flavors"] = {resource: (other if flavor == verdict.flavor else flavor)
                                         for resource, flavor in (assignment.get("flavors") or {}).items()}
            answer = check_workload(policy, snapshot, moved, nodes)
            if answer.state == READY and answer.placements:
                return other, answer.placements[0].node
    return None
