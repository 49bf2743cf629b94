"""InstanceTypes: schedule labels, pool selectors, defaulting, derived types, status.

Sources: docs/concepts/pools-and-flavors.md "Pools: InstanceType + ClusterQueue of one name" (labels,
selectors and derived types), docs/concepts/pools-and-flavors.md "InstanceType admission" (defaulting),
docs/concepts/pools-and-flavors.md "InstanceType status" (status), docs/concepts/pools-and-flavors.md "Queues
and the entrance" (entrance), docs/concepts/pools-and-flavors.md "Kueue's resource charging" (the CPU view's
reserved cores). Name patterns and presets come from rules/pools/*.yaml.
"""
from __future__ import annotations

import copy
import json
import math
from typing import Iterable

from runtime.engine.pools import fourview, presets
from runtime.engine.pools.accelerators import walk_devices
from runtime.engine.pools.kueueconfig import cpu_excluded
from runtime.model.normalize import parse_quantity
from runtime.engine.policy import Policy
from runtime.engine.settings import Settings
from runtime.engine.snapshot import is_deleting, labels_of, name_of



def entrance(policy: Policy, name: str) -> str:
    """The LocalQueue name fronting pool ``name`` (CEL ``spec.entrance``)."""
    return policy.derivation.entrance.evaluate({"name": name,
                                                "entrancePrefix": policy.derivation.entrancePrefix})


def schedule_labels(policy: Policy, spec: dict, aware: bool) -> dict[str, str]:
    """PoolScheduleLabels, from an InstanceType spec and the awareness setting."""
    acceleratable = bool(spec.get("acceleratable"))
    labels = {policy.key("acceleratable"): "true" if acceleratable else "false"}
    if spec.get("os"):
        labels[policy.key("os")] = spec["os"]
    if spec.get("arch"):
        labels[policy.key("arch")] = spec["arch"]
    if acceleratable and spec.get("acceleratorGroup"):
        labels[f"{policy.prefix('acceleratable')}{spec['acceleratorGroup']}"] = "true"
    group = spec.get("generalGroup") or ""
    if aware and group and group != policy.manufacturer_table.genericSentinel:
        labels[f"{policy.prefix('general')}{group}"] = "true"
    return labels


def _feature_selector(policy: Policy, queue_labels: dict[str, str]) -> dict[str, str]:
    prefixes = (policy.prefix("general"), policy.prefix("acceleratable"))
    return {k: v for k, v in queue_labels.items() if k.startswith(prefixes) and v == "true"}


def _incomplete(policy: Policy, queue_labels: dict[str, str]) -> bool:
    """Labels of a type whose spec lacks what names its pool (``os``, ``arch``; ``acceleratorGroup``
    when acceleratable; validation requires them): it selects nothing (read as they are, a type without
    spec would name the CPU pool)."""
    if policy.key("os") not in queue_labels or policy.key("arch") not in queue_labels:
        return True
    return queue_labels.get(policy.key("acceleratable")) == "true" and \
        not any(k.startswith(policy.prefix("acceleratable")) for k in queue_labels)


def flavor_selector(policy: Policy, queue_labels: dict[str, str]) -> dict[str, str] | None:
    """Label selector of the pool's flavors; None selects nothing (also for the labels of a type whose
    spec lacks os, arch, or the acceleratorGroup of an acceleratable type)."""
    if _incomplete(policy, queue_labels):
        return None
    selector = _feature_selector(policy, queue_labels)
    for role in ("os", "arch", "acceleratable"):
        if policy.key(role) in queue_labels:
            selector[policy.key(role)] = queue_labels[policy.key(role)]
    if not selector:
        return None
    selector[policy.key("resourceType")] = policy.derivation.resourceTypes["flavor"]
    return selector


def devices_selector(policy: Policy, queue_labels: dict[str, str]) -> dict[str, str] | None:
    """Label selector of the pool's Devices; None when no feature key or the type's spec is incomplete (see
    :func:`flavor_selector`)."""
    selector = _feature_selector(policy, queue_labels)
    if not selector or _incomplete(policy, queue_labels):
        return None
    for role in ("os", "arch"):
        if policy.key(role) in queue_labels:
            selector[policy.key(role)] = queue_labels[policy.key(role)]
    selector[policy.key("managed")] = "true"
    return selector


