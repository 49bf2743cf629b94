"""Kubelet PodResources -> allocation annotations (docs/agent.md "The Devices object and its ledger"). Pure.

Input ``pod_resources`` is the PodResources v1 ``List`` answer as JSON-shaped dicts, the way
:func:`runtime.kube.podresources.list_pod_resources` returns it::

    [{"name": "p", "namespace": "demo",
      "containers": [{"name": "main",
                      "devices": [{"resourceName": "<domain>/<base>.sliced", "deviceIds": ["<id>::3"]}]}]}]

For every container's devices:

* resource name -> family and ``<base>`` through :func:`runtime.model.resourcefamily.resource_family`
  (docs/reference/controller.md "Pod accelerator requests"), ``<base>`` -> manufacturer
  (rules/manufacturers.yaml); keys of family ``none`` or ``visibility`` are skipped;
* device ID -> accelerator of that manufacturer in the Devices ``spec``: the ID equals the accelerator
  ``id``, or starts with it followed by ``podResources.deviceIdSeparator`` (``::``); a MIG device UUID
  listed in the probe facts (``migDevices``) maps to its parent accelerator, profile and placement;
* charge: exclusive D and shared SHARE (rules/constants.yaml); sliced = the container's
  ``<base>.sliced.units`` request, partitioned = its ``<base>.partitioned.units`` request (key
  templates rules/agent.yaml ``capacity``), an integer in 1..D (requests, else limits, of the Pod spec).

A partitioned device that is not a known MIG device takes its profile from the container's single
``<base>.partitioned.<kind>-<profile>`` request and no placement (the ledger then takes the lowest
free legal placement, docs/reference/controller.md "Pod admission"). A device that cannot be mapped is ignored
and reported as a Warning ``InvalidAllocation`` Event on the Pod (messages in rules/agent.yaml
``podResources.messages``).

Output per Pod: ``{container: [{id, manufacturer, accelerators: [{id, index, mode, allocated,
[allocatedPhysicalProfile, allocatedPhysicalPlacements]}]}]}``, groups in Devices-spec order, accelerators by
index (then placement start), one entry per (container, accelerator) except one per partition instance. Pods
without mapped devices, and PodResources entries naming a Pod the API does not list on the node, get nothing.
"""
from __future__ import annotations

import json
from decimal import Decimal
from typing import Any, Mapping, Sequence

from runtime.engine.devices.devicesobject import profile_spelling
from runtime.engine.devices.ledger import LedgerEvent
from runtime.engine.devices.nodefacts import agent_rules
from runtime.model.normalize import QuantityError, parse_quantity
from runtime.engine.policy import Policy
from runtime.engine.resourcekeys import classifier_manufacturers, classifier_table
from runtime.model.resourcefamily import resource_family
from runtime.model.facts import AcceleratorFacts

PodKey = tuple[str, str]   # (namespace, name)


def pod_key(pod: Mapping[str, Any]) -> PodKey:
    """``(namespace, name)`` of a Pod object."""
    meta = pod.get("metadata") or {}
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))


def mig_device_index(policy: Policy, accelerators: Sequence[AcceleratorFacts]) -> dict[
        str, tuple[str, str, tuple[int, int] | None]]:
    """``{MIG device uuid: (parent accelerator uuid, published profile name, (start, length) or None)}``
    from the probe facts; devices whose profile has no publishable spelling are left out."""
    out: dict[str, tuple[str, str, tuple[int, int] | None]] = {}
    for acc in accelerators:
        for dev in acc.migDevices:
            name = profile_spelling(policy, acc.manufacturer, dev.profile)
            if name is None:
                continue
            place = (dev.placement.start, dev.placement.length) if dev.placement else None
            out[dev.uuid] = (acc.uuid, name, place)
    return out


def _container_requests(pod: Mapping[str, Any], container: str) -> dict[str, Any]:
    """The container's resource quantities by key: requests, else limits (init and app containers)."""
    spec = pod.get("spec") or {}
    for list_name in ("containers", "initContainers"):
        for ctr in spec.get(list_name) or []:
            if isinstance(ctr, dict) and ctr.get("name") == container:
                res = ctr.get("resources") or {}
                return {**(res.get("limits") or {}), **(res.get("requests") or {})}
    return {}


def _units(value: Any, credits: int) -> int | None:
    """A units request as an integer in 1..``credits``, else None (``320k`` -> 320000)."""
    if value is None:
        return None
    try:
        q = parse_quantity(value)
    except QuantityError:
        return None
    if q != q.to_integral_value() or not Decimal(1) <= q <= credits:
        return None
    return int(q)


