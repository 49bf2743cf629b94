"""Incremental derivation: what one :func:`derive` reuses from the previous one.

A :class:`DeriveMemo` passed to ``derive(policy, snapshot, memo=memo)`` keeps, between calls, the
parts of a derivation that depend on one node or one pool only, each under a key made of the facts
that fed it (the flavors and their notes: docs/concepts/pools-and-flavors.md "ResourceFlavors: what
each node contributes"; the status: docs/concepts/pools-and-flavors.md "InstanceType status"):

========== ======================================== =============================================
store      one entry per                            key (the facts it was computed from)
========== ======================================== =============================================
node       Node: effective labels, NodeView          the Node's ``metadata``, its trusted
                                                    NodeFeatures' ``spec`` (decision 20)
flavors    Node: its flavor contributions            the node's NodeView, the ``mixedOnNode``
                                                    setting
notes      ResourceFlavor: its notes                 the flavor, its first contributor's NodeView
                                                    and Devices ``spec``
ledger     Devices: refused numbers (decision 19)    the Devices' name, ``spec`` and ``status``
status     InstanceType: its status                  its spec and deletion, queue name, flavors'
                                                    counts, queue facts, settings, the pool's
                                                    Devices ``spec``/``status``
select     InstanceType: its pool's Devices          its Devices selector, the sound Devices list
usable     Devices: healthy accelerators per aKey    its ``spec`` (the quota counts them)
========== ======================================== =============================================

Whole-kind results (:meth:`DeriveMemo.whole`) are kept while the snapshot's maps of the kinds they
read are the same objects (the controller's snapshots keep a kind's map while none of its objects
changed, :meth:`Snapshot.from_index`): ``flavorset`` (the flavor plans, rendered flavors and each
node's flavors; also keyed by the first contributors' Devices ``spec``, by value). The node facts are
a :class:`runtime.engine.pools.nodeset.NodeSet` (:meth:`DeriveMemo.node_set`) and the Devices lists
a :class:`runtime.engine.pools.deviceset.DeviceSet`, both updated from the objects that changed: a
pass reads again only those.

Callers keep their own per-object results with :meth:`DeriveMemo.keep` (the controller's plan keeps
each Node's fit label patch, docs/agent.md "Capacity and fit labels", by the Node's ``metadata`` and its
Devices') and their own state updated from the changes with :meth:`DeriveMemo.state` (the plan's
``FitLabelPatches``).

Objects are keyed by identity: a snapshot's dicts are never mutated (:class:`Snapshot`), so the
same ``metadata``/``spec``/``status`` object means the same facts, and a changed object is a new
one (the watch cache replaces an object on every event; :meth:`Snapshot.from_objects` shares the
nested dicts of its input). An entry holds the objects of its key, so an id is not reused while the
entry lives; entries not used by the last call are dropped. Anything else (settings, queues,
namespaces, catalog, plan) is derived afresh on every call. A memo serves one Policy: a reload
(a new Policy object) empties it. Not thread-safe: one memo per deriving thread.

The results equal a full derive's (``tests/engine/test_incremental_derive.py`` replays random node
edits through both).
"""
from __future__ import annotations

import copy
from collections import Counter
from functools import partial
from typing import Callable, Hashable

from runtime.engine.policy import Policy
from runtime.engine.pools.flavors import FlavorPlan, flavor_notes, node_contributions
from runtime.engine.pools.nodes import NodeView, node_effective_labels, read_node
from runtime.engine.pools.nodeset import NodeSet
from runtime.engine.snapshot import Snapshot, annotations_of, is_deleting, name_of
from runtime.rules.memo import fingerprint



def _ids(*objects) -> tuple[int, ...]:
    return tuple(id(o) for o in objects)


