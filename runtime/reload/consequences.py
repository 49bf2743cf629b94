"""What a rules generation would do to the pools and the work on them, computed before it serves, and
whether that holds it (docs/rule-authoring.md "How a rules change goes live").

:func:`consequences` derives the pools (:func:`runtime.engine.pools.derive`) of one cluster snapshot
under the serving policy and under the new one, plans the controller's writes under each
(:func:`runtime.engine.plan.plan`) and reports, as :class:`Consequences`:

- ``pool_objects``: the pool objects it creates, changes (field by field) or deletes
  (:func:`pool_changes`: ResourceFlavors, ClusterQueues with their flavors and quota, InstanceTypes,
  LocalQueues, the catalog);
- ``capacity``: the capacity each pool loses in each view (:class:`CapacityLoss`);
- ``emptied``: the pools that lose every flavor. Such a pool is not drained (its ClusterQueue is marked,
  :func:`mark_emptied`, and keeps its groups under ``Hold``: docs/concepts/pools-and-flavors.md "Queues
  and the entrance"), so what follows is derived with that mark;
- ``evicted``: admitted Workloads of a queue it drains (``HoldAndDrain``) or deletes;
- ``flavors_in_use``: ResourceFlavors it deletes that admitted Workloads use;
- ``stopped``: Instances it would stop (their type gone or its queue draining).

:func:`hold_reasons` turns them, the verdict changes of the trial and the ``hold`` settings of the
**serving** generation (rules/reload.yaml) into the reasons a generation is held; a revert to the
serving generation's parent is never held (the caller skips it). Pure.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Optional

from runtime.engine.plan import plan
from runtime.engine.policy import Policy
from runtime.engine.pools import DesiredState, derive
from runtime.engine.snapshot import Snapshot, is_deleting, name_of
from runtime.model.normalize import parse_quantity

POOL_KINDS = ("ResourceFlavor", "AdmissionCheck", "InstanceType", "ClusterQueue", "LocalQueue",
              "InstanceTypeFlavor")
_WRITES = {"create": "created", "delete": "deleted"}


@dataclass(frozen=True)
class CapacityLoss:
    """``pool`` (an InstanceType) loses capacity in ``view`` (``accelerator``, ``acceleratorShared``,
    ``acceleratorSliced``, ``acceleratorPartitioned``, ``cpu``: its status field) from ``before`` to
    ``after`` (in that view's units)."""

    pool: str
    view: str
    before: Decimal
    after: Decimal

    @property
    def percent(self) -> float:
        """The share removed, 0-100."""
        return float((self.before - self.after) * 100 / self.before) if self.before else 0.0

    def __str__(self) -> str:
        return f"InstanceType {self.pool} {self.view}: capacity {self.before} -> {self.after} " \
               f"(-{self.percent:.0f}%)"


@dataclass
class Consequences:
    """What a generation does to the pools (module docstring); each list one line per object, in order."""

    pool_objects: list[str] = field(default_factory=list)
    capacity: list[CapacityLoss] = field(default_factory=list)
    emptied: list[str] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)
    flavors_in_use: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)

    def lines(self) -> list[tuple[str, list[str]]]:
        """``(section title, lines)`` for each section that has lines, as ``accelpolicy diff`` prints them."""
        sections = [("pool objects", self.pool_objects),
                    ("capacity removed", [str(c) for c in self.capacity]),
                    ("pools left without flavors (kept, not drained)", self.emptied),
                    ("Workloads evicted", self.evicted), ("flavors in use deleted", self.flavors_in_use),
                    ("Instances stopped", self.stopped)]
        return [(title, lines) for title, lines in sections if lines]


# --- the cluster as the controller leaves it ---------------------------------------------------------
def _key(obj: dict) -> tuple[str, str, str]:
    meta = obj.get("metadata") or {}
    return str(obj.get("kind", "")), str(meta.get("namespace") or ""), str(meta.get("name", ""))