_Hit = tuple[int, Mapping[str, Any], Mapping[str, Any]]   # (group order, group spec, accelerator spec)


def _resolve(device: str, manufacturer: str, by_id: Mapping[tuple[str, str], _Hit],
             mig_devices: Mapping[str, tuple[str, str, tuple[int, int] | None]],
             separator: str) -> tuple[_Hit | None, str, tuple[int, int] | None]:
    """Device ID -> (accelerator hit or None, MIG profile or "", MIG placement or None)."""
    if device in mig_devices:
        parent, profile, placement = mig_devices[device]
        return by_id.get((manufacturer, parent)), profile, placement
    # the accelerator id itself, or "<id><separator><anything>"
    hit = by_id.get((manufacturer, device)) or by_id.get((manufacturer, device.split(separator, 1)[0]))
    return hit, "", None


def _groups(found: Mapping[tuple, tuple[Mapping[str, Any], dict[str, Any]]]) -> list[dict[str, Any]]:
    """Accelerator entries (keyed so that sorting gives spec order) -> allocation groups."""
    groups: list[dict[str, Any]] = []
    for sort_key in sorted(found):
        group, item = found[sort_key]
        if not groups or (groups[-1]["id"], groups[-1]["manufacturer"]) != (
                group["id"], group["manufacturer"]):
            groups.append({"id": group["id"], "manufacturer": group["manufacturer"], "accelerators": []})
        groups[-1]["accelerators"].append(item)
    return groups


def pod_allocations(policy: Policy, node: str, spec: Mapping[str, Any],
                    pod_resources: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]],
                    mig_devices: Mapping[str, tuple[str, str, tuple[int, int] | None]]
                    | None = None) -> tuple[dict[PodKey, dict[str, list[dict[str, Any]]]], list[LedgerEvent]]:
    """Map PodResources onto allocation annotations (see module docstring).

    ``spec`` is the node's Devices ``spec``; ``pods`` the
    Pods the API lists on the node (their spec supplies the units requests); ``mig_devices`` from
    :func:`mig_device_index`. Returns ``({(namespace, name): annotation document}, InvalidAllocation
    events)``. Never raises for bad input data; every device that cannot be mapped yields one event
    (:class:`_DeviceMapper`).
    """
    mapper = _DeviceMapper(policy, node, spec, mig_devices or {})
    api_pods = {pod_key(p): p for p in pods}
    out: dict[PodKey, dict[str, list[dict[str, Any]]]] = {}
    for entry in pod_resources:
        key = (str(entry.get("namespace", "")), str(entry.get("name", "")))
        pod = api_pods.get(key)
        if pod is None:
            continue
        doc: dict[str, list[dict[str, Any]]] = {}
        for ctr in sorted(entry.get("containers") or [], key=lambda c: str(c.get("name", ""))):
            groups = mapper.container_groups(key, pod, ctr)
            if groups:
                doc[str(ctr.get("name", ""))] = groups
        if doc:
            out[key] = doc
    return out, mapper.events


