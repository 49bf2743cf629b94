"""The difference between a DesiredState and what the cluster holds, as a list of writes.

Pure: :func:`plan` reads the engine's :class:`DesiredState` and the :class:`Snapshot` it was derived
from (the watch cache) and returns :class:`Action` s in the order they must run. Nothing is planned
for an object that already matches, so a reconcile of an unchanged cluster plans nothing.

Rules (docs/concepts/pools-and-flavors.md "Pools and flavors"):

  * ResourceFlavor (docs/concepts/pools-and-flavors.md "ResourceFlavors: what each node contributes"): missing
  -> apply; ``spec.nodeLabels`` differ -> recreate (delete, then apply; never patched); our labels missing or
  notes differ -> apply (labels are never removed, the notes are replaced wholesale: stale notes are pruned);
  no contributor -> delete. A flavor being deleted is left alone.
  * AdmissionCheck (docs/concepts/pools-and-flavors.md "The AdmissionCheck `gpustack-node-devices`"):
  labels/spec applied; its ``Active`` condition kept ``True``. Its answers on Workloads are planned by
  :mod:`runtime.controller.workloadchecks`.
  * InstanceType (docs/concepts/pools-and-flavors.md "Pools: InstanceType + ClusterQueue of one name" and
  "InstanceType status"): derived types created (create-only; an existing type's spec and labels are never
  written); ``status`` written for every type when it differs; a deleting type's finalizer is removed once its
  ClusterQueue is gone (docs/concepts/pools-and-flavors.md "Queues and the entrance").
  * ClusterQueue: labels, ``resourceGroups``,
  ``admissionChecksStrategy``, ``stopPolicy`` kept equal (stale ``general.``/``acceleratable.`` labels
  pruned); our queues without an InstanceType deleted, a queue being deleted set to ``HoldAndDrain``.
  * LocalQueue: created when missing (owner
  reference filled at execution), never updated; ours without a desired counterpart deleted.
  * InstanceTypeFlavor (docs/concepts/pools-and-flavors.md "The catalog: InstanceTypeFlavor"): created,
  rewritten when the spec differs, stale ones deleted.
  * Node fit labels (docs/agent.md "Capacity and fit labels"): one merge patch of a Node's labels when a fit
  label (keys under the ``fitSliced``/``fitShared`` prefixes of rules/labels.yaml) is missing, differs or
  should be gone (node unmanaged, no Devices, model gone). No other Node label is ever written.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping
from enum import StrEnum
from functools import partial

from runtime.engine.ownership import owned
from runtime.engine.pools import DesiredState, fit_labels
from runtime.engine.pools.incremental import DeriveMemo
from runtime.engine.pools.nodeset import changed_keys
from runtime.engine.policy import Policy
from runtime.engine.snapshot import Snapshot, annotations_of, is_deleting, labels_of, name_of


class Verb(StrEnum):
    """The controller's one action vocabulary; :meth:`runtime.controller.actions.ActionWriter.execute`
    dispatches on it through a table (one handler per verb)."""

    APPLY = "apply"                        # server-side apply ``body``
    APPLY_STATUS = "apply-status"          # server-side apply ``body``'s status subresource
    APPLY_CHECK_STATE = "apply-check-state"   # a Workload's admission-check state (field manager: the check)
    CREATE = "create"                      # create-only (a LocalQueue gets its owner reference first)
    RECREATE = "recreate"                  # delete the live object, then apply ``body``
    PATCH = "patch"                        # merge patch ``body``
    DELETE = "delete"  # ``body`` = the live object (the applier refuses what we do not own)
    ADD_FINALIZER = "add-finalizer"        # ``body`` = the live object (JSON patch, tested)
    REMOVE_FINALIZER = "remove-finalizer"  # ``body`` = the live object (JSON patch, tested)


@dataclass(frozen=True)
class Action:
    """One write: ``verb`` (:class:`Verb`) on ``kind``/``name``/``namespace`` with ``body``; ``reason``
    says why."""

    verb: Verb
    kind: str
    name: str
    namespace: str = ""
    body: dict | None = None
    reason: str = ""


def _contains(want, got) -> bool:
    """``want`` is a subset of ``got`` (maps by key, lists element-wise with equal length)."""
    if isinstance(want, dict):
        return isinstance(got, dict) and all(k in got and _contains(v, got[k]) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(got, list) and len(want) == len(got) and all(
            _contains(w, g) for w, g in zip(want, got))
    return want == got


def _ns(obj: dict) -> str:
    return (obj.get("metadata") or {}).get("namespace") or ""


def plan(policy: Policy, state: DesiredState, snapshot: Snapshot, now: str = "",
         memo: DeriveMemo | None = None) -> list[Action]:
    """Actions turning ``snapshot``'s cluster into ``state`` (see the module docstring).

    ``now``: RFC 3339 time for condition transitions the plan writes (the AdmissionCheck's);
    ``memo``: the :class:`DeriveMemo` that derived ``state`` (the controller's), to keep each Node's
    fit label patch while its Node and Devices objects are the same.
    """
    actions: list[Action] = []
    actions += _flavors(policy, state, snapshot)
    actions += _admission_checks(policy, state, snapshot, now)
    created = set(state.created_instance_types)
    for it in state.instance_types:
        if name_of(it) in created and snapshot.get("InstanceType", name_of(it)) is None:
            actions.append(Action(Verb.CREATE, "InstanceType", name_of(it), body=_without_status(it),
                                  reason="derived pool type (create-only)"))
            # its status at once, not after every queue: a type is never listed without status
            # longer than one write (else its cells read empty meanwhile: half a second at 2,000 nodes)
            actions.append(Action(Verb.APPLY_STATUS, "InstanceType", name_of(it), body=it,
                                  reason="status of the created type"))
    actions += _cluster_queues(policy, state, snapshot)
    actions += _local_queues(policy, state, snapshot)
    actions += _instance_type_status(policy, state, snapshot)
    actions += _catalog(state, snapshot)
    actions += _fit_labels(policy, state, snapshot, memo)
    return actions


def _without_status(obj: dict) -> dict:
    return {k: v for k, v in obj.items() if k != "status"}


def _pairs(objects: list[dict], kind: str, snapshot: Snapshot):
    """(name, desired, live or None) for each desired cluster-scoped object of ``kind``."""
    for obj in objects:
        name = name_of(obj)
        yield name, obj, snapshot.get(kind, name)


def _flavors(policy: Policy, state: DesiredState, snapshot: Snapshot) -> list[Action]:
    out = []
    note = policy.prefix("note")
    for name, flavor, live in _pairs(state.resource_flavors, "ResourceFlavor", snapshot):
        if live is None:
            out.append(Action(Verb.APPLY, "ResourceFlavor", name, body=flavor, reason="missing"))
            continue
        if is_deleting(live):
            continue  # recreated once it is gone
        if (live.get("spec") or {}).get("nodeLabels") != flavor["spec"]["nodeLabels"]:
            out.append(Action(Verb.RECREATE, "ResourceFlavor", name, body=flavor,
                              reason="spec.nodeLabels differ"))
            continue
        live_notes = {k: v for k, v in annotations_of(live).items() if k.startswith(note)}
        want_notes = flavor["metadata"].get("annotations") or {}
        if not _contains(flavor["metadata"]["labels"], labels_of(live)) or live_notes != want_notes:
            out.append(Action(Verb.APPLY, "ResourceFlavor", name, body=flavor,
                              reason="labels or notes differ"))
            stale = {k: None for k in live_notes if k not in want_notes}
            if stale:
                out.append(Action(Verb.PATCH, "ResourceFlavor", name,
                                  body={"metadata": {"annotations": stale}}, reason="stale notes"))
    # a flavor a kept queue still names (its pool emptied while Workloads hold reservations there, or by
    # a rules generation) stays until the queue lets it go
    named = {f.get("name") for q in state.cluster_queues
             for g in (q.get("spec") or {}).get("resourceGroups") or [] for f in g.get("flavors") or []}
    for name in state.flavor_deletes:
        live = snapshot.get("ResourceFlavor", name)
        if live is not None and not is_deleting(live) and name not in named:
            out.append(Action(Verb.DELETE, "ResourceFlavor", name, body=live, reason="no contributor"))
    return out


def _admission_checks(policy: Policy, state: DesiredState, snapshot: Snapshot, now: str) -> list[Action]:
    out = []
    for name, check, live in _pairs(state.admission_checks, "AdmissionCheck", snapshot):
        if live is None or not _contains(check["metadata"].get("labels") or {}, labels_of(live)) \
                or not _contains(check["spec"], live.get("spec") or {}):
            out.append(Action(Verb.APPLY, "AdmissionCheck", name, body=check, reason="missing or differs"))
        conditions = ((live or {}).get("status") or {}).get("conditions") or []
        if not any(c.get("type") == "Active" and c.get("status") == "True" for c in conditions):
            active = policy.queues.admissionCheck.active
            status = {"conditions": [{"type": "Active", "status": "True", "reason": active.reason,
                                      "message": active.message,
                                      "lastTransitionTime": now or "1970-01-01T00:00:00Z"}]}
            out.append(Action(Verb.APPLY_STATUS, "AdmissionCheck", name, body={**check, "status": status},
                              reason="keep Active"))
    return out


def _queue_matches(policy: Policy, want: dict, live: dict) -> tuple[bool, dict]:
    """(live equals want on the kept fields, merge patch pruning what others own)."""
    prefixes = (policy.prefix("general"), policy.prefix("acceleratable"))
    want_labels = want["metadata"]["labels"]
    live_labels = labels_of(live)
    stale = {k: None for k in live_labels if k.startswith(prefixes) and k not in want_labels}
    spec, live_spec = want["spec"], live.get("spec") or {}
    ok = _contains(want_labels, live_labels) and not stale
    ok = ok and _contains(spec.get("resourceGroups", []), live_spec.get("resourceGroups") or [])
    ok = ok and live_spec.get("stopPolicy", "None") == spec.get("stopPolicy", "None")
    prune: dict = {}
    if stale:
        prune["metadata"] = {"labels": stale}
    mark = policy.key("queueEmptiedByRules")
    if mark in annotations_of(live) and mark not in (want["metadata"].get("annotations") or {}):
        ok = False   # its flavors are back: the rules generation's mark goes
        prune.setdefault("metadata", {})["annotations"] = {mark: None}
    if "admissionChecksStrategy" in spec:
        ok = ok and _contains(spec["admissionChecksStrategy"], live_spec.get("admissionChecksStrategy") or {})
    elif live_spec.get("admissionChecksStrategy"):
        ok = False
        prune["spec"] = {"admissionChecksStrategy": None}
    return ok, prune


def _cluster_queues(policy: Policy, state: DesiredState, snapshot: Snapshot) -> list[Action]:
    out = []
    wanted = set()
    for name, queue, live in _pairs(state.cluster_queues, "ClusterQueue", snapshot):
        wanted.add(name)
        if live is not None and is_deleting(live):
            continue
        if live is None:
            out.append(Action(Verb.APPLY, "ClusterQueue", name, body=queue, reason="missing"))
            continue
        ok, prune = _queue_matches(policy, queue, live)
        if not ok:
            out.append(Action(Verb.APPLY, "ClusterQueue", name, body=queue, reason="kept fields differ"))
            if prune:
                out.append(Action(Verb.PATCH, "ClusterQueue", name, body=prune, reason="prune stale fields"))
    for live in snapshot.list("ClusterQueue"):
        name = name_of(live)
        if name in wanted or not owned(policy, live):
            continue
        if not is_deleting(live):
            out.append(Action(Verb.DELETE, "ClusterQueue", name, body=live, reason="no InstanceType"))
        elif (live.get("spec") or {}).get("stopPolicy") != "HoldAndDrain":
            out.append(Action(Verb.PATCH, "ClusterQueue", name, body={"spec": {"stopPolicy": "HoldAndDrain"}},
                              reason="queue being deleted"))
    return out


def _local_queues(policy: Policy, state: DesiredState, snapshot: Snapshot) -> list[Action]:
    out = []
    wanted = set()
    for lq in state.local_queues:
        key = (_ns(lq), name_of(lq))
        wanted.add(key)
        if snapshot.get("LocalQueue", key[1], key[0]) is None:
            out.append(Action(Verb.CREATE, "LocalQueue", key[1], key[0], body=lq,
                              reason="missing (create-only)"))
    for live in snapshot.list("LocalQueue"):
        key = (_ns(live), name_of(live))
        if key not in wanted and owned(policy, live) and not is_deleting(live):
            out.append(Action(Verb.DELETE, "LocalQueue", key[1], key[0], body=live,
                              reason="its queue is not kept"))
    return out


def _instance_type_status(policy: Policy, state: DesiredState, snapshot: Snapshot) -> list[Action]:
    out = []
    finalizer = policy.key("finalizer")
    for name, it, live in _pairs(state.instance_types, "InstanceType", snapshot):
        if live is None:  # a created type's status follows its create (see plan)
            continue
        if (live.get("status") or {}) != it.get("status"):
            out.append(Action(Verb.APPLY_STATUS, "InstanceType", name, body=it, reason="status differs"))
        if live is not None and is_deleting(live) \
                and finalizer in (live["metadata"].get("finalizers") or []) \
                and snapshot.get("ClusterQueue", name) is None:
            out.append(Action(Verb.REMOVE_FINALIZER, "InstanceType", name, body=live,
                              reason="its queue is gone"))
    return out


def _catalog(state: DesiredState, snapshot: Snapshot) -> list[Action]:
    out = []
    wanted = set()
    for name, entry, live in _pairs(state.instance_type_flavors, "InstanceTypeFlavor", snapshot):
        wanted.add(name)
        if live is None or (live.get("spec") or {}) != entry["spec"]:
            out.append(Action(Verb.APPLY, "InstanceTypeFlavor", name, body=entry,
                              reason="missing or differs"))
            extra = {k: None for k in ((live or {}).get("spec") or {}) if k not in entry["spec"]}
            if extra:
                out.append(Action(Verb.PATCH, "InstanceTypeFlavor", name, body={"spec": extra},
                                  reason="stale fields"))
    for live in snapshot.list("InstanceTypeFlavor"):
        if name_of(live) not in wanted and not is_deleting(live):
            out.append(Action(Verb.DELETE, "InstanceTypeFlavor", name_of(live), body=live,
                              reason="not in the catalog"))
    return out


def _fit_labels(policy: Policy, state: DesiredState, snapshot: Snapshot,
                memo: DeriveMemo | None = None) -> list[Action]:
    """Per-node fit label patches, in Node name order.

    The wanted labels are :func:`runtime.engine.pools.fit.fit_labels` of the node's Devices object (the
    state's, named after the Node) for the nodes in ``state.managed_nodes``; a Node without Devices
    (or whose Devices is being deleted) wants none. The patch sets the missing and differing values
    and removes (``None``) the fit labels no longer wanted; nothing is planned when they match.
    Nodes being deleted are left alone. With a ``memo``, the last plan's patches are updated for the
    Nodes whose objects changed (:class:`FitLabelPatches`), each Node's patch kept while its objects are.
    """
    if memo is None:
        return [
            _fit_action(name, labels) for name, labels in _fit_patches(policy, state, snapshot, None).items()]
    kept = memo.state("fitlabels", FitLabelPatches)
    return [_fit_action(name, labels) for name, labels in kept.update(policy, state, snapshot, memo).items()]


def _fit_action(name: str, labels: dict) -> Action:
    return Action(Verb.PATCH, "Node", name, body={"metadata": {"labels": dict(labels)}},
                  reason="fit labels differ")


def _fit_patches(policy: Policy, state: DesiredState, snapshot: Snapshot, memo: DeriveMemo | None,
                 names: Iterable[str] | None = None,
                 devices: dict[str, dict] | None = None) -> dict[str, dict]:
    """Node name -> its fit label patch, for the Nodes named in ``names`` (None: every Node) that
    need one; with a ``memo``, each patch kept while the Node's ``metadata`` and its Devices are the
    same objects. ``devices``: the state's Devices by name, not being deleted, when the caller has them."""
    managed = set(state.managed_nodes)
    if devices is None:
        devices = {name_of(d): d for d in state.devices if not is_deleting(d)}
    nodes = snapshot.list("Node") if names is None else \
        [n for n in (snapshot.get("Node", name) for name in sorted(names)) if n is not None]
    out = {}
    for node in nodes:
        name = name_of(node)
        if is_deleting(node):
            continue
        obj = devices.get(name)
        if memo is None:
            labels = fit_label_patch(policy, node, obj, name in managed)
        else:
            spec, status = (obj or {}).get("spec"), (obj or {}).get("status")
            labels = memo.keep("fitpatch", name, (id(node.get("metadata")), obj is None, id(spec), id(status),
                                                 name in managed), (node.get("metadata"), spec, status),
                               partial(fit_label_patch, policy, node, obj, name in managed))
        if labels is not None:
            out[name] = labels
    return out


class FitLabelPatches:
    """The fit label patches of the last plan, updated for the Nodes whose Node or Devices object
    (by identity) or managed mark changed since (a pass looks again at what changed only)."""

    def __init__(self) -> None:
        self.nodes: Mapping = {}  # the snapshot's Node map last planned
        self.devices: dict[str, dict] = {}  # the state's Devices by name, not being deleted
        self.managed: set[str] = set()
        self.patches: dict[str, dict] = {}  # node name -> its patch, for the Nodes that need one

    def update(self, policy: Policy, state: DesiredState, snapshot: Snapshot,
               memo: DeriveMemo) -> dict[str, dict]:
        """Node name -> fit label patch, in name order, for ``state`` (see :func:`_fit_labels`)."""
        nodes = snapshot.objects.get("Node") or {}
        devices = {name_of(d): d for d in state.devices if not is_deleting(d)}
        managed = set(state.managed_nodes)
        names = {key[1] for key in changed_keys(self.nodes, nodes)} | changed_keys(self.devices, devices) \
            | (managed ^ self.managed)
        if names:
            patches = {name: labels for name, labels in self.patches.items() if name not in names}
            patches.update(_fit_patches(policy, state, snapshot, memo, names, devices))
            self.patches = dict(sorted(patches.items()))
        self.nodes, self.devices, self.managed = nodes, devices, managed
        return self.patches


def fit_label_patch(policy: Policy, node: dict, devices: dict | None, managed: bool) -> dict | None:
    """The labels of one Node's fit label merge patch: the wanted values that are missing or differ,
    ``None`` for those no longer wanted; None when they all match. ``devices``: the node's Devices
    object (None: it wants none)."""
    prefixes = (policy.prefix("fitSliced"), policy.prefix("fitShared"))
    have = {k: v for k, v in labels_of(node).items() if k.startswith(prefixes)}
    want = fit_labels(policy, devices, managed) if devices is not None else {}
    if want == have:
        return None
    labels: dict = {k: None for k in have if k not in want}
    labels.update({k: v for k, v in want.items() if have.get(k) != v})
    return labels
