"""Kueue's flavor choice for one PodSet, as its flavor assigner makes it (test-side model).

Kueue (pkg/scheduler/flavorassigner) tries a resource group's flavors in the ClusterQueue's order and
takes the first whose ``spec.nodeLabels`` match the PodSet's node selector and required node
affinity, reading only the label keys that the group's flavors carry: every other key is dropped
first, and a term left without expressions matches every flavor. Quota is not modelled (the seed's
pools are idle): the first matching flavor is the one Kueue reserves.
"""
from __future__ import annotations

from typing import Optional


def _requirement_matches(req: dict, labels: dict) -> bool:
    key, op, values = req["key"], req["operator"], [str(v) for v in req.get("values") or []]
    if op == "In":
        return key in labels and str(labels[key]) in values
    if op == "NotIn":
        return key not in labels or str(labels[key]) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt"):
        if key not in labels:
            return False
        have, bound = int(labels[key]), int(values[0])
        return have > bound if op == "Gt" else have < bound
    raise ValueError(f"operator {op}")


def selector_matches(pod_spec: dict, labels: dict, allowed: set[str]) -> bool:
    """Whether the placement of ``pod_spec`` (nodeSelector, required node affinity) restricted to the
    keys ``allowed`` matches a node labelled ``labels`` (a flavor's nodeLabels)."""
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if key in allowed and labels.get(key) != value:
            return False
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return True
    kept_terms = []
    for term in terms:
        kept = [r for r in term.get("matchExpressions") or [] if r["key"] in allowed]
        if not kept:
            return True   # an emptied term matches any flavor: Kueue skips the affinity check
        kept_terms.append(kept)
    return any(all(_requirement_matches(r, labels) for r in term) for term in kept_terms)


def assign_flavor(pod_spec: dict, queue: dict, flavors: dict[str, dict]) -> Optional[str]:
    """The flavor Kueue assigns the PodSet of ``pod_spec`` in ClusterQueue ``queue`` (first resource
    group), ``flavors`` by name; None when no flavor matches."""
    (group,) = queue["spec"]["resourceGroups"]
    names = [ref["name"] for ref in group["flavors"]]
    allowed = {key for name in names for key in (flavors[name]["spec"].get("nodeLabels") or {})}
    for name in names:
        if selector_matches(pod_spec, flavors[name]["spec"].get("nodeLabels") or {}, allowed):
            return name
    return None
