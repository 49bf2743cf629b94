"""The usage rates of the whole cluster, kept up to date from what changed (docs/tasks/report-usage.md
"Cost and cardinality").

Reading every node afresh takes, at 10,000 nodes, most of a second, too much for every reconcile pass
(an idle pass costs milliseconds: docs/performance.md "A pass proportional to what changed"). A
:class:`UsageTracker` keeps each node's
part (:func:`runtime.engine.pools.usage.node_part`) and each Workload's in a
:class:`runtime.engine.pools.usage.RateTotals` and, after each pass, computes again only the nodes
whose Devices, Node or allocation-holding Pods changed in the watch caches since its last look
(``KindCache.changes``), or whose flavors or pools the pass derived differently, and the Workloads
that changed. A new rules generation, a LocalQueue change, a cache that forgot what changed, or a
change of the flavor-to-pool map reads everything again. The totals equal those of every object read
afresh (``tests/controller/test_usage_tracker.py``). The pass thread's.
"""
from __future__ import annotations

from typing import Mapping

from runtime.engine.pools.usage import Placements, RateTotals, local_queues, node_part, workload_part

DEVICES, NODE, POD, QUEUE, WORKLOAD = "Devices", "Node", "Pod", "LocalQueue", "Workload"


class UsageTracker:
    """The rates of the cluster the watch caches hold (module docstring); ``by_node``: the node label."""

    def __init__(self, by_node: bool = False):
        self.by_node = by_node
        self.policy = None
        self.totals = RateTotals()
        self.seen: dict[str, int] = {}
        self.pods: dict[str, dict[tuple[str, str], dict]] = {}   # node -> allocation-holding Pods
        self.pod_node: dict[tuple[str, str], str] = {}
        self.node_flavors: Mapping[str, list[str]] = {}
        self.pools: tuple = ()
        self.queues: dict[tuple[str, str], str] = {}
        self.recomputed = 0   # nodes computed again by the last update

    def update(self, policy, state, caches: Mapping) -> tuple[bool, dict[tuple[str, tuple], float | None]]:
        """The rates after one pass (``state`` its DesiredState, ``caches`` kind -> KindCache), as
        ``(full, changed)``: ``changed`` maps ``(table, labels)`` to its new rate, None for a label
        gone; ``full``: everything was read again and ``changed`` holds every rate (a label it leaves
        out is gone). :attr:`totals` ``.rates`` holds them all."""
        placements = Placements(policy, lambda name: _get(caches, NODE, name), state.node_flavors,
                                state.resource_flavors, state.cluster_queues)
        pools = (tuple(sorted(placements.pools.items())),
                 tuple(sorted((k, tuple(sorted(v.items()))) for k, v in placements.labels.items())))
        changes = {kind: self._changes(caches, kind) for kind in (DEVICES, NODE, POD, QUEUE, WORKLOAD)}
        full = policy is not self.policy or pools != self.pools or changes[QUEUE] != [] \
            or any(keys is None for keys in changes.values())
        if full:
            self.policy, self.pools, self.totals = policy, pools, RateTotals()
            self.queues = local_queues(_objects(caches, QUEUE))
            self._index_pods(policy, _objects(caches, POD))
            nodes = {name for _, name in _keys(caches, DEVICES)}
            workloads = _keys(caches, WORKLOAD)
        else:
            nodes = self._pods_changed(policy, caches, changes[POD])
            nodes |= {name for _, name in changes[DEVICES] + changes[NODE]}
            nodes |= _flavors_changed(self.node_flavors, state.node_flavors)
            workloads = changes[WORKLOAD]
        self.node_flavors = state.node_flavors
        touched: set[tuple[str, tuple]] = set()
        for node in nodes:
            devices = _get(caches, DEVICES, node)
            touched |= self.totals.replace((DEVICES, node), None if devices is None else node_part(
                policy, devices, list(self.pods.get(node, {}).values()), placements.of(node), self.queues,
                (node,) if self.by_node else ()))
        for ns, name in workloads:
            wl = _get(caches, WORKLOAD, name, ns)
            touched |= self.totals.replace((WORKLOAD, ns, name),
                                           None if wl is None else workload_part(policy, wl))
        self.recomputed = len(nodes)
        rates = self.totals.rates
        return full, {(which, labels): getattr(rates, which).get(labels) for which, labels in touched}

    def _changes(self, caches: Mapping, kind: str) -> list[tuple[str, str]] | None:
        cache = caches.get(kind)
        if cache is None:
            return []
        version, keys = cache.changes(self.seen.get(kind, 0))
        self.seen[kind] = version
        return keys

    def _index_pods(self, policy, pods) -> None:
        self.pods, self.pod_node = {}, {}
        for pod in pods:
            self._put(policy, pod)

    def _put(self, policy, pod: dict) -> str | None:
        """Hold ``pod`` under its node when it is bound and carries an allocation annotation."""
        meta = pod.get("metadata") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or policy.key("allocation") not in (meta.get("annotations") or {}):
            return None
        key = (meta.get("namespace") or "", meta.get("name", ""))
        self.pods.setdefault(node, {})[key] = pod
        self.pod_node[key] = node
        return node

    def _pods_changed(self, policy, caches: Mapping, keys: list[tuple[str, str]]) -> set[str]:
        """Apply the changed Pods; the nodes they were or are on."""
        nodes = set()
        for key in keys:
            old = self.pod_node.pop(key, None)
            if old is not None:
                self.pods.get(old, {}).pop(key, None)
                nodes.add(old)
            pod = _get(caches, POD, key[1], key[0])
            new = self._put(policy, pod) if pod is not None else None
            if new is not None:
                nodes.add(new)
        return nodes


def _flavors_changed(before: Mapping[str, list[str]], after: Mapping[str, list[str]]) -> set[str]:
    if before == after:
        return set()
    return {node for node in set(before) | set(after) if before.get(node) != after.get(node)}


def _get(caches: Mapping, kind: str, name: str, namespace: str = "") -> dict | None:
    cache = caches.get(kind)
    return cache.get(name, namespace) if cache is not None else None


def _objects(caches: Mapping, kind: str) -> list[dict]:
    cache = caches.get(kind)
    return cache.objects() if cache is not None else []


def _keys(caches: Mapping, kind: str) -> list[tuple[str, str]]:
    cache = caches.get(kind)
    return cache.keys() if cache is not None else []
