"""Closed nodes: the Nodes that take no new Pod of a pool (docs/concepts/out-of-service.md "Cordoned and
tainted nodes").

A Node is closed when it is cordoned (``spec.unschedulable``, unless the Pod tolerates the cordon's taint,
as kube-scheduler's NodeUnschedulable plugin reads it) or carries a taint with one of the rules' effects
that the Pod's tolerations do not tolerate (kube-scheduler's TaintToleration rule). Which effects count,
the tolerations every Instance Pod is taken to have and the words are rules/pools/queues.yaml
``closedNodes``. A closed node keeps its flavors, capacity and quota; the four views offer nothing of it as
remaining or once-max, and the node-devices check places nothing on it. Pure.
"""
from __future__ import annotations

from typing import Iterable, Mapping

from runtime.engine.policy import Policy
from runtime.engine.snapshot import Snapshot, name_of


def tolerates(toleration: Mapping, taint: Mapping) -> bool:
    """Whether one toleration (the Pod API's shape) tolerates one taint: an empty key with ``Exists``
    tolerates every taint; otherwise the keys are equal, the operator is ``Exists`` or the values are
    equal (``Equal``, the default), and the effect is empty or the taint's."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    operator = toleration.get("operator") or "Equal"
    key = toleration.get("key") or ""
    if not key:
        return operator == "Exists"
    if key != taint.get("key"):
        return False
    return operator == "Exists" or (toleration.get("value") or "") == (taint.get("value") or "")


def closed_reason(policy: Policy, node: Mapping, tolerations: Iterable[Mapping] = ()) -> str | None:
    """Why ``node`` takes no new Pod with ``tolerations`` (besides the rules' own), in the words of
    ``closedNodes.messages``; None when it is open."""
    rules = policy.queues.closedNodes
    spec = node.get("spec") or {}
    tolerations = [*rules.tolerations, *tolerations]
    name = name_of(node)
    if rules.unschedulable and spec.get("unschedulable"):
        cordon = {"key": rules.unschedulableTaint, "effect": "NoSchedule"}
        if not any(tolerates(t, cordon) for t in tolerations):
            return rules.messages.cordoned.format(node=name)
    for taint in spec.get("taints") or []:
        if taint.get("effect") not in rules.taintEffects:
            continue
        if taint.get("key") == rules.unschedulableTaint and spec.get("unschedulable") and rules.unschedulable:
            continue  # the cordon's own taint: said above (or tolerated)
        if not any(tolerates(t, taint) for t in tolerations):
            return rules.messages.tainted.format(node=name, key=taint.get("key", ""),
                                                 value=taint.get("value", ""), effect=taint.get("effect"))
    return None


def closed_nodes(policy: Policy, snapshot: Snapshot) -> dict[str, str]:
    """Node name -> why it is closed, for every closed Node of ``snapshot`` with only the rules'
    tolerations (what the four views read)."""
    out: dict[str, str] = {}
    for node in snapshot.list("Node"):
        spec = node.get("spec") or {}
        if not spec.get("unschedulable") and not spec.get("taints"):
            continue
        reason = closed_reason(policy, node)
        if reason is not None:
            out[name_of(node)] = reason
    return out
