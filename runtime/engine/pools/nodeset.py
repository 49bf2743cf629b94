"""The node facts of a derive, updated from the Nodes and NodeFeatures that changed.

:func:`runtime.engine.pools.derive.derive` with a memo reads every node's effective labels and
NodeView through :class:`NodeSet`: the first call judges every NodeFeature (decision 20) and reads
every Node; a later call compares the snapshot's Node and NodeFeature maps with the last ones (by
object identity, a C-speed pass: a snapshot's objects are never mutated and a changed object is a new
one) and judges and reads again only the NodeFeatures and Nodes that changed and the nodes they
name. The results equal :func:`trusted_node_features`, :func:`effective_node_labels` and
:func:`node_views` of the whole snapshot (tests/engine/test_incremental_derive.py).
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Callable, Mapping

from runtime.engine.policy import Policy
from runtime.engine.pools.nodes import NodeView, node_feature_judge
from runtime.engine.snapshot import Snapshot

_EMPTY: Mapping = MappingProxyType({})
NodeReader = Callable[[dict, tuple], "tuple[dict[str, str], NodeView | None]"]


def changed_keys(old: Mapping, new: Mapping) -> set:
    """Keys whose value is not the same object in ``old`` and ``new`` (added, removed or replaced)."""
    changed = {key for key, value in new.items() if old.get(key) is not value}
    changed.update(old.keys() - new.keys())
    return changed


class NodeSet:
    """What one derive read of the nodes, kept for the next: ``result`` is (warnings for ignored
    NodeFeatures in NodeFeature order, node name -> effective labels, NodeViews in name order);
    ``marks``: node name -> its effective ``gpustack.ai/managed`` label, the same map while no mark
    changes (what the Devices' mirrored label reads).
    ``read(node, features)`` gives one Node's (effective labels, NodeView or None when deleting)."""

    def __init__(self, policy: Policy, namespace: str | None, read: NodeReader):
        self.namespace = namespace
        self.read = read
        self.judge = node_feature_judge(policy, namespace)
        self.managed_key = policy.key("managed")
        self.marks: dict[str, str | None] = {}  # node name -> its effective managed label (None: absent)
        self.nodes: Mapping = _EMPTY  # the Node and NodeFeature maps last read
        self.features: Mapping = _EMPTY
        self.verdicts: dict[tuple, tuple] = {}  # NodeFeature key -> (node, trusted, warning)
        self.naming: dict[str, set[tuple]] = {}  # node name -> keys of the NodeFeatures naming it
        self.trusted: dict[str, tuple[dict, ...]] = {}
        self.effective: dict[str, dict[str, str]] = {}
        self.views: dict[str, NodeView] = {}
        self.names: list[str] = []  # every Node's name, in name order
        self.result: tuple[list[str], dict[str, dict[str, str]], list[NodeView]] = ([], {}, [])

    def update(self, snapshot: Snapshot) -> tuple[list[str], dict[str, dict[str, str]], list[NodeView]]:
        """The result for ``snapshot``: the last one when its Node and NodeFeature maps are the same
        objects, else updated by what changed (new dicts and lists: a result is never mutated)."""
        nodes = snapshot.objects.get("Node") or _EMPTY
        features = snapshot.objects.get("NodeFeature") or _EMPTY
        if nodes is self.nodes and features is self.features:
            return self.result
        affected = self._judge(features, changed_keys(self.features, features))
        names = {key[1] for key in changed_keys(self.nodes, nodes)} | affected
        effective, views, marks = dict(self.effective), dict(self.views), self.marks
        for name in names:
            node = nodes.get(("", name))
            if node is None:
                effective.pop(name, None)
                views.pop(name, None)
                if name in marks:
                    marks = dict(marks) if marks is self.marks else marks
                    del marks[name]
                continue
            labels, view = self.read(node, self.trusted.get(name, ()))
            effective[name] = labels
            mark = labels.get(self.managed_key)
            if name not in marks or marks[name] != mark:  # a new map only when a mark changes
                marks = dict(marks) if marks is self.marks else marks
                marks[name] = mark
            if view is None:
                views.pop(name, None)
            else:
                views[name] = view
        warnings = [w for _, (_, _, w) in sorted(self.verdicts.items()) if w] if self._warned else []
        if nodes.keys() != self.nodes.keys():
            self.names = [key[1] for key in sorted(nodes)]
        order = [views[name] for name in self.names if name in views] if names else self.result[2]
        self.nodes, self.features, self.effective, self.views, self.marks = (nodes, features, effective,
                                                                             views, marks)
        self.result = (warnings, effective, order)
        return self.result

    _warned = False  # some NodeFeature was ever ignored with a warning (else the list is empty)

    def _judge(self, features: Mapping, keys: set) -> set[str]:
        """Judge the NodeFeatures of ``keys`` again; the names of the nodes whose trusted ones changed."""
        affected: set[str] = set()
        for key in keys:
            old = self.verdicts.pop(key, None)
            if old is not None and old[0]:
                self.naming[old[0]].discard(key)
                affected.add(old[0])
            nf = features.get(key)
            if nf is None:
                continue
            verdict = self.judge(nf)
            self.verdicts[key] = verdict
            self._warned = self._warned or bool(verdict[2])
            if verdict[0]:
                self.naming.setdefault(verdict[0], set()).add(key)
                affected.add(verdict[0])
        for name in affected:
            trusted = tuple(
                features[key] for key in sorted(self.naming.get(name, ())) if self.verdicts[key][1])
            if trusted:
                self.trusted[name] = trusted
            else:
                self.trusted.pop(name, None)
                if not self.naming.get(name):
                    self.naming.pop(name, None)
        return affected