def matches(selector: dict[str, str] | None, labels: dict[str, str]) -> bool:
    return selector is not None and all(labels.get(k) == v for k, v in selector.items())


def default_instance_type(policy: Policy, obj: dict, aware: bool, flavors: Iterable[dict]) -> dict:
    """The InstanceType defaulting (a new dict; ``obj`` is not changed).

    ``flavors``: the ResourceFlavor objects the cluster holds (name order is applied here).
    """
    out = copy.deepcopy(obj)
    if is_deleting(out):
        return out
    spec = out.setdefault("spec", {})
    meta = out.setdefault("metadata", {})
    if not spec.get("generalGroup"):
        spec["generalGroup"] = policy.manufacturer_table.genericSentinel
    finalizers = meta.setdefault("finalizers", [])
    if policy.key("finalizer") not in finalizers:
        finalizers.append(policy.key("finalizer"))
    if spec.get("acceleratable") and not spec.get("acceleratorGroup"):
        return out
    prefixes = (policy.prefix("general"), policy.prefix("acceleratable"))
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if not k.startswith(prefixes)}
    labels.update(schedule_labels(policy, spec, aware))
    labels[policy.key("queueEntrance")] = entrance(policy, meta["name"])
    meta["labels"] = labels
    _enrich(policy, spec, labels, aware, flavors)
    return out


def needs_enrichment(it: dict) -> bool:
    """Whether an InstanceType's descriptors are still empty."""
    spec = it.get("spec") or {}
    if is_deleting(it) or (spec.get("acceleratable") and not spec.get("acceleratorGroup")):
        return False
    if not spec.get("acceleratable"):
        return False  # CPU types carry no descriptors while awareness is off; nothing to wait for
    return not (spec.get("manufacturer") or spec.get("product") or spec.get("memory"))


def _enrich(policy: Policy, spec: dict, labels: dict, aware: bool, flavors: Iterable[dict]) -> None:
    acceleratable = bool(spec.get("acceleratable"))
    if not acceleratable and not aware:
        for field in ("manufacturer", "product", "family"):
            spec.pop(field, None)
        return
    if spec.get("manufacturer") or spec.get("product") or (acceleratable and spec.get("memory")):
        return
    selector = flavor_selector(policy, labels)
    note = policy.prefix("note")
    for flavor in sorted(flavors, key=name_of):
        if is_deleting(flavor) or not matches(selector, labels_of(flavor)):
            continue
        notes = (flavor.get("metadata") or {}).get("annotations") or {}
        fields = ["manufacturer", "product", "family"] + (["memory", "cores"] if acceleratable else [])
        for field in fields:
            if notes.get(f"{note}{field}"):
                spec[field] = notes[f"{note}{field}"]
        if acceleratable and notes.get(f"{note}feature"):
            try:
                spec["feature"] = json.loads(notes[f"{note}feature"])
            except ValueError:
                pass
        return


def derived_type(policy: Policy, name: str, plan, aware: bool) -> dict:
    """The InstanceType the controller authors for a pool, before defaulting.

    ``plan``: the FlavorPlan of the pool's first flavor in name order (its notes give the preset
    inputs).
    """
    spec: dict = {"acceleratable": plan.kind == "device"}
    if plan.kind == "device":
        spec["acceleratorGroup"] = plan.akey
        spec["unitResources"] = presets.unit_for(policy, plan.akey.split("-", 1)[0],
                                                 plan.notes.get("product", ""))
    else:
        spec["unitResources"] = dict(policy.derivation.derivedType.cpuUnit)
    spec["generalGroup"] = policy.derivation.generalGroup.evaluate({"gKey": plan.gkey, "aware": aware})
    spec["os"] = plan.os
    spec["arch"] = plan.arch
    spec["localStorage"] = policy.derivation.derivedType.localStorage
    return {"apiVersion": "worker.gpustack.ai/v1", "kind": "InstanceType",
            "metadata": {"name": name, "labels": {policy.key("derivedFromNode"): "true"}},
            "spec": spec}