def reconciled(policy: Policy, snapshot: Snapshot, state: Optional[DesiredState] = None) -> Snapshot:
    """``snapshot`` as the controller leaves it under ``policy``: its derived pool objects written over
    (or beside) the snapshot's own, the flavors it deletes gone (what a live cluster already holds;
    an offline snapshot of Nodes alone gets its pools). ``state``: ``derive(policy, snapshot)`` when the
    caller has it."""
    state = state or derive(policy, snapshot)
    written = {_key(o): o for o in state.objects()}
    gone = {("ResourceFlavor", "", name) for name in state.flavor_deletes}
    kept = [o for o in snapshot if _key(o) not in written and _key(o) not in gone]
    return Snapshot.from_objects(kept + list(written.values()), origin="reconciled")


def mark_emptied(policy: Policy, snapshot: Snapshot, pools: list[str], generation: str) -> Snapshot:
    """``snapshot`` with the ClusterQueue of each of ``pools`` carrying the ``queueEmptiedByRules``
    annotation (rules/labels.yaml) naming ``generation``: what the controller writes before it installs
    a generation that empties them."""
    if not pools:
        return snapshot
    key, marked = policy.key("queueEmptiedByRules"), set(pools)
    objects = []
    for obj in snapshot:
        if obj.get("kind") == "ClusterQueue" and name_of(obj) in marked:
            meta = dict(obj.get("metadata") or {})
            meta["annotations"] = {**(meta.get("annotations") or {}), key: generation}
            obj = {**obj, "metadata": meta}
        objects.append(obj)
    return Snapshot.from_objects(objects, origin="marked")


# --- pool objects --------------------------------------------------------------------------------------
def _name(kind: str, namespace: str, name: str) -> str:
    return f"{kind} {namespace + '/' if namespace else ''}{name}"


def _compared(obj: dict) -> dict:
    """What a write changes on a pool object: its labels, annotations, spec and status."""
    meta = obj.get("metadata") or {}
    out = {k: obj[k] for k in ("spec", "status") if k in obj}
    out.update({f"metadata.{k}": meta[k] for k in ("labels", "annotations") if meta.get(k)})
    return out


def _write(action) -> tuple:
    return (str(action.verb), action.kind, action.namespace, action.name,
            json.dumps(action.body, sort_keys=True))


def _line(action, live: dict | None) -> str:
    """``created``/``deleted KIND name``, or ``changed KIND name: <field diff>`` ("" when nothing differs)."""
    from runtime.report.audit import field_diff

    name = _name(action.kind, action.namespace, action.name)
    verb = _WRITES.get(str(action.verb), "changed" if live is not None else "created")
    if verb != "changed":
        return f"{verb} {name}"
    body = action.body or {}
    after = _compared({**live, **body,
                       "metadata": {**(live.get("metadata") or {}), **(body.get("metadata") or {})}})
    diff = field_diff(_compared(live), after)
    return f"changed {name}: {diff}" if diff else ""


def pool_changes(current: Policy, new: Policy, cluster: Snapshot,
                 new_state: Optional[DesiredState] = None) -> list[str]:
    """One line per pool object the controller writes when ``new`` replaces ``current`` on ``cluster`` (a
    snapshot reconciled under ``current``, :func:`reconciled`), in the planner's order: the writes of its
    plan under ``new`` that its plan under ``current`` does not make (a status it keeps either way is no
    change). ``new_state``: ``derive(new, cluster)`` when the caller has it."""
    baseline = {_write(a) for a in plan(current, derive(current, cluster), cluster)}
    lines, seen = [], set()
    for action in plan(new, new_state or derive(new, cluster), cluster):
        key = (action.kind, action.namespace, action.name)
        if action.kind not in POOL_KINDS or key in seen or _write(action) in baseline:
            continue
        seen.add(key)
        line = _line(action, cluster.get(action.kind, action.name, action.namespace))
        if line:
            lines.append(line)
    return lines


# --- capacity, queues, Workloads, Instances ------------------------------------------------------------
def _capacities(state: DesiredState) -> dict[str, dict[str, Decimal]]:
    """InstanceType -> view -> capacity, every status field that has a ``capacity``."""
    out: dict[str, dict[str, Decimal]] = {}
    for it in state.instance_types:
        views = {}
        for view, value in ((it.get("status") or {}).items()):
            if isinstance(value, dict) and "capacity" in value:
                try:
                    views[view] = parse_quantity(value["capacity"])
                except (ValueError, InvalidOperation):
                    continue
        out[name_of(it)] = views
    return out


