"""The node pin's flavor term and the required node-affinity placement (docs/concepts/instances.md,
"Pinned to a node"; the shared pin of docs/concepts/four-views.md follows the same placement).

Kueue assigns a ResourceFlavor by matching a Pod's node selector and required node affinity against
each flavor's ``spec.nodeLabels``, reading only the label keys those flavors carry. A pin by
``kubernetes.io/hostname`` alone is therefore invisible to it: the first flavor with free quota wins,
whether or not its nodes include the pinned one. :func:`pin_requirements` turns the pinned Node's
labels into requirements on exactly those keys, so that the only flavors Kueue can match are the
ones holding that Node (:func:`flavors_holding`); the scheduler reads the same requirements against
the real Node, which satisfies them by construction.

Pure functions on plain JSON values (dicts, lists, strings); used by the Instance Pod rendering
(``runtime.engine.instances``) and, through CEL, by the Pod and Workload webhooks.
"""
from __future__ import annotations

from typing import Iterable, Mapping


def _node_labels(flavor: Mapping) -> Mapping[str, str]:
    return ((flavor or {}).get("spec") or {}).get("nodeLabels") or {}


def queue_flavors(queue: Mapping | None, flavors: Iterable[Mapping]) -> list[Mapping]:
    """The ResourceFlavors of ``queue`` (a ClusterQueue) in its ``resourceGroups`` order, taken from
    ``flavors`` by ``metadata.name``; names without an object are skipped. ``[]`` for no queue."""
    by_name = {((f.get("metadata") or {}).get("name") or ""): f for f in flavors}
    out: list[Mapping] = []
    for group in ((queue or {}).get("spec") or {}).get("resourceGroups") or []:
        for ref in group.get("flavors") or []:
            flavor = by_name.get(ref.get("name", ""))
            if flavor is not None and flavor not in out:
                out.append(flavor)
    return out


def pool_label_keys(flavors: Iterable[Mapping]) -> list[str]:
    """Every key of the flavors' ``spec.nodeLabels``, in first-appearance order (flavors in queue
    order): the keys Kueue compares a Pod's placement with for that pool."""
    keys: dict[str, None] = {}
    for flavor in flavors:
        for key in _node_labels(flavor):
            keys.setdefault(key, None)
    return list(keys)


def holds(flavor: Mapping, node_labels: Mapping[str, str]) -> bool:
    """True when every ``spec.nodeLabels`` entry of ``flavor`` is a label of the Node (the flavor's
    nodes include it). A flavor without nodeLabels holds every node."""
    return all(node_labels.get(key) == str(value) for key, value in _node_labels(flavor).items())


def flavors_holding(node_labels: Mapping[str, str], flavors: Iterable[Mapping]) -> list[Mapping]:
    """The flavors of ``flavors`` (order kept) that hold a Node labelled ``node_labels``."""
    return [flavor for flavor in flavors if holds(flavor, node_labels)]


def pin_requirements(node_labels: Mapping[str, str], flavors: list[Mapping]) -> list[dict]:
    """Node-selector requirements ``{key, operator, values?}`` that a flavor's nodeLabels satisfy
    exactly when that flavor holds the Node labelled ``node_labels`` (:func:`holds`).

    One per pool label key (:func:`pool_label_keys`) that tells the flavors apart:

    - the Node has the key with value ``v`` and every flavor carries the key: ``In [v]``;
    - the Node has it, some flavors do not carry it, and others carry another value: ``NotIn`` those
      other values (sorted); no requirement when no flavor carries another value;
    - the Node lacks the key: ``DoesNotExist``.

    ``[]`` for no flavors (nothing for Kueue to choose from).
    """
    requirements: list[dict] = []
    for key in pool_label_keys(flavors):
        carried = [str(_node_labels(f)[key]) for f in flavors if key in _node_labels(f)]
        if key not in node_labels:
            requirements.append({"key": key, "operator": "DoesNotExist"})
            continue
        value = str(node_labels[key])
        if len(carried) == len(flavors):
            requirements.append({"key": key, "operator": "In", "values": [value]})
            continue
        others = sorted({v for v in carried if v != value})
        if others:
            requirements.append({"key": key, "operator": "NotIn", "values": others})
    return requirements


def with_node_requirements(affinity: Mapping | None, requirements: list[Mapping]) -> dict:
    """``affinity`` (a Pod's ``spec.affinity``, or None) with ``requirements`` added to its required
    node-affinity terms: no required terms -> one new term holding them; otherwise appended to every
    term with any ``matchExpressions`` or ``matchFields`` (empty terms left alone), none twice.
    A new dict; ``affinity`` is not changed. No requirements -> ``affinity`` as given (copied)."""
    aff = dict(affinity or {})
    if not requirements:
        return aff
    node = dict(aff.get("nodeAffinity") or {})
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not required or not required.get("nodeSelectorTerms"):
        terms = [{"matchExpressions": _appended([], requirements)}]
    else:
        terms = []
        for term in required["nodeSelectorTerms"]:
            term = dict(term)
            if term.get("matchExpressions") or term.get("matchFields"):
                term["matchExpressions"] = _appended(term.get("matchExpressions") or [], requirements)
            terms.append(term)
    node["requiredDuringSchedulingIgnoredDuringExecution"] = {**(required or {}), "nodeSelectorTerms": terms}
    aff["nodeAffinity"] = node
    return aff


def _appended(expressions: list, requirements: list[Mapping]) -> list:
    out = list(expressions)
    for requirement in requirements:
        if requirement not in out:
            out.append(dict(requirement))
    return out
