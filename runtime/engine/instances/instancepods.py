"""From an Instance to its Pod (docs/concepts/instances.md "Life cycle" and "The Instance's Pod" and
"Persistent volumes"): pure rendering and phases.

``render_pod`` builds the Pod an Instance runs as, or says why none can be created yet (a claim that
nothing binds); :mod:`.podstatus` reads the Instance status back from the Pod. Names, sizes, keys and
messages come from rules/instances/pod.yaml.

Sources: docs/concepts/instances.md "The Instance's Pod", docs/concepts/instances.md "Persistent volumes",
docs/concepts/instances.md "Pinned to a node", docs/concepts/pools-and-flavors.md "Kueue's resource charging".
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from runtime.engine.pools.kueueconfig import cpu_excluded
from runtime.model.normalize import format_binary_quantity, parse_quantity
from runtime.engine.policy import Policy
from runtime.engine.resourcekeys import classifier_table
from runtime.engine.settings import Settings
from runtime.engine.snapshot import Snapshot, labels_of, name_of
from runtime.model.instancepod import InstancePodSpec
from runtime.model.nodepin import pin_requirements, queue_flavors, with_node_requirements

MI = 2**20
GI = 2**30


@dataclass(frozen=True)
class PodPlan:
    """The Pod to create, or ``pod`` None with ``blocked`` = the reason (``status.phaseMessage``)."""

    pod: dict | None
    blocked: str = ""


def _rules(policy: Policy) -> InstancePodSpec:
    return policy.ruleset.get("InstancePod")


def _cpu_text(millis: int) -> str:
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def _min_quantity(limit: str, candidate_bytes: int) -> str:
    return limit if parse_quantity(limit) <= candidate_bytes else format_binary_quantity(candidate_bytes)


def container_resources(policy: Policy, settings: Settings, instance: dict, instance_type: dict) -> dict:
    """``resources`` of the workload container: limits, requests (scaled down with overcommit),
    accelerator keys (requests = limits)."""
    rules = _rules(policy)
    res = (instance.get("spec") or {}).get("resources") or {}
    it_spec = instance_type.get("spec") or {}
    acceleratable = bool(it_spec.get("acceleratable"))
    limits: dict[str, str] = {}
    for key, field in (("cpu", "cpu"), ("memory", "ram"), ("ephemeral-storage", "localStorage")):
        if res.get(field) not in (None, ""):
            limits[key] = str(res[field])
    requests = dict(limits)
    oc = rules.overcommit
    if settings.flag(oc.setting):
        if "cpu" in limits:
            per_core = oc.acceleratedCpuMillisPerCore if acceleratable else oc.cpuMillisPerCore
            limit_millis = parse_quantity(limits["cpu"]) * 1000
            want = per_core * math.ceil(parse_quantity(limits["cpu"]))
            requests["cpu"] = limits["cpu"] if limit_millis <= want else _cpu_text(want)
        for key, per_gi in (("memory", oc.memoryMiPerGi), ("ephemeral-storage", oc.storageMiPerGi)):
            if key in limits:
                gib = max(1, int(parse_quantity(limits[key]) // GI))
                requests[key] = _min_quantity(limits[key], per_gi * MI * gib)
    accelerator = int(math.ceil(parse_quantity(res["accelerator"]))) if res.get(
        "accelerator") not in (None, "") else 0
    if acceleratable and accelerator > 0:
        keys = _accelerator_keys(policy, rules, res, instance_type, accelerator)
        limits.update(keys)
        requests.update(keys)
    return {"limits": limits, "requests": requests}


def _accelerator_keys(policy: Policy, rules: InstancePodSpec, res: dict, instance_type: dict,
                      accelerator: int) -> dict:
    detail = (instance_type.get("status") or {}).get("detail") or {}
    manufacturer = policy.manufacturers.get(detail.get("manufacturer", ""))
    if manufacturer is None:
        return {}
    fmt = dict(base=manufacturer.base, kind=manufacturer.partitionKind, manufacturer=manufacturer.id,
               profile=res.get("acceleratorPartitionedProfile") or "")
    keys = rules.resourceKeys
    logical = int(((detail.get("slicedDetail") or {}).get("logical") or {}).get("count") or 0)
    memory_pct = int(res.get("acceleratorSlicedMemoryPercentage") or 0)
    if fmt["profile"] and manufacturer.partitionKind:
        return {keys["partitioned"].format(**fmt): "1", keys["profile"].format(**fmt): "1"}
    if logical > 0 and memory_pct > 0:
        return {keys["sliced"].format(**fmt): str(accelerator),
                keys["memoryPercentage"].format(**fmt): str(memory_pct),
                keys["coresPercentage"].format(**fmt): str(
                    int(res.get("acceleratorSlicedCoresPercentage") or 0))}
    return {manufacturer.base: str(accelerator)}


def pool_flavors(queue: dict | None, flavors: Iterable[dict]) -> list[dict]:
    """The ResourceFlavors of ``queue`` (a ClusterQueue) in its ``resourceGroups`` order, taken from
    ``flavors`` by name; names without an object are skipped. ``[]`` for no queue."""
    return list(queue_flavors(queue, flavors))


def pool_affinity_terms(policy: Policy, flavors: list[dict]) -> list[dict]:
    """One node-selector term per flavor, each requiring every ``spec.nodeLabels`` entry of that
    flavor (``{key, operator: In, values: [value]}`` in the flavor's label order): the placement Kueue
    would give a CPU-only Pod by merging its assigned flavor's nodeLabels, while Kueue does not charge
    ``cpu`` (operator from rules/instances/pod.yaml ``poolAffinity``)."""
    operator = _rules(policy).poolAffinity.operator
    terms = []
    for flavor in flavors:
        labels = (flavor.get("spec") or {}).get("nodeLabels") or {}
        if labels:
            terms.append({"matchExpressions": [{"key": k, "operator": operator, "values": [str(v)]}
                                               for k, v in labels.items()]})
    return terms


def render_pod(policy: Policy, settings: Settings, snapshot: Snapshot, instance: dict, instance_type: dict,
               flavors: list[dict] | None = None) -> PodPlan:
    """The Pod of ``instance``, or why it cannot be created yet.

    ``snapshot`` supplies the pinned Node (its hostname label), RuntimeClasses and the claims'
    PVCs, PVs and StorageClasses. ``instance_type`` must carry ``status.entrance``.

    CPU-only types while the Kueue configuration excludes ``cpu`` (rules/pools/kueue.yaml): the Pod gets
    a required node affinity with one term per flavor of the pool (:func:`pool_affinity_terms`), crossed
    with any claim placement terms. ``flavors``: the pool's ResourceFlavors in queue order (the
    controller passes the derived ones); None reads the type's ClusterQueue and its flavors from
    ``snapshot``. No flavor -> no Pod, ``blocked`` = rules/instances/pod.yaml
    ``poolAffinity.noFlavorsMessage``.

    A pin (``spec.nodeName``) of a Node in the snapshot appends its requirements (over the pool's flavors,
    :func:`runtime.model.nodepin.pin_requirements`) to every required node-affinity term: Kueue assigns
    the flavor holding that Node, or none.
    """
    rules = _rules(policy)
    meta = instance["metadata"]
    spec = instance.get("spec") or {}
    it_spec = instance_type.get("spec") or {}
    namespace = meta.get("namespace") or "default"
    affinity_terms, blocked = _claim_placement(policy, settings, snapshot, namespace, spec)
    if blocked:
        return PodPlan(pod=None, blocked=blocked)
    if not it_spec.get("acceleratable") and cpu_excluded(policy):
        pool = name_of(instance_type)
        if flavors is None:
            flavors = pool_flavors(snapshot.get("ClusterQueue", pool), snapshot.list("ResourceFlavor"))
        pool_terms = pool_affinity_terms(policy, flavors)
        if not pool_terms:
            return PodPlan(pod=None, blocked=rules.poolAffinity.noFlavorsMessage.format(pool=pool))
        affinity_terms = _cross(pool_terms, affinity_terms)
    pod_spec: dict = dict(rules.podSpec)
    if (spec.get("imagePullSecret") or {}).get("name"):
        pod_spec["imagePullSecrets"] = [{"name": spec["imagePullSecret"]["name"]}]
    detail = (instance_type.get("status") or {}).get("detail") or {}
    manufacturer = policy.manufacturers.get(detail.get("manufacturer", ""))
    if it_spec.get("acceleratable") and manufacturer and manufacturer.runtimeName \
            and snapshot.get("RuntimeClass", manufacturer.runtimeName) is not None:
        pod_spec["runtimeClassName"] = manufacturer.runtimeName
    _place(policy, snapshot, pod_spec, spec, instance_type, affinity_terms, flavors)
    volumes, mounts = _volumes(rules, spec)
    containers = [_workload(policy, rules, settings, instance, instance_type, mounts)]
    ssh_key = (spec.get("sshPublicKey") or {}).get("name")
    if ssh_key:
        containers.append(_ssh_sidecar(policy, rules, settings, spec, instance_type, manufacturer))
    pod_spec["containers"] = containers
    pod_spec["volumes"] = volumes
    labels = {policy.key("queueName"): (instance_type.get("status") or {}).get("entrance", ""),
              policy.key("partOf"): meta.get("uid", "")}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": meta["name"], "namespace": namespace, "labels": labels, "ownerReferences": [
               {"apiVersion": instance.get("apiVersion", "worker.gpustack.ai/v1"), "kind": "Instance",
                "name": meta["name"], "uid": meta.get("uid", ""), "controller": True,
                "blockOwnerDeletion": True}]},
           "spec": pod_spec}
    return PodPlan(pod=pod)


def _place(policy: Policy, snapshot: Snapshot, pod_spec: dict, spec: dict, instance_type: dict,
           affinity_terms: list[dict], flavors: list[dict] | None) -> None:
    """``pod_spec``'s ``nodeSelector`` (the pin's one hostname entry) and ``affinity``: the claim and
    pool terms, each with the pin's requirements appended (decision 24)."""
    pin: list[dict] = []
    if spec.get("nodeName"):
        node = snapshot.get("Node", spec["nodeName"])
        hostname = labels_of(node).get(policy.key("hostname")) if node else None
        pod_spec["nodeSelector"] = {policy.key("hostname"): hostname or spec["nodeName"]}
        if node is not None:
            if flavors is None:
                flavors = pool_flavors(snapshot.get("ClusterQueue", name_of(instance_type)),
                                       snapshot.list("ResourceFlavor"))
            pin = pin_requirements(labels_of(node), flavors)
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                                 {"nodeSelectorTerms": affinity_terms}}} if affinity_terms else None
    affinity = with_node_requirements(affinity, pin)
    if affinity:
        pod_spec["affinity"] = affinity


