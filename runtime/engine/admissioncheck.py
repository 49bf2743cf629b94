"""The ``gpustack-node-devices`` AdmissionCheck: answers for Kueue Workloads (spec/pools.md §8.2).

Kueue reserves quota for a Workload in a ClusterQueue whose ``admissionChecksStrategy`` names the
check (§7.3), records the assigned ResourceFlavor per resource in
``status.admission.podSetAssignments[].flavors`` and lists the check ``Pending`` in
``status.admissionChecks``. :func:`check_workload` decides whether the managed nodes can really
hold the request now, from their Devices ledgers (spec/node-facts.md §7.3):

* **Candidates** of a PodSet: managed Nodes (rules/pools/derivation.yaml ``managed``, effective
  labels after NodeFeature propagation) whose labels match every assigned flavor's
  ``spec.nodeLabels`` (Kueue injects all of them into the Pod's node selector) and the PodSet
  template's own ``nodeSelector`` and required node affinity. Taints and tolerations are not read.
* **Demand** of one Pod of the PodSet (``count`` is not multiplied: an Instance is one Pod), from its
  non-sidecar containers' requests (else limits; pod-requests.md §4), by family of the shared
  classifier (:mod:`runtime.engine.resourcekeys`): exclusive ``<base>: N`` (app containers summed,
  an init container's own value when larger), shared ``<base>.shared: N`` and sliced
  ``<base>.sliced.units: U`` (the largest single container's, as the Workload fit pin reads them,
  pod-requests.md §9), partition ``<base>.partitioned.<kind>-<p>``. ``Value()`` rounds up.
* **Accelerators** considered: the healthy ones of the demanded base's manufacturer, restricted to
  the groups (aKeys) the assigned flavors name in ``acceleratable.feature.gpustack.ai/<aKey>: "true"``
  node labels when they name any.
* **Feasible** (the §8.2 table, predicates of :mod:`runtime.engine.accelerators`): exclusive — N
  accelerators with ``remaining ≥ 1,600,000``; shared — N distinct whole-capable accelerators in mode
  0/2 with ``remaining ≥ 160,000``; sliced — one logically sliceable accelerator in mode 0/3 with
  ``remaining ≥ U`` and a free slice, the fullest such (least ``remaining``) preferred, across all
  candidate nodes; partition — one partitioned accelerator in mode 0/4 with ``remainingProfiles[p] >
  0``. Several demands of one Pod (which the Pod webhook would refuse) must each hold on the node.
  Without accelerator demand any candidate node holds the Pod.
* **Node chosen**: sliced — the node of the fullest accelerator (ties: node name, accelerator index);
  otherwise the first feasible candidate in name order.

The verdict is ``Ready`` when every PodSet has a node, else ``Retry`` (never ``Rejected``: capacity
may free up); messages and the retry delay are rules/pools/derivation.yaml ``admissionCheck``
(``readyMessage``, ``retryMessage``, ``retryAfterSeconds``). :func:`check_state_apply` turns a verdict
into the server-side apply body of the Workload's ``status`` subresource. Pure: no I/O, no clock
(``now`` is passed in).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Mapping

from runtime.engine.accelerators import (Accelerator, accelerators, exclusive_free, has_free_share,
                                         holds_partition, holds_slice)
from runtime.engine.nodefacts import agent_rules
from runtime.engine.nodes import node_views
from runtime.engine.normalize import QuantityError, parse_quantity
from runtime.engine.policy import Policy
from runtime.engine.resourcekeys import classifier_manufacturers, classifier_table, resource_family
from runtime.engine.snapshot import Snapshot, name_of, object_ref

# Kueue v1beta2 API terms (kueue.x-k8s.io/v1beta2 Workload): check states and condition types.
PENDING, READY, RETRY = "Pending", "Ready", "Retry"
QUOTA_RESERVED, EVICTED, FINISHED = "QuotaReserved", "Evicted", "Finished"
WORKLOAD_API = "kueue.x-k8s.io/v1beta2"


class AdmissionCheckError(ValueError):
    """A Workload this check cannot read (e.g. a request quantity that does not parse); the message
    names the Workload, PodSet, container and key."""


@dataclass(frozen=True)
class Demand:
    """One accelerator demand of one Pod: ``family`` (exclusive, shared, sliced, partitioned), the
    ``base`` resource (``nvidia.com/gpu``), ``count`` (exclusive/shared N), ``units`` (sliced U, 0 when
    the webhook has not written them) and ``profile`` (partition, published spelling)."""

    family: str
    base: str
    count: int = 0
    units: int = 0
    profile: str = ""


@dataclass(frozen=True)
class Placement:
    """Where one PodSet fits: ``node`` and the accelerator ids that hold its demand (in order)."""

    pod_set: str
    node: str
    accelerators: tuple[str, ...] = ()


@dataclass(frozen=True)
class Verdict:
    """The answer for one Workload: ``state`` ``Ready`` or ``Retry``, the rendered ``message``,
    ``placements`` (one per PodSet when Ready), ``flavor``/``pod_set`` of the first PodSet that does
    not fit (Retry), ``requeue_after_seconds`` (Retry only, rules ``retryAfterSeconds``)."""

    state: str
    message: str
    placements: tuple[Placement, ...] = ()
    flavor: str = ""
    pod_set: str = ""
    requeue_after_seconds: int | None = None


# --- which Workloads are ours to answer ------------------------------------------------------------------
def _condition_true(workload: Mapping, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in (workload.get("status") or {}).get("conditions") or [])


def check_entry(policy: Policy, workload: Mapping) -> dict | None:
    """The Workload's ``status.admissionChecks`` entry of this check (rules ``admissionCheck.name``)."""
    name = policy.derivation.admissionCheck.name
    for entry in (workload.get("status") or {}).get("admissionChecks") or []:
        if entry.get("name") == name:
            return entry
    return None


