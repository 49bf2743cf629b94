"""ResourceClaim allocations -> the node's allocations, for the ledger of a DRA node (docs/concepts/dra.md
"The ledger from claims"). Pure.

Every claim whose ``status.allocation.devices.results[]`` names a (driver, pool, device) of the node's
reading (:class:`runtime.engine.devices.draslices.DraReading` ``devices``) and whose
``status.reservedFor[]`` names a Pod of the node (``resource`` ``pods`` of rules/dra.yaml, same
namespace, name and uid) not in a finished phase charges that device to that Pod: a whole
accelerator, mode 1 (D credits). A device that is a partition (a MIG device) charges nothing: its GPU
offers nothing on a DRA node (docs/concepts/dra.md "Views per manufacturer").

The output has the shape of kubelet's PodResources ``List`` (:mod:`runtime.engine.devices.podresources`),
so the rest is the PodResources path of docs/agent.md "The Devices object and its ledger": the allocation
annotation computed per Pod and written when it differs, the ledger rebuilt from the annotations. The device's
resource name is the manufacturer's ``<base>`` (the exclusive family).

Which container holds a device (the annotation is per container): the container the Pod's
``status.extendedResourceClaimStatus.requestMappings`` names for the result's request (a claim the
scheduler made for an extended resource such as ``nvidia.com/gpu``); else the containers whose
``resources.claims`` name the Pod's claim (and the request, when they name one); else the first app
container. A device is charged once per Pod, to the first such container in manifest order.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from runtime.engine.devices.draslices import DraReading, dra_drivers, dra_policy
from runtime.engine.devices.nodefacts import agent_rules
from runtime.engine.policy import Policy


def claim_pod_resources(policy: Policy, reading: DraReading, claims: Iterable[Mapping[str, Any]],
                        pods: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """PodResources-shaped ``[{name, namespace, containers: [{name, devices: [{resourceName,
    deviceIds}]}]}]`` for the node's Pods holding a whole accelerator of ``reading`` (see the module
    docstring), by namespace and name. Never raises for bad claim data (such a result is skipped)."""
    finished = set(agent_rules(policy).ledger.finishedPhases)
    pod_resource = dra_policy(policy).podResource
    drivers = dra_drivers(policy)
    wholes = {a["uuid"] for a in reading.accelerators}
    by_key = {(_meta(p).get("namespace", ""), _meta(p).get("name", "")): p for p in pods}
    held: dict[tuple[str, str], dict[str, dict[str, list[str]]]] = {}   # pod -> container -> base -> ids
    for claim in claims:
        meta = _meta(claim)
        status = claim.get("status") or {}
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        for ref in status.get("reservedFor") or []:
            if not isinstance(ref, Mapping) or ref.get("resource") != pod_resource or ref.get("apiGroup"):
                continue
            key = (meta.get("namespace", ""), str(ref.get("name", "")))
            pod = by_key.get(key)
            if pod is None or _meta(pod).get("uid", ref.get("uid")) != ref.get("uid") \
                    or (pod.get("status") or {}).get("phase") in finished:
                continue
            for result in results:
                if not isinstance(result, Mapping):
                    continue
                uuid = reading.devices.get((str(result.get("driver", "")), str(result.get("pool", "")),
                                            str(result.get("device", ""))))
                if uuid not in wholes:
                    continue
                base = policy.manufacturers[drivers[result["driver"]].manufacturer].base
                container = _container(pod, meta.get("name", ""), str(result.get("request", "")))
                per_pod = held.setdefault(key, {})
                if any(uuid in ids for c in per_pod.values() for ids in c.values()):
                    continue
                per_pod.setdefault(container, {}).setdefault(base, []).append(uuid)
    return [{"namespace": ns, "name": name,
             "containers": [{"name": c,
                             "devices": [{"resourceName": b, "deviceIds": ids} for b, ids in bases.items()]}
                            for c, bases in containers.items()]}
            for (ns, name), containers in sorted(held.items())]


def _container(pod: Mapping[str, Any], claim: str, request: str) -> str:
    """The container that holds a claim's result for ``request`` (module docstring); "" when the Pod
    has no container at all."""
    request = request.split("/", 1)[0]   # <request>/<subrequest> of a firstAvailable request
    status = pod.get("status") or {}
    extended = status.get("extendedResourceClaimStatus") or {}
    if extended.get("resourceClaimName") == claim:
        for mapping in extended.get("requestMappings") or []:
            if mapping.get("requestName") == request and mapping.get("containerName"):
                return str(mapping["containerName"])
    pod_claims = {s.get("name") for s in status.get("resourceClaimStatuses") or [] if s.get(
        "resourceClaimName") == claim}
    spec = pod.get("spec") or {}
    pod_claims |= {
        c.get("name") for c in spec.get("resourceClaims") or [] if c.get("resourceClaimName") == claim}
    containers = list(spec.get("initContainers") or []) + list(spec.get("containers") or [])
    for ctr in containers:
        for used in ((ctr.get("resources") or {}).get("claims") or []):
            if used.get("name") in pod_claims and used.get("request", request) in (request, ""):
                return str(ctr.get("name", ""))
    app = spec.get("containers") or containers
    return str(app[0].get("name", "")) if app else ""


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}