def container_ports(pod: dict) -> list[dict]:
    """Every ``ports`` entry of the Pod's containers, in container order."""
    return [port for c in (pod.get("spec") or {}).get("containers") or [] for port in c.get("ports") or []]


def render_service(policy: Policy, instance: dict, pod: dict) -> dict | None:
    """The Service of an Instance whose Pod has container ports, or None.

    Same name and namespace as the Pod, type from rules/instances/pod.yaml ``service.type`` (``NodePort``),
    selector = the Pod's labels, one port per container port (its name, protocol, ``port`` = ``targetPort`` =
    the container port), controlled by the Instance (ownerReference, so it goes with the Instance).
    """
    ports = container_ports(pod)
    if not ports:
        return None
    meta = instance["metadata"]
    pod_meta = pod.get("metadata") or {}
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": pod_meta.get("name", meta["name"]),
                         "namespace": pod_meta.get("namespace") or meta.get("namespace") or "default",
                         "labels": dict(pod_meta.get("labels") or {}),
                         "ownerReferences": [{"apiVersion": instance.get(
                             "apiVersion", "worker.gpustack.ai/v1"),
                                              "kind": "Instance", "name": meta["name"],
                                              "uid": meta.get("uid", ""), "controller": True,
                                              "blockOwnerDeletion": True}]},
            "spec": {"type": _rules(policy).service.type,
                     "selector": dict(pod_meta.get("labels") or {}),
                     "ports": [{"name": p["name"], "protocol": p.get("protocol") or "TCP",
                                "port": int(p["containerPort"]), "targetPort": int(p["containerPort"])}
                               for p in ports]}}


