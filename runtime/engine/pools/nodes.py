"""Node facts as pool derivation reads them (spec/node-facts.md §4, §5.3; spec/pools.md §1-§2.1).

* Effective labels: where NodeFeatures name a node (label ``nfd.node.kubernetes.io/node-name``), the
  keys under the propagated prefixes are replaced by the union of their ``spec.labels`` — what NFD
  master (or the built-in propagation) makes the Node carry. Fit labels are exempt.
* gKey: the longest key under ``general.feature.gpustack.ai/`` whose remainder has no `.` and whose
  value is "true". aKeys: keys under ``acceleratable.feature.gpustack.ai/`` with value "true", no `.`,
  a `-`, and a known manufacturer before the first `-`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from runtime.model.normalize import parse_int_label
from runtime.engine.policy import Policy
from runtime.engine.snapshot import Snapshot, annotations_of, is_deleting, labels_of, name_of


@dataclass(frozen=True)
class NodeView:
    """One Node after propagation: its name, effective labels, annotations and parsed keys."""

    name: str
    labels: dict[str, str]
    annotations: dict[str, str]
    managed: bool
    gkey: str | None
    cores: int
    os: str
    arch: str
    akeys: dict[str, int] = field(default_factory=dict)  # aKey -> per-node count


def effective_node_labels(policy: Policy, snapshot: Snapshot) -> dict[str, dict[str, str]]:
    """Node name -> labels after NodeFeature propagation (see module docstring)."""
    node_key = policy.key("nodeFeatureNode")
    prefixes = tuple(policy.labels.propagatedPrefixes)
    fit = policy.labels.fitLabelSuffix
    by_node: dict[str, dict[str, str]] = {}
    for nf in snapshot.list("NodeFeature"):
        node = labels_of(nf).get(node_key)
        if not node or is_deleting(nf):
            continue
        merged = by_node.setdefault(node, {})
        for key, value in ((nf.get("spec") or {}).get("labels") or {}).items():
            merged[key] = str(value)
    out: dict[str, dict[str, str]] = {}
    for node in snapshot.list("Node"):
        name = name_of(node)
        labels = dict(labels_of(node))
        if name in by_node:
            labels = {k: v for k, v in labels.items()
                      if not k.startswith(prefixes) or fit in k.split("/", 1)[0] + "/"}
            labels.update(by_node[name])
        out[name] = labels
    return out


def read_node(policy: Policy, name: str, labels: dict[str, str], annotations: dict[str, str]) -> NodeView:
    """Parse one node's labels into a :class:`NodeView` (pools.md §1)."""
    general = policy.prefix("general")
    acc = policy.prefix("acceleratable")
    gkey = None
    akeys: dict[str, int] = {}
    for key, value in labels.items():
        if value != "true":
            continue
        if key.startswith(general):
            rest = key[len(general):]
            if "." not in rest and (gkey is None or len(rest) > len(gkey) or (len(rest) == len(gkey) and rest < gkey)):
                gkey = rest
        elif key.startswith(acc):
            rest = key[len(acc):]
            if "." in rest or "-" not in rest or policy.manufacturer_of_key(rest) is None:
                continue
            akeys[rest] = parse_int_label(labels.get(f"{acc}{rest}{policy.suffix('count')}"))
    cores = parse_int_label(labels.get(f"{general}{gkey}{policy.suffix('count')}")) if gkey else 0
    managed = bool(policy.derivation.managed.evaluate({"labels": labels, "managedKey": policy.key("managed")}))
    return NodeView(
        name=name, labels=labels, annotations=annotations, managed=managed, gkey=gkey, cores=cores,
        os=labels.get(policy.key("os"), ""), arch=labels.get(policy.key("arch"), ""), akeys=dict(sorted(akeys.items())),
    )


def node_views(policy: Policy, snapshot: Snapshot,
               effective: dict[str, dict[str, str]] | None = None) -> list[NodeView]:
    """Every Node of the snapshot (deleting ones excluded), in name order.

    ``effective``: :func:`effective_node_labels` of ``snapshot`` when the caller already has it.
    """
    if effective is None:
        effective = effective_node_labels(policy, snapshot)
    views = []
    for node in snapshot.list("Node"):
        if is_deleting(node):
            continue
        name = name_of(node)
        views.append(read_node(policy, name, effective[name], dict(annotations_of(node))))
    return views