class DeriveMemo:
    """Per-node and per-pool results of the last :func:`derive`, reused while their key holds.

    ``computed``/``reused``: per store, how many entries the last call computed and reused (the
    proof that an event touching one node re-derives only what that node feeds).
    """

    def __init__(self) -> None:
        self._policy: Policy | None = None
        self._old: dict[str, dict[str, tuple]] = {}
        self._new: dict[str, dict[str, tuple]] = {}
        self._state: dict[str, object] = {}  # results updated from the changes (e.g. the NodeSet)
        self.computed: Counter = Counter()
        self.reused: Counter = Counter()

    def begin(self, policy: Policy) -> None:
        """Start one derive: entries the previous call did not use are dropped; a new Policy empties
        the memo."""
        if policy is not self._policy:
            self._policy = policy
            self._new = {}
            self._state = {}
        self._old, self._new = self._new, {}
        self.computed, self.reused = Counter(), Counter()

    def keep(self, store: str, name: str, key: Hashable, refs, compute: Callable[[], object]):
        """The value of ``store``/``name`` when its key is ``key``; else ``compute()``, kept with
        ``refs`` (the objects whose ids are in ``key``) until a call of :meth:`begin` after one in
        which it was not used. The value is shared: never mutate it."""
        new = self._new.setdefault(store, {})
        entry = new.get(name) or self._old.get(store, {}).get(name)
        if entry is not None and entry[0] == key:
            new[name] = entry
            self.reused[store] += 1
            return entry[2]
        value = compute()
        new[name] = (key, refs, value)
        self.computed[store] += 1
        return value

    def whole(self, store: str, refs: tuple, extra: Hashable, compute: Callable[[], object],
              carry: tuple[str, ...] = ()):
        """``compute()`` unless ``refs`` are the same objects (by identity) and ``extra`` is equal as
        when it was last computed: a result derived from whole kinds of a snapshot, whose map of a
        kind is the same object while the kind's objects are (:meth:`Snapshot.from_index`, the
        controller's snapshots). When reused, the per-object entries of the ``carry`` stores (those
        ``compute`` fills) are kept for the next change as if they had been used. Shared: never mutate it."""
        key = (tuple(id(r) for r in refs), extra)
        new = self._new.setdefault(store, {})
        entry = new.get("") or self._old.get(store, {}).get("")
        if entry is not None and entry[0] == key:
            new[""] = entry
            self.reused[store] += 1
            self.carry(*carry)
            return entry[2]
        value = compute()
        new[""] = (key, refs, value)
        self.computed[store] += 1
        return value

    # -- node facts --------------------------------------------------------------------------------
    def node(self, policy: Policy, node: dict, features) -> tuple[dict[str, str], NodeView | None]:
        """(effective labels, NodeView or None while the Node is being deleted) of one Node
        (:func:`runtime.engine.pools.nodes.node_effective_labels`, :func:`read_node`)."""
        features = tuple(features)
        meta = node.get("metadata")
        key = _ids(meta, *((nf.get("spec") for nf in features)))

        def compute():
            labels = node_effective_labels(policy, node, features)
            if is_deleting(node):
                return labels, None
            return labels, read_node(policy, name_of(node), labels, dict(annotations_of(node)))
        return self.keep("node", name_of(node), key, (meta, [nf.get("spec") for nf in features]), compute)

    def carry(self, *stores: str) -> None:
        """Keep the entries of ``stores`` for the next call as if this one had used them (a caller
        that updates its result from the changes looks at the unchanged entries no more)."""
        for name in stores:
            kept, old = self._new.get(name), self._old.get(name, {})
            if kept is None:
                self._new[name] = old
            else:
                for k, v in old.items():
                    kept.setdefault(k, v)

    def state(self, store: str, make: Callable[[], object]):
        """The caller's object of ``store`` kept between calls (``make()`` when there is none yet, or
        after a new Policy): a result the caller updates from the changes itself."""
        if store not in self._state:
            self._state[store] = make()
        return self._state[store]

    def node_set(self, policy: Policy, snapshot: Snapshot,
                 namespace: str | None) -> tuple[list[str], dict[str, dict[str, str]], list[NodeView]]:
        """(warnings for ignored NodeFeatures, node name -> effective labels, NodeViews in name order),
        as :func:`runtime.engine.pools.nodes.trusted_node_features`, :func:`effective_node_labels` and
        :func:`node_views` give them, updated from the Nodes and NodeFeatures changed since the last
        call (:class:`runtime.engine.pools.nodeset.NodeSet`); the same objects when none changed."""
        node_set = self.state("nodeset", lambda: NodeSet(policy, namespace, partial(self.node, policy)))
        if node_set.namespace != namespace:
            node_set = self._state["nodeset"] = NodeSet(policy, namespace, partial(self.node, policy))
        before = node_set.result
        result = node_set.update(snapshot)
        (self.reused if result is before else self.computed)["nodeset"] += 1
        return result

    def node_marks(self) -> dict[str, str | None] | None:
        """Node name -> effective managed label of the last :meth:`node_set` (the same map while no
        mark changed), or None before one."""
        node_set = self._state.get("nodeset")
        return node_set.marks if node_set is not None else None

    def contributions(self, policy: Policy, node: NodeView, mixed: bool) -> list:
        """:func:`runtime.engine.pools.flavors.node_contributions` of one node."""
        return self.keep("flavors", node.name, (id(node), mixed), node,
                         lambda: node_contributions(policy, node, mixed))

    def notes(self, policy: Policy, snapshot: Snapshot, plan: FlavorPlan, first: NodeView) -> dict[str, str]:
        """:func:`runtime.engine.pools.flavors.flavor_notes` of one flavor (a copy)."""
        devices = snapshot.get("Devices", first.name)
        spec = (devices or {}).get("spec")
        key = (plan.kind, plan.gkey, plan.akey, id(first), devices is None, id(spec))
        return dict(self.keep("notes", plan.name, key, (first, spec),
                              lambda: flavor_notes(policy, snapshot, plan, first)))

    # -- Devices -----------------------------------------------------------------------------------
    def ledger_problems(self, policy: Policy, devices: dict, compute: Callable[[], list]) -> list:
        """``compute()`` (the refused numbers of one Devices object, decision 19), kept per
        ``spec``/``status``."""
        spec, status = devices.get("spec"), devices.get("status")
        return list(self.keep("ledger", name_of(devices), _ids(spec, status), (spec, status), compute))

    # -- pools -------------------------------------------------------------------------------------
    def status(self, it: dict, queue: dict | None, flavors: list, pool_devices: list[dict], queue_state: dict,
               settings_values, compute: Callable[[], dict], closed: dict[str, str] | None = None) -> dict:
        """``compute()`` (one InstanceType's status) unless every fact it reads is the same as when it was
        last computed: the type's name, deletion and spec, its queue's name, its flavors' counts and
        capacities, ``queue_state``, the settings, its Devices' ``spec`` and ``status`` (by identity) and
        its closed nodes. A deep copy."""
        key = (is_deleting(it), _frozen(it.get("spec")), name_of(queue) if queue is not None else None,
               tuple((p.name, p.count, p.capacity) for p in flavors), _frozen(queue_state),
               _frozen(dict(settings_values)),
               tuple(i for d in pool_devices for i in _ids(d.get("spec"), d.get("status"))),
               tuple(sorted((closed or {}).items())))
        refs = [(d.get("spec"), d.get("status")) for d in pool_devices]
        return copy.deepcopy(self.keep("status", name_of(it), key, refs, compute))


def _frozen(value) -> Hashable:
    """The type-tagged content digest of a JSON value (:func:`runtime.rules.memo.fingerprint`, the one
    freezer of every memo: docs/webhook-hardening.md "Bounded memory"); a value it cannot encode gets
    a key equal to nothing."""
    key = fingerprint(value)
    return key if key is not None else object()