def _volumes(rules: InstancePodSpec, spec: dict) -> tuple[list[dict], list[dict]]:
    names = rules.volumes
    volumes: list[dict] = []
    ssh_key = (spec.get("sshPublicKey") or {}).get("name")
    if ssh_key:
        volumes.append({"name": names.sshKeys,
                        "secret": {"secretName": ssh_key, "defaultMode": names.sshKeysDefaultMode}})
    volume = spec.get("volume") or {}
    if "persistent" in volume:
        volumes.append({"name": names.workspace,
                        "persistentVolumeClaim": {"claimName": volume["persistent"]["name"]}})
    else:
        capacity = ((volume.get("ephemeral") or {}).get("capacity"))
        volumes.append({"name": names.workspace, "emptyDir": {"sizeLimit": capacity} if capacity else {}})
    mounts = [{"name": names.workspace, "mountPath": spec.get("volumeMount") or "/workspace"}]
    for i, entry in enumerate(spec.get("additionalVolumes") or []):
        name = f"{names.additionalPrefix}{i}"
        if entry.get("persistent"):
            source = {"persistentVolumeClaim": {"claimName": entry["persistent"]["name"]}}
        elif entry.get("configMap"):
            source = {"configMap": {"name": entry["configMap"]["name"]}}
        elif entry.get("secret"):
            source = {"secret": {"secretName": entry["secret"]["name"]}}
        else:
            source = {
                "hostPath": {k: v for k, v in (entry.get("hostPath") or {}).items() if v not in (None, "")}}
        volumes.append({"name": name, **source})
        mount = {"name": name, "mountPath": entry["mountPath"]}
        if entry.get("readOnly"):
            mount["readOnly"] = True
        if entry.get("subPath"):
            mount["subPath"] = entry["subPath"]
        mounts.append(mount)
    return volumes, mounts


