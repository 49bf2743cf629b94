"""Custom CEL functions on Kubernetes objects: the accelerator claims of a Pod's resource keys and
containers (docs/reference/controller.md "Pod accelerator requests") and the node-affinity terms of
its placement (docs/reference/controller.md "Pod admission").

Pure functions on CEL values. The tables they need (resource-key patterns, manufacturers) are passed in
by the rule file, never read here; the logic is :mod:`runtime.model`'s, shared with the node agent and
the admission check: the classifier :func:`runtime.model.resourcefamily.resource_family`, the Pod
demand :mod:`runtime.model.poddemand`, the node pin :mod:`runtime.model.nodepin`.
"""
from __future__ import annotations

from typing import Any

from celpy import celtypes

from runtime.model.nodepin import pin_requirements, queue_flavors, with_node_requirements
from runtime.model.poddemand import pod_containers, pod_demand
from runtime.model.resourcefamily import resource_family
from runtime.rules.cel.library.declare import cel_function
from runtime.rules.cel.library.quantities import rounded_up
from runtime.rules.cel.values import json_of, to_cel


@cel_function(("string", "map", "list"), "map", 3, 1)
def resourceFamily(name, table, manufacturers) -> celtypes.MapType:  # noqa: N802
    """``{family, base, profile}`` of a resource key."""
    return to_cel(resource_family(str(name), json_of(table), json_of(manufacturers)))


def _quantity_text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


_PYTHON_ONLY = ("container", "bases_of")   # pod_containers fields the rules never read


@cel_function(("dyn", "map", "list"), "list", None, 1)
def podContainers(pod, table, manufacturers) -> celtypes.ListType:  # noqa: N802
    """The Pod's containers in manifest order (init, then app) with their accelerator claims:
    :func:`runtime.model.poddemand.pod_containers` (``keys`` as quantity text), less the manifest entry."""
    spec = (json_of(pod) or {}).get("spec") or {}
    out = []
    for c in pod_containers(spec, json_of(table), json_of(manufacturers)):
        item = {k: v for k, v in c.items() if k not in _PYTHON_ONLY}
        item["keys"] = {k: _quantity_text(v) for k, v in c["keys"].items()}
        out.append(item)
    return to_cel(out)


def _cel_value(raw: Any, container: Any, key: str) -> int:
    return rounded_up(raw)   # as qValue: rounded up, 0 when unparsable


@cel_function(("dyn", "map", "list"), "map", None, 1)
def podDemand(pod, table, manufacturers) -> celtypes.MapType:  # noqa: N802
    """The Pod's demand, family -> base -> count / units / profile:
    :func:`runtime.model.poddemand.pod_demand` (sidecars left out, requests over limits, the largest
    sliced and shared container); an unparsable quantity reads as 0, as ``qValue`` does."""
    table = json_of(table)
    spec = (json_of(pod) or {}).get("spec") or {}
    return to_cel(pod_demand(pod_containers(spec, table, json_of(manufacturers)), table, _cel_value))


@cel_function(("dyn", "map"), "map", None, 1)
def withNodeRequirement(affinity, requirement) -> celtypes.MapType:  # noqa: N802
    """``affinity`` with ``requirement`` added to the required node-affinity terms.

    No required terms -> one new term holding it; otherwise appended to every term with any
    ``matchExpressions`` or ``matchFields`` (empty terms left alone), never twice.
    """
    return to_cel(with_node_requirements(json_of(affinity), [json_of(requirement)]))


@cel_function(("dyn", "list"), "map", None, 1)
def withNodeRequirements(affinity, requirements) -> celtypes.MapType:  # noqa: N802
    """``affinity`` with every requirement of the list ``requirements`` added as
    :func:`withNodeRequirement` adds one; an empty list leaves it as it is."""
    return to_cel(with_node_requirements(json_of(affinity), list(json_of(requirements) or [])))


@cel_function(("dyn", "dyn", "list"), "map", 2, 1)
def nodePin(node, queue, flavors) -> celtypes.MapType:  # noqa: N802
    """The pin of Node ``node`` into the pool of ClusterQueue ``queue``: ``{'flavors': [names of the
    pool's flavors, queue order], 'requirements': [...]}`` with the requirements of
    :func:`runtime.model.nodepin.pin_requirements`; the pool's flavors are taken from the list
    ``flavors`` by name. Both lists empty when the node or the queue is empty (``{}``)."""
    node, queue = json_of(node) or {}, json_of(queue) or {}
    if not node or not queue:
        return to_cel({"flavors": [], "requirements": []})
    pool = queue_flavors(queue, json_of(flavors) or [])
    labels = (node.get("metadata") or {}).get("labels") or {}
    return to_cel({"flavors": [(f.get("metadata") or {}).get("name", "") for f in pool],
                   "requirements": pin_requirements(labels, pool)})