def _sliced_detail(devices_list: list[dict], akey: str, spec: dict) -> dict:
    logical = 0
    overcommit = False
    physical = 0
    profiles: dict[str, dict] = {}
    compute_capability = spec.get("computeCapability") or ""
    for group, accel in (pair for devices in devices_list for pair in walk_devices(devices, akey=akey)):
        if not compute_capability and group.get("computeCapability"):
            compute_capability = group["computeCapability"]
        status = accel.get("status") or {}
        if status.get("unhealthy") or status.get("maintenance"):
            continue
        p = status.get("physicalSliced") or {}
        if int(p.get("count") or 0) > 0:
            physical += int(p["count"])
            for prof in p.get("profiles") or []:
                entry = profiles.setdefault(prof["name"], {"name": prof["name"], "count": 0,
                                                           "memoryMib": int(prof.get("memoryMib") or 0)})
                entry["count"] += int(prof.get("count") or 0)
            continue
        ls = status.get("logicalSliced") or {}
        if int(ls.get("count") or 0) > 0:
            logical += int(ls["count"])
            overcommit = overcommit or bool(ls.get("coresPercentageOvercommit"))
    physical_out: dict = {"count": physical}
    if profiles:
        physical_out["profiles"] = [profiles[k] for k in sorted(profiles)]
    logical_out: dict = {"count": logical}
    if logical:
        logical_out["coresPercentageOvercommit"] = overcommit
    return {"computeCapability": compute_capability,
            "slicedDetail": {"logical": logical_out, "physical": physical_out}}


def missing_fields(policy: Policy, spec: dict) -> list[str]:
    """The fields of rules/pools/derivation.yaml ``incompleteType`` that ``spec`` lacks (empty values
    count as missing), in the rule's order."""
    rule = policy.derivation.incompleteType
    fields = list(rule.required) + (list(rule.requiredWhenAcceleratable) if spec.get("acceleratable") else [])
    return [f for f in fields if not spec.get(f)]


def instance_type_status(policy: Policy, settings: Settings, it: dict, queue: dict | None,
                         queue_flavors: list, devices_list: list[dict], queue_state: dict,
                         closed: dict[str, str] | None = None) -> dict:
    """``status`` of one InstanceType.

    ``queue``: its desired ClusterQueue (None when the type is being deleted and the queue is gone);
    ``queue_flavors``: FlavorPlans in the queue; ``devices_list``: the pool's Devices (node order);
    ``closed``: node name -> why it takes no new Pod (docs/concepts/out-of-service.md "Cordoned and
    tainted nodes"): its accelerators count as capacity only; ``queue_state``: {"stopPolicy",
    "reserved" (bool), "reservedCpuMillis" (int), "instancePodCpuMillis" (list of int, see
    :func:`running_instance_pod_cpu`), "active" ("True"/"False"/"Unknown"/"Missing"), "message"}.
    """
    spec = it.get("spec") or {}
    acceleratable = bool(spec.get("acceleratable"))
    drained = queue_state.get("stopPolicy") == "HoldAndDrain"
    status: dict = {}
    missing = missing_fields(policy, spec)
    _, phase = policy.decision_table("instancetype-phase").decide({
        "deleting": is_deleting(it), "stopPolicy": queue_state.get("stopPolicy", "None"),
        "reserved": bool(queue_state.get("reserved")), "queue": queue_state.get("active", "Missing"),
        "queueMessage": queue_state.get("message", ""), "incomplete": bool(missing),
        "incompleteMessage": policy.derivation.incompleteType.message.format(
            fields=", ".join(f"spec.{f}" for f in missing)) if missing else "",
        "flavors": bool(queue_flavors),
    })
    status.update({k: v for k, v in phase.items() if v != ""})
    if queue_state.get("phaseMessage") and "phaseMessage" not in status:
        status["phaseMessage"] = queue_state["phaseMessage"]
    if queue is not None:
        status["entrance"] = entrance(policy, name_of(queue))
    if acceleratable and not drained and queue_flavors:   # no flavor: nothing can be admitted, no capacity
        views = fourview.compute(policy, devices_list, spec.get("acceleratorGroup") or "", closed)
    else:
        views = fourview.zeros()
    status.update(views.render_status())
    cpu_pair = "0/0"
    if not acceleratable:
        cpu = _cpu_view(policy, settings, queue_flavors, queue_state, drained)
        status["cpu"] = {k: str(v) for k, v in cpu.items()}
        cpu_pair = f"{cpu['onceMaxRequest']}/{cpu['remaining']}"
    else:
        detail = {k: spec[k] for k in ("manufacturer", "product", "family", "memory", "cores") if spec.get(k)}
        detail.update(_sliced_detail(devices_list, spec.get("acceleratorGroup") or "", spec))
        if not detail.get("computeCapability"):
            detail.pop("computeCapability", None)
        status["detail"] = detail
    unit = spec.get("unitResources") or {}
    blank = policy.derivation.incompleteType.unitPlaceholder
    status["summary"] = {
        "unit": f"{unit.get('cpu') or blank}/{unit.get('ram') or blank}/{spec.get('localStorage') or blank}",
        "accelerator": views.summary(),
        "cpu": cpu_pair,
        "partitions": views.partitions(),
    }
    return status