def _workload(policy, rules, settings, instance, instance_type, mounts) -> dict:
    spec = instance.get("spec") or {}
    container: dict = {"name": rules.workloadContainer, "image": spec.get("image", ""),
                       "imagePullPolicy": spec.get("imagePullPolicy") or "IfNotPresent"}
    if spec.get("command"):
        container["command"] = list(spec["command"])
    security = dict(rules.workloadSecurityContext)
    if spec.get("privileged") is True:  # as the admission gate reads it (== true): "true", 1 grant nothing
        security["privileged"] = True
    container["securityContext"] = security
    ports = []
    for port in spec.get("ports") or []:
        protocol = port.get("protocol") or "TCP"
        ports.append({"name": rules.portName.evaluate({"port": int(port["port"]), "protocol": protocol}),
                      "containerPort": int(port["port"]), "protocol": protocol})
    if ports:
        container["ports"] = ports
    if spec.get("env"):
        container["env"] = [{"name": e["name"], "value": e.get("value", "")} for e in spec["env"]]
    container["resources"] = container_resources(policy, settings, instance, instance_type)
    container["volumeMounts"] = mounts
    return container


def _ssh_sidecar(policy, rules, settings, spec, instance_type, manufacturer) -> dict:
    res = spec.get("resources") or {}
    sidecar = {"name": rules.sshContainer, "image": settings.text(rules.ssh.imageSetting),
               "imagePullPolicy": spec.get("imagePullPolicy") or "IfNotPresent", "stdin": True, "tty": True,
               "securityContext": {"capabilities": {"add": list(rules.ssh.capabilities)}},
               "env": [{"name": rules.ssh.volumeMountEnv, "value": spec.get("volumeMount") or "/workspace"}],
               "volumeMounts": [{"name": rules.volumes.sshKeys, "mountPath": rules.volumes.sshKeysMountPath,
                                 "readOnly": True}]}
    accelerator = int(math.ceil(parse_quantity(res["accelerator"]))) if res.get(
        "accelerator") not in (None, "") else 0
    if (instance_type.get("spec") or {}).get("acceleratable") and accelerator > 0 and manufacturer:
        table = classifier_table(policy, policy.kueue.resourceKeysParams)   # the visibility keys' home
        key = rules.resourceKeys["visibility"].format(manufacturer=manufacturer.id,
                                                      visibilityPrefix=table["visibilityPrefix"],
                                                      visibilitySuffix=table["visibilitySuffix"])
        sidecar["resources"] = {"limits": {key: str(accelerator)}, "requests": {key: str(accelerator)}}
    return sidecar


def _claim_names(spec: dict) -> list[str]:
    names = []
    persistent = (spec.get("volume") or {}).get("persistent")
    if persistent and persistent.get("name"):
        names.append(persistent["name"])
    for entry in spec.get("additionalVolumes") or []:
        name = (entry.get("persistent") or {}).get("name")
        if name and name not in names:
            names.append(name)
    return names


def _claim_placement(policy, settings, snapshot, namespace, spec) -> tuple[list[dict], str]:
    """Node-affinity terms from bound claims' PVs, or the block message."""
    placement = _rules(policy).placement
    if not settings.flag(placement.setting):
        return [], ""
    terms: list[dict] = []
    for claim in _claim_names(spec):
        pvc = snapshot.get("PersistentVolumeClaim", claim, namespace)
        if pvc is None:
            return [], placement.missingMessage.format(claim=claim)
        phase = (pvc.get("status") or {}).get("phase") or "Pending"
        if phase == "Bound":
            pv = snapshot.get("PersistentVolume", (pvc.get("spec") or {}).get("volumeName", ""))
            pv_terms = ((((pv or {}).get("spec") or {}).get("nodeAffinity") or {}).get("required") or {}).get(
                "nodeSelectorTerms") or []
            if pv_terms:
                terms = _cross(terms, pv_terms)
            continue
        class_name = (pvc.get("spec") or {}).get("storageClassName")
        sc = snapshot.get("StorageClass", class_name) if class_name else None
        if sc and sc.get("volumeBindingMode") == "WaitForFirstConsumer" \
                and sc.get("provisioner") != placement.noProvisioner:
            continue
        return [], placement.unboundMessage.format(claim=claim, phase=phase)
    return terms, ""


def _cross(current: list[dict], more: list[dict]) -> list[dict]:
    """Each current term crossed with each new term, their requirements ANDed."""
    if not current:
        return [dict(t) for t in more]
    if not more:
        return [dict(t) for t in current]
    out = []
    for a in current:
        for b in more:
            term = {}
            for key in ("matchExpressions", "matchFields"):
                merged = list(a.get(key) or []) + list(b.get(key) or [])
                if merged:
                    term[key] = merged
            out.append(term)
    return out