class _DeviceMapper:
    """The tables :func:`pod_allocations` maps devices with (the Devices spec by accelerator id, the
    resource-key classifier, the modes of rules/agent.yaml) and the Events it collects."""

    def __init__(self, policy: Policy, node: str, spec: Mapping[str, Any],
                 mig_devices: Mapping[str, tuple[str, str, tuple[int, int] | None]]):
        self.policy, self.node, self.mig_devices = policy, node, mig_devices
        self.rules = agent_rules(policy)
        self.modes = self.rules.ledger.modes
        self.credits = policy.constants.creditsPerAccelerator
        self.table = classifier_table(policy, self.rules.podResources.resourceKeysParams)
        self.manufacturers = classifier_manufacturers(policy)
        self.manu_of_base = {m["base"]: m for m in self.manufacturers}
        self.family_mode = {"exclusive": self.modes.exclusive, "shared": self.modes.shared,
                            "sliced": self.modes.sliced, "partitioned": self.modes.partitioned}
        self.by_id: dict[tuple[str, str], _Hit] = {}
        for order, g in enumerate(spec.get("groups", [])):
            for a in g["accelerators"]:
                self.by_id[(g["manufacturer"], a["id"])] = (order, g, a)
        self.events: list[LedgerEvent] = []

    def container_groups(self, key: PodKey, pod: Mapping[str, Any],
                         ctr: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The allocation groups of one PodResources container (spec order)."""
        cname = str(ctr.get("name", ""))
        requests = _container_requests(pod, cname)
        # (group order, accelerator index, placement start, accelerator id, instance) -> (group, entry)
        found: dict[tuple, tuple[Mapping[str, Any], dict[str, Any]]] = {}
        for dev in ctr.get("devices") or []:
            resource = str(dev.get("resourceName", ""))
            info = resource_family(resource, self.table, self.manufacturers)
            mode = self.family_mode.get(info["family"])
            if mode is None:
                continue
            for device in dev.get("deviceIds") or []:
                device = str(device)

                def warn(which: str, **fields: Any) -> None:
                    text = getattr(self.rules.podResources.messages, which).format(
                        container=cname, resource=resource, device=device, node=self.node,
                        manufacturer=self.manu_of_base[info["base"]]["id"], **fields)
                    self.events.append(LedgerEvent("Pod", key[0], key[1],
                                                   self.rules.ledger.events.invalidAllocation, text))

                hit = self.device_item(device, mode, info, requests, warn)
                if hit is not None:
                    found.setdefault(hit[0], hit[1:])
        return _groups(found)

    def device_item(self, device: str, mode: int, info: Mapping[str, Any], requests: Mapping[str, Any],
                    warn) -> tuple[tuple, Mapping[str, Any], dict[str, Any]] | None:
        """``(sort key, group, annotation entry)`` of one device ID, or None after ``warn(message key,
        **fields)`` when it cannot be mapped: no such accelerator, no units request, no profile."""
        modes, rules = self.modes, self.rules
        manu = self.manu_of_base[info["base"]]
        hit, profile, placement = _resolve(device, manu["id"], self.by_id, self.mig_devices,
                                           rules.podResources.deviceIdSeparator)
        if hit is None:
            warn("unknownDevice")
            return None
        order, group, acc = hit
        if mode == modes.exclusive:
            allocated = self.credits
        elif mode == modes.shared:
            allocated = self.policy.constants.share
        else:
            template = rules.capacity.slicedUnits if mode == modes.sliced else rules.capacity.partitionedUnits
            units_key = template.format(base=info["base"])
            allocated = _units(requests.get(units_key), self.credits)
            if allocated is None:
                warn("missingUnits", key=units_key, credits=self.credits, value=requests.get(units_key))
                return None
        item: dict[str, Any] = {"id": acc["id"], "index": acc["index"], "mode": mode, "allocated": allocated}
        instance = ""
        if mode == modes.partitioned:
            if not profile:
                prefix = rules.capacity.partitionedProfile.format(
                    base=info["base"], kind=manu.get("partitionKind") or "", profile="")
                named = {resource_family(k, self.table, self.manufacturers)["profile"] for k in requests
                         if str(k).startswith(prefix)} - {""}
                if len(named) != 1:
                    warn("missingProfile", prefix=prefix)
                    return None
                profile = named.pop()
            item["allocatedPhysicalProfile"] = profile
            if placement is not None:
                item["allocatedPhysicalPlacements"] = [{"start": placement[0], "length": placement[1]}]
            instance = device
        return (order, acc["index"], placement[0] if placement else -1, acc["id"], instance), group, item


def annotation_text(doc: Mapping[str, Any]) -> str:
    """The annotation value for ``doc``: compact JSON, keys in the documented order."""
    return json.dumps(doc, separators=(",", ":"))


def annotation_differs(policy: Policy, pod: Mapping[str, Any], doc: Mapping[str, Any]) -> bool:
    """Whether the Pod's allocation annotation (rules/labels.yaml role ``allocation``) is not ``doc``
    as JSON (absent and unparsable values differ; formatting does not)."""
    current = ((pod.get("metadata") or {}).get("annotations") or {}).get(policy.key("allocation"))
    if current is None:
        return True
    try:
        return json.loads(current) != doc
    except ValueError:
        return True


def with_annotations(policy: Policy, pods: Sequence[Mapping[str, Any]],
                     docs: Mapping[PodKey, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Copies of ``pods`` whose allocation annotation is replaced by ``docs`` where given (the ledger
    then sees what the agent is about to write); other Pods are returned unchanged."""
    key = policy.key("allocation")
    out: list[dict[str, Any]] = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        doc = docs.get(pod_key(pod))
        if doc is None:
            out.append(dict(pod))
            continue
        annotations = {**(meta.get("annotations") or {}), key: annotation_text(doc)}
        out.append({**pod, "metadata": {**meta, "annotations": annotations}})
    return out