def capacity_lost(old: DesiredState, new: DesiredState) -> list[CapacityLoss]:
    """Every (pool, view) whose capacity shrinks from ``old`` to ``new`` (a pool gone: to 0)."""
    before, after = _capacities(old), _capacities(new)
    return [CapacityLoss(pool, view, amount, after.get(pool, {}).get(view, Decimal(0)))
            for pool, views in sorted(before.items()) for view, amount in views.items()
            if after.get(pool, {}).get(view, Decimal(0)) < amount]


def _flavor_names(queue: dict) -> set[str]:
    return {f.get("name") for group in (queue.get("spec") or {}).get("resourceGroups") or []
            for f in group.get("flavors") or []}


def emptied_pools(old: DesiredState, new: DesiredState) -> list[str]:
    """Pools (ClusterQueue names) with flavors under ``old`` that ``new`` leaves with none: no group of
    flavors, or only the old ones kept while it drains."""
    new_queues = {name_of(q): q for q in new.cluster_queues}
    out = []
    for queue in old.cluster_queues:
        name, was = name_of(queue), _flavor_names(queue)
        now = new_queues.get(name)
        if not was or now is None:
            continue
        draining = (now.get("spec") or {}).get("stopPolicy") == "HoldAndDrain" != \
            (queue.get("spec") or {}).get("stopPolicy")
        if not _flavor_names(now) or (draining and not _live_flavors(new, name)):
            out.append(name)
    return out


def _live_flavors(state: DesiredState, pool: str) -> bool:
    """Whether ``pool``'s InstanceType still counts capacity in some view under ``state``."""
    views = _capacities(state).get(pool, {})
    return any(amount > 0 for amount in views.values())


def _admitted(snapshot: Snapshot) -> list[dict]:
    """Workloads Kueue admitted (``status.admission`` set) that are not finished."""
    out = []
    for workload in snapshot.list("Workload"):
        status = workload.get("status") or {}
        finished = any(c.get("type") == "Finished" and c.get("status") == "True"
                       for c in status.get("conditions") or [])
        if status.get("admission") and not finished:
            out.append(workload)
    return out


