"""What Kueue v0.17.0 charges for one Pod, as its workload package computes a Workload's PodSet requests
(test-side model; docs/concepts/pools-and-flavors.md "Kueue's resource charging").

:func:`workload_requests` applies the Configuration fragment of
:func:`runtime.engine.pools.kueueconfig.kueue_configuration` to a Pod, so tests show what a queue is
charged without running Kueue; :func:`pod_requests` is the Pod's requests as Kueue sums them.
"""
from __future__ import annotations

import math
from decimal import Decimal
from typing import Mapping

from runtime.model.normalize import parse_quantity


def _container_requests(container: Mapping) -> dict[str, Decimal]:
    """A container's effective requests: ``requests``, a key only in ``limits`` defaulting to its
    limit (kube-apiserver's defaulting of a created Pod)."""
    res = container.get("resources") or {}
    merged = {k: v for k, v in (res.get("limits") or {}).items()}
    merged.update(res.get("requests") or {})
    return {k: parse_quantity(v) for k, v in merged.items()}


def pod_requests(pod_spec: Mapping) -> dict[str, Decimal]:
    """Σ of a Pod's requests as Kueue reads a PodSet template (k8s.io/component-helpers v0.35.3
    ``resource.PodRequests``, used by Kueue v0.17.0 ``pkg/workload/workload.go``
    ``totalRequestsFromPodSets``): app containers and restartable init containers (native sidecars)
    summed; each other init container counts with the sidecars before it; per resource the larger of
    the two; plus ``overhead``. Values are exact decimals (cores for ``cpu``)."""
    total: dict[str, Decimal] = {}
    for container in pod_spec.get("containers") or []:
        for k, v in _container_requests(container).items():
            total[k] = total.get(k, Decimal(0)) + v
    sidecars: dict[str, Decimal] = {}
    init_max: dict[str, Decimal] = {}
    for container in pod_spec.get("initContainers") or []:
        reqs = _container_requests(container)
        if container.get("restartPolicy") == "Always":
            for k, v in reqs.items():
                total[k] = total.get(k, Decimal(0)) + v
                sidecars[k] = sidecars.get(k, Decimal(0)) + v
            use = dict(sidecars)
        else:
            use = dict(reqs)
            for k, v in sidecars.items():
                use[k] = use.get(k, Decimal(0)) + v
        for k, v in use.items():
            init_max[k] = max(init_max.get(k, Decimal(0)), v)
    for k, v in init_max.items():
        total[k] = max(total.get(k, Decimal(0)), v)
    for k, v in (pod_spec.get("overhead") or {}).items():
        total[k] = total.get(k, Decimal(0)) + parse_quantity(v)
    return total


def _value(q: Decimal) -> int:
    """``resource.Quantity.Value()``: rounded up to an integer."""
    return int(math.ceil(q))


def workload_requests(configuration: Mapping, pod: Mapping) -> dict[str, int]:
    """What Kueue v0.17.0 charges for one Pod: its Workload's PodSet requests.

    ``configuration``: a Configuration dict as ``kueue_configuration`` returns (only
    ``resources`` is read); ``pod``: a Pod object (after the mutating webhooks). Returns resource
    name -> Kueue's integer value (``cpu`` in millicores, everything else ``Value()``, rounded up;
    ``resources.ResourceValue``). Semantics, from Kueue v0.17.0 ``pkg/workload/workload.go``:

    1. :func:`pod_requests` of the Pod spec;
    2. ``dropExcludedResources``: a resource whose name starts with any ``excludeResourcePrefixes``
       entry is dropped;
    3. ``applyResourceTransformations``: when no remaining resource is a transformation input the
       requests stay as they are; otherwise for each resource with a transformation, the quantity is
       multiplied by ``Value()`` of the ``multiplyBy`` resource when the Pod requests it, each output
       adds ``output × Value(quantity)``, and the input itself is kept only with ``Retain``; other
       resources pass through.
    """
    resources = configuration.get("resources") or {}
    excluded = list(resources.get("excludeResourcePrefixes") or [])
    transforms = {t["input"]: t for t in resources.get("transformations") or []}
    requests = {k: v for k, v in pod_requests((pod.get("spec") or {})).items()
                if not any(k.startswith(p) for p in excluded)}
    if any(k in transforms for k in requests):
        out: dict[str, Decimal] = {}
        for name, quantity in requests.items():
            mapping = transforms.get(name)
            if mapping is None:
                out[name] = quantity
                continue
            multiply_by = mapping.get("multiplyBy")
            if multiply_by and multiply_by in requests:
                quantity = quantity * _value(requests[multiply_by])
            for output, factor in (mapping.get("outputs") or {}).items():
                out[output] = out.get(output, Decimal(0)) + parse_quantity(factor) * _value(quantity)
            if (mapping.get("strategy") or "Retain") == "Retain":
                out[name] = quantity
        requests = out
    return {
        name: int(math.ceil(q * 1000)) if name == "cpu" else _value(q)
        for name, q in sorted(requests.items())}