def _cpu_view(policy: Policy, settings: Settings, queue_flavors: list, queue_state: dict,
              drained: bool) -> dict:
    """Capacity, remaining and onceMaxRequest in cores.

    Reserved cores come from the ClusterQueue's ``flavorsReservation`` (``reservedCpuMillis``) while
    Kueue charges ``cpu``; when the Kueue configuration excludes ``cpu`` (rules/pools/kueue.yaml) Kueue
    reserves nothing, and they come from the pool's running Instance Pods instead
    (``instancePodCpuMillis``: one CPU limit in millicores per Pod), with the status's overcommit
    reading: with overcommit on, a Pod of ``c`` cores requested ``800m × ceil(c)`` (capped at its limit)
    and the status reads that back as ``ceil(c)`` cores, so each Pod counts ``ceil(limit)``; with it
    off, requests equal limits and reserved = ceil(Σ limits). Per-core millis and the setting come from
    rules/instances/pod.yaml ``overcommit``.
    """
    if drained:
        return {"capacity": 0, "onceMaxRequest": 0, "remaining": 0}
    capacity = sum(plan.capacity for plan in queue_flavors)
    overcommit = policy.ruleset.get("InstancePod").overcommit
    overcommitted = settings.flag(overcommit.setting)
    if cpu_excluded(policy):
        pods = [int(m) for m in queue_state.get("instancePodCpuMillis") or []]
        if overcommitted:
            reserved = sum(math.ceil(m / 1000) for m in pods)
        else:
            reserved = math.ceil(sum(pods) / 1000)
    else:
        millis = int(queue_state.get("reservedCpuMillis") or 0)
        reserved = math.ceil(millis / (overcommit.cpuMillisPerCore if overcommitted else 1000))
    remaining = max(capacity - reserved, 0)
    largest = max((plan.count for plan in queue_flavors), default=0)
    return {"capacity": capacity, "onceMaxRequest": min(largest, remaining), "remaining": remaining}


def reserved_cpu_millis(queue: dict | None) -> int:
    """Σ ``status.flavorsReservation[].resources[cpu].total`` of a ClusterQueue, in millicores."""
    if not queue:
        return 0
    total = 0
    for flavor in (queue.get("status") or {}).get("flavorsReservation") or []:
        for res in flavor.get("resources") or []:
            if res.get("name") == "cpu" and res.get("total") is not None:
                total += int(parse_quantity(res["total"]) * 1000)
    return total


def running_instance_pod_cpu(policy: Policy, pods: Iterable[dict]) -> dict[str, list[int]]:
    """Queue entrance -> the CPU limits (millicores, one per Pod) of the running Instance Pods that
    queue through it (the "Kueue's resource charging" fallback for the CPU view).

    A Pod counts when it carries the queue label (rules/labels.yaml role ``queueName``), has an
    Instance as its controller owner, is bound (``spec.nodeName``) and not terminated (phase not
    ``Succeeded``/``Failed``; a Pod being deleted still holds its cores). Its CPU limit is the sum of
    ``limits.cpu`` (else ``requests.cpu``) over its app containers and native sidecars.
    """
    queue_key = policy.key("queueName")
    out: dict[str, list[int]] = {}
    for pod in pods:
        entrance_name = labels_of(pod).get(queue_key)
        spec = pod.get("spec") or {}
        if not entrance_name or not spec.get("nodeName"):
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        owners = (pod.get("metadata") or {}).get("ownerReferences") or []
        if not any(o.get("kind") == "Instance" and o.get("controller") for o in owners):
            continue
        containers = list(spec.get("containers") or []) + [
            c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
        millis = 0
        for container in containers:
            res = container.get("resources") or {}
            value = (res.get("limits") or {}).get("cpu", (res.get("requests") or {}).get("cpu"))
            if value not in (None, ""):
                millis += math.ceil(parse_quantity(value) * 1000)
        out.setdefault(entrance_name, []).append(millis)
    return out