def _ref(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _draining(state: DesiredState, snapshot: Snapshot) -> set[str]:
    """Queues ``state`` drains or deletes where the live one does not drain already."""
    desired = {name_of(q): q for q in state.cluster_queues}
    out = set()
    for live in snapshot.list("ClusterQueue"):
        name = name_of(live)
        if (live.get("spec") or {}).get("stopPolicy") == "HoldAndDrain" or is_deleting(live):
            continue
        want = desired.get(name)
        if want is None or (want.get("spec") or {}).get("stopPolicy") == "HoldAndDrain":
            out.add(name)
    return out & {name_of(q) for q in snapshot.list("ClusterQueue")}


def evicted_workloads(old: DesiredState, new: DesiredState, snapshot: Snapshot) -> list[str]:
    """``Workload ns/name (ClusterQueue q)`` for each admitted Workload of a queue ``new`` drains or
    deletes and ``old`` does not."""
    queues = _draining(new, snapshot) - _draining(old, snapshot)
    return [f"Workload {_ref(w)} (ClusterQueue {w['status']['admission'].get('clusterQueue')})"
            for w in _admitted(snapshot) if w["status"]["admission"].get("clusterQueue") in queues]


def flavors_in_use(old: DesiredState, new: DesiredState, snapshot: Snapshot) -> list[str]:
    """``ResourceFlavor f: used by Workload ns/name, ...`` for each flavor ``new`` deletes (and ``old``
    keeps) that an admitted Workload was assigned."""
    kept = set().union(*(_flavor_names(q) for q in new.cluster_queues)) if new.cluster_queues else set()
    deleted = set(new.flavor_deletes) - set(old.flavor_deletes) - kept
    users: dict[str, list[str]] = {}
    for workload in _admitted(snapshot):
        for assignment in workload["status"]["admission"].get("podSetAssignments") or []:
            for flavor in set((assignment.get("flavors") or {}).values()) & deleted:
                users.setdefault(flavor, []).append(f"Workload {_ref(workload)}")
    return [f"ResourceFlavor {flavor}: used by {', '.join(sorted(set(refs)))}"
            for flavor, refs in sorted(users.items())]


def _stops(state: DesiredState, instance: dict) -> bool:
    """Whether the controller stops ``instance`` under ``state``: its type gone or being deleted, or its
    queue draining (docs/concepts/instances.md "Life cycle")."""
    name = (instance.get("spec") or {}).get("type") or ""
    types = {name_of(it): it for it in state.instance_types}
    queues = {name_of(q): q for q in state.cluster_queues}
    it = types.get(name)
    return it is None or is_deleting(it) or \
        ((queues.get(name) or {}).get("spec") or {}).get("stopPolicy") == "HoldAndDrain"


def stopped_instances(old: DesiredState, new: DesiredState, snapshot: Snapshot) -> list[str]:
    """``Instance ns/name (type t)`` for each running Instance (no ``spec.stop``, not being deleted) that
    ``new`` stops and ``old`` does not."""
    out = []
    for instance in snapshot.list("Instance"):
        if (instance.get("spec") or {}).get("stop") or is_deleting(instance):
            continue
        if _stops(new, instance) and not _stops(old, instance):
            out.append(f"Instance {_ref(instance)} (type {(instance.get('spec') or {}).get('type')})")
    return out


def consequences(serving: Policy, policy: Policy, snapshot: Snapshot, generation: str = "") -> Consequences:
    """What ``policy`` does to the pools of ``snapshot`` where ``serving`` serves (module docstring);
    ``generation``: its name, the mark on the queues it empties."""
    cluster = reconciled(serving, snapshot)
    old = derive(serving, cluster)
    new = derive(policy, cluster)
    emptied = emptied_pools(old, new)
    if emptied:   # what the controller does with them: kept under Hold, not drained
        cluster = mark_emptied(policy, cluster, emptied, generation or "-")
        old, new = derive(serving, cluster), derive(policy, cluster)
    return Consequences(pool_objects=pool_changes(serving, policy, cluster, new),
                        capacity=capacity_lost(old, new), emptied=emptied,
                        evicted=evicted_workloads(old, new, cluster),
                        flavors_in_use=flavors_in_use(old, new, cluster),
                        stopped=stopped_instances(old, new, cluster))


def hold_reasons(found: Optional[Consequences], trial, hold) -> list[str]:
    """Why a generation is held (one line each; ``[]``: it is not): ``found`` its consequences (None: not
    computed here), ``trial`` its :class:`~runtime.reload.trial.Trial` (the verdicts it changes, the
    objects and reviews judged), ``hold`` the serving generation's ``ReloadGate`` ``hold`` settings."""
    reasons = []
    if found is not None:
        if hold.runningWork and (found.evicted or found.stopped):
            reasons.append(f"it evicts {len(found.evicted)} admitted Workload(s) and stops "
                           f"{len(found.stopped)} running Instance(s) (hold.runningWork)")
        if hold.flavorsInUse and found.flavors_in_use:
            reasons.append(f"it deletes {len(found.flavors_in_use)} ResourceFlavor(s) admitted Workloads use "
                           "(hold.flavorsInUse)")
        over = [c for c in found.capacity if c.percent > hold.maxCapacityRemovedPercent]
        if over:
            reasons.append(f"it removes more than {hold.maxCapacityRemovedPercent:g}% of the capacity of "
                           f"{len({c.pool for c in over})} pool(s) (hold.maxCapacityRemovedPercent): "
                           + "; ".join(str(c) for c in over[:3]) + (" ..." if len(over) > 3 else ""))
    for source, total, what in (("review", trial.reviews, "recent review(s)"),
                                ("object", trial.objects, "existing object(s)")):
        denied = trial.newly_denied(source)
        if total and denied * 100 > hold.maxNewDenialsPercent * total and \
                (source == "review" or hold.maxNewDenials is None or denied > hold.maxNewDenials):
            reasons.append(f"it newly denies {denied} of {total} {what} ({denied * 100 / total:.0f}%, more "
                           f"than hold.maxNewDenialsPercent {hold.maxNewDenialsPercent:g}%)")
    return reasons