def quota_reserved(workload: Mapping) -> bool:
    """Kueue holds quota for it: condition ``QuotaReserved`` True, ``status.admission`` set, and it is
    neither ``Evicted`` nor ``Finished`` (Kueue's own check controllers skip those too)."""
    return bool((workload.get("status") or {}).get("admission")) and _condition_true(workload, QUOTA_RESERVED) \
        and not _condition_true(workload, EVICTED) and not _condition_true(workload, FINISHED)


def parse_time(text: str | None) -> datetime | None:
    """RFC 3339 ``2026-11-29T21:00:00Z`` -> aware datetime; None when absent or unreadable."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None


def format_time(now: datetime) -> str:
    """Aware datetime -> RFC 3339 seconds in UTC (``metav1.Time``'s serialization)."""
    return now.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def seconds_until_due(policy: Policy, workload: Mapping, now: datetime) -> float | None:
    """When this Workload wants an answer: ``0`` now (check ``Pending``, or ``Retry`` for at least
    ``retryAfterSeconds`` while Kueue still holds the quota), the seconds left of a younger ``Retry``,
    or None (no entry, answered ``Ready``, no quota reservation)."""
    entry = check_entry(policy, workload)
    if entry is None or not quota_reserved(workload):
        return None
    state = entry.get("state")
    if state == PENDING:
        return 0.0
    if state == RETRY:
        since = parse_time(entry.get("lastTransitionTime"))
        if since is None:
            return 0.0
        left = since.timestamp() + policy.derivation.admissionCheck.retryAfterSeconds - now.timestamp()
        return max(left, 0.0)
    return None


# --- demand -------------------------------------------------------------------------------------------
def _value(raw: Any) -> int:
    """``Value()`` of a quantity: rounded up to an integer (pod-requests.md §4)."""
    return int(math.ceil(parse_quantity(raw)))


def _classifier(policy: Policy):
    cache = policy.__dict__.setdefault("_admissioncheck_classifier", [])
    if not cache:
        table = classifier_table(policy, agent_rules(policy).podResources.resourceKeysParams)
        cache.append((table, classifier_manufacturers(policy)))
    return cache[0]


def pod_demand(policy: Policy, pod_spec: Mapping, where: str = "") -> list[Demand]:
    """The accelerator demands of one Pod ``spec`` (see the module docstring), sorted by family and
    base. Raises :class:`AdmissionCheckError` naming ``where``, the container and key when a value does
    not parse."""
    table, manufacturers = _classifier(policy)
    units_key = agent_rules(policy).capacity.slicedUnits  # "{base}.sliced.units" (rules/agent.yaml)
    init = [c for c in pod_spec.get("initContainers") or [] if c.get("restartPolicy") != "Always"]
    app = list(pod_spec.get("containers") or [])
    exclusive_app: dict[str, int] = {}
    exclusive_init: dict[str, int] = {}
    shared: dict[str, int] = {}
    units: dict[str, int] = {}
    profiles: dict[str, str] = {}
    for group, containers in (("init", init), ("app", app)):
        for container in containers:
            resources = container.get("resources") or {}
            values = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
            for key in sorted(values):
                cls = resource_family(key, table, manufacturers)
                family, base = cls["family"], cls["base"]
                if family not in ("exclusive", "shared", "sliced", "partitioned"):
                    continue
                try:
                    value = _value(values[key])
                except QuantityError as exc:
                    raise AdmissionCheckError(f"{where} container {container.get('name')!r} "
                                              f"resources[{key}]: {exc}") from None
                if family == "exclusive":
                    target = exclusive_app if group == "app" else exclusive_init
                    target[base] = target.get(base, 0) + value if group == "app" else max(target.get(base, 0), value)
                elif family == "shared":  # the family's one key, <base>.shared
                    shared[base] = max(shared.get(base, 0), value)
                elif family == "sliced":
                    units.setdefault(base, 0)
                    if key == units_key.format(base=base):
                        units[base] = max(units[base], value)
                elif family == "partitioned" and cls["profile"]:
                    profiles[base] = cls["profile"]
    out = [Demand("exclusive", b, count=max(exclusive_app.get(b, 0), exclusive_init.get(b, 0)))
           for b in sorted(set(exclusive_app) | set(exclusive_init))]
    out += [Demand("partitioned", b, count=1, profile=p) for b, p in sorted(profiles.items())]
    out += [Demand("shared", b, count=n) for b, n in sorted(shared.items())]
    out += [Demand("sliced", b, units=u) for b, u in sorted(units.items())]
    return [d for d in out if d.count > 0 or d.family == "sliced"]


# --- node matching ------------------------------------------------------------------------------------
def _requirement_holds(req: Mapping, value: str | None) -> bool:
    op, values = req.get("operator"), [str(v) for v in req.get("values") or []]
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            have, want = int(value), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def node_selected(pod_spec: Mapping, node_name: str, labels: Mapping[str, str]) -> bool:
    """The Pod's ``nodeSelector`` and required node affinity (``nodeSelectorTerms`` ORed; within a
    term ``matchExpressions`` and ``matchFields`` on ``metadata.name`` ANDed) hold for the node —
    the scheduler's NodeAffinity rules."""
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(key) != str(value):
            return False
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms")
    if not required or terms is None:
        return True
    for term in terms:
        exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
        if not exprs and not fields:
            continue  # an empty term matches nothing
        if all(_requirement_holds(r, labels.get(r.get("key"))) for r in exprs) and \
                all(_requirement_holds(r, node_name if r.get("key") == "metadata.name" else None) for r in fields):
            return True
    return False


# --- feasibility --------------------------------------------------------------------------------------
def _fit_on_node(policy: Policy, accs: list[Accelerator], demands: list[Demand]) -> tuple[bool, tuple[str, ...], int]:
    """(all demands hold on this node's accelerators, accelerator ids used, sliced preference key: the
    chosen sliced accelerator's remaining, 0 when no sliced demand)."""
    used: list[str] = []
    slice_remaining = 0
    for demand in demands:
        mine = [a for a in accs if getattr(policy.manufacturers.get(a.manufacturer), "base", None) == demand.base]
        if demand.family == "exclusive":
            hits = [a for a in mine if exclusive_free(policy, a)][:demand.count]
            if len(hits) < demand.count:
                return False, (), 0
        elif demand.family == "shared":
            hits = [a for a in mine if has_free_share(policy, a)][:demand.count]
            if len(hits) < demand.count:
                return False, (), 0
        elif demand.family == "sliced":
            fits = sorted((a for a in mine if holds_slice(policy, a, demand.units)), key=lambda a: (a.remaining, a.index))
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


@dataclass
class _Nodes:
    """The snapshot's managed nodes: effective labels and Devices accelerators, built once per call."""

    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    accelerators: dict[str, list[Accelerator]] = field(default_factory=dict)
    by_label: dict[tuple[str, str], set[str]] = field(default_factory=dict)
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


def _managed_nodes(policy: Policy, snapshot: Snapshot) -> _Nodes:
    out = _Nodes()
    for view in node_views(policy, snapshot):
        if not view.managed:
            continue
        out.labels[view.name] = view.labels
        for item in view.labels.items():
            out.by_label.setdefault(item, set()).add(view.name)
        devices = snapshot.get("Devices", view.name)
        out.accelerators[view.name] = list(accelerators(policy, devices)) if devices else []
    return out


def _pod_set_flavors(workload: Mapping) -> dict[str, dict[str, str]]:
    """PodSet name -> {resource: flavor name} from ``status.admission.podSetAssignments``."""
    admission = (workload.get("status") or {}).get("admission") or {}
    return {a.get("name") or "main": dict(a.get("flavors") or {}) for a in admission.get("podSetAssignments") or []}


def _message_flavor(policy: Policy, flavors: Mapping[str, str], demands: list[Demand]) -> str:
    """The flavor a message names: the one assigned to the demanded manufacturer's credits resource,
    else the first assigned (by resource name)."""
    prefix = policy.derivation.clusterQueue.creditsResourcePrefix
    for demand in demands:
        for manu in policy.manufacturers.values():
            if manu.base == demand.base and f"{prefix}{manu.id}" in flavors:
                return flavors[f"{prefix}{manu.id}"]
    return flavors[sorted(flavors)[0]] if flavors else ""


def check_workload(policy: Policy, snapshot: Snapshot, workload: Mapping, nodes: _Nodes | None = None) -> Verdict:
    """The §8.2 verdict for ``workload`` (a ``kueue.x-k8s.io/v1beta2`` Workload with its quota reserved)
    against ``snapshot`` (Nodes, NodeFeatures, Devices, ResourceFlavors).

    ``nodes``: :func:`managed_nodes` of the snapshot, when several Workloads are judged against one
    snapshot. Returns a :class:`Verdict` (``Ready`` or ``Retry``). Raises :class:`AdmissionCheckError`
    for a request quantity that does not parse.
    """
    rules = policy.derivation.admissionCheck
    if nodes is None:
        nodes = _managed_nodes(policy, snapshot)
    acc_prefix = policy.prefix("acceleratable")
    assigned = _pod_set_flavors(workload)
    placements: list[Placement] = []
    for pod_set in (workload.get("spec") or {}).get("podSets") or []:
        ps_name = pod_set.get("name") or "main"
        pod_spec = ((pod_set.get("template") or {}).get("spec")) or {}
        demands = pod_demand(policy, pod_spec, f"{object_ref(workload)} podSet {ps_name!r}")
        flavors = assigned.get(ps_name, {})
        node_labels: dict[str, str] = {}
        missing_flavor = False
        for flavor_name in sorted(set(flavors.values())):
            flavor = snapshot.get("ResourceFlavor", flavor_name)
            if flavor is None:
                missing_flavor = True
                continue
            node_labels.update({k: str(v) for k, v in ((flavor.get("spec") or {}).get("nodeLabels") or {}).items()})
        akeys = {k[len(acc_prefix):] for k, v in node_labels.items()
                 if k.startswith(acc_prefix) and v == "true" and "." not in k[len(acc_prefix):]
                 and "-" in k[len(acc_prefix):]}
        best: tuple | None = None
        if not missing_flavor:
            for node in nodes.matching(node_labels):
                if not node_selected(pod_spec, node, nodes.labels[node]):
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
        if best is None:
            flavor = _message_flavor(policy, flavors, demands)
            message = str(rules.retryMessage.evaluate({"flavor": flavor, "podSet": ps_name}))
            return Verdict(RETRY, message, flavor=flavor, pod_set=ps_name,
                           requeue_after_seconds=rules.retryAfterSeconds)
        placements.append(best[1])
    if not placements:
        return Verdict(RETRY, str(rules.retryMessage.evaluate({"flavor": "", "podSet": ""})),
                       requeue_after_seconds=rules.retryAfterSeconds)
    message = str(rules.readyMessage.evaluate({"node": placements[0].node, "nodes": [p.node for p in placements],
                                               "podSet": placements[0].pod_set}))
    return Verdict(READY, message, placements=tuple(placements))


def managed_nodes(policy: Policy, snapshot: Snapshot) -> _Nodes:
    """The managed nodes' effective labels and accelerators, for :func:`check_workload`'s ``nodes``."""
    return _managed_nodes(policy, snapshot)


# --- the status write -----------------------------------------------------------------------------------
def check_state_apply(policy: Policy, workload: Mapping, verdict: Verdict, now: datetime) -> dict | None:
    """The server-side apply body for the Workload's ``status`` subresource, or None when the entry
    already has this state and message (idempotence).

    Shape (Kueue's ``workload.SetAdmissionCheckState`` + ``BaseSSAWorkload``, applied with field
    manager = the check's ``controllerName``, force)::

        {apiVersion: kueue.x-k8s.io/v1beta2, kind: Workload,
         metadata: {name, namespace, uid},
         status: {admissionChecks: [{name, state, message, lastTransitionTime[, requeueAfterSeconds]}]}}

    ``lastTransitionTime`` is ``now`` when the state changes, else the entry's own. Only this check's
    entry is sent: ``admissionChecks`` is a list-map keyed by ``name``, so server-side apply merges it
    and leaves the other checks' entries to their controllers. ``uid`` makes the server refuse the
    write should the Workload have been replaced meanwhile.
    """
    entry = check_entry(policy, workload) or {}
    rules = policy.derivation.admissionCheck
    changed_state = entry.get("state") != verdict.state
    if not changed_state and entry.get("message") == verdict.message:
        return None  # requeueAfterSeconds is not compared: Kueue carries it over when it resets a check
    since = format_time(now) if changed_state or not entry.get("lastTransitionTime") else entry["lastTransitionTime"]
    state: dict[str, Any] = {"name": rules.name, "state": verdict.state, "message": verdict.message,
                             "lastTransitionTime": since}
    if verdict.requeue_after_seconds is not None:
        state["requeueAfterSeconds"] = verdict.requeue_after_seconds
    meta = workload.get("metadata") or {}
    metadata = {"name": name_of(workload), "namespace": meta.get("namespace") or ""}
    if meta.get("uid"):
        metadata["uid"] = meta["uid"]
    return {"apiVersion": WORKLOAD_API, "kind": "Workload", "metadata": metadata,
            "status": {"admissionChecks": [state]}}
