"""What the agent wants its node's objects to be: one pure function, :func:`plan_node`.

Inputs: the probe facts (docs/agent.md "Probe facts"), the agent's Node object, the resolved settings,
the current worker NodeFeature (for the managed rule of docs/agent.md "Labels, annotations and
NodeFeatures") and the node's Pods (for the ledger). Output: an :class:`AgentPlan` with the two
NodeFeatures, the Node patch (annotations, and the capacity of docs/agent.md "Capacity and fit labels"),
the Devices object (docs/agent.md "The Devices object and its ledger") and the ledger Events.
``accelerators_known=False`` (the NVML probe failed) yields a plan that leaves the device-manager
NodeFeature and the Devices untouched.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from runtime.engine.devices.agentlabels import cpu_annotations, device_manager_labels, managed_value, \
    worker_labels
from runtime.engine.devices.devicesobject import devices_labels, devices_spec, node_capacity
from runtime.engine.devices.ledger import LedgerEvent, rebuild_ledger
from runtime.engine.devices.nodefacts import accelerator_groups, agent_rules, cores_from_capacity, gkey
from runtime.engine.devices.podresources import annotation_differs, annotation_text, mig_device_index, \
    pod_allocations, pod_key, with_annotations
from runtime.engine.policy import Policy
from runtime.engine.settings import Settings
from runtime.model.facts import NodeFactsDoc


@dataclass
class AgentPlan:
    """Desired state of one node. ``None`` for ``device_manager``/``devices`` means "must not exist";
    ``accelerators_known`` False means "leave them as they are" (probe failure)."""

    worker: dict[str, Any]
    device_manager: dict[str, Any] | None
    node_patch: dict[str, Any]
    devices: dict[str, Any] | None
    events: list[LedgerEvent] = field(default_factory=list)
    accelerators_known: bool = True
    # Pod metadata patches {apiVersion, kind, metadata: {name, namespace, annotations: {allocation key:
    # JSON}}}: PodResources source only, only Pods whose annotation differs, by namespace/name
    pod_patches: list[dict[str, Any]] = field(default_factory=list)
    # health transitions of this pass (runtime/engine/devices/health.py): Events and the agent's metric
    health_transitions: list[Any] = field(default_factory=list)

    def objects(self) -> list[dict[str, Any]]:
        """Everything the agent would write, in write order (for ``--dry-run -o yaml``)."""
        out = [self.worker]
        if self.accelerators_known and self.device_manager is not None:
            out.append(self.device_manager)
        out.append(self.node_patch)
        if self.accelerators_known and self.devices is not None:
            out.append(self.devices)
        return out + self.pod_patches


def owner_reference(node: Mapping[str, Any]) -> dict[str, Any]:
    """Controller reference to the Node; no blockOwnerDeletion."""
    meta = node.get("metadata") or {}
    return {"apiVersion": node.get("apiVersion", "v1"), "kind": node.get("kind", "Node"),
            "name": meta.get("name", ""), "uid": meta.get("uid", ""), "controller": True}


def node_feature_name(policy: Policy, node: str, role: str) -> str:
    """``<node>-gpustack-worker`` (role ``worker``) or ``<node>-gpustack-device-manager``
    (``deviceManager``)."""
    return f"{node}{getattr(agent_rules(policy).nodeFeature, role).nameSuffix}"


def _node_feature(policy: Policy, node: Mapping[str, Any], role: str, labels: dict[str, str],
                  namespace: str) -> dict[str, Any]:
    nf = agent_rules(policy).nodeFeature
    name = node["metadata"]["name"]
    return {
        "apiVersion": nf.apiVersion, "kind": nf.kind,
        "metadata": {"name": node_feature_name(policy, name, role), "namespace": namespace,
                     "labels": {policy.key("nodeFeatureNode"): name,
                                policy.key("partOf"): getattr(nf, role).partOf},
                     "ownerReferences": [owner_reference(node)]},
        "spec": {"labels": labels},
    }


def _ledger(policy: Policy, facts: NodeFactsDoc, name: str, spec: dict[str, Any],
            pods: list[Mapping[str, Any]],
            pod_resources: list[Mapping[str, Any]] | None) -> tuple[dict[str, Any], list[LedgerEvent],
                                                                    list[dict[str, Any]]]:
    """The Devices ``status`` of node ``name``, its Events, and the Pod annotation patches: with
    ``pod_resources`` the Pods' allocations are computed from it first, only the Pods whose annotation
    differs are patched, and the ledger is rebuilt from the Pods as they will be."""
    events: list[LedgerEvent] = []
    pod_patches: list[dict[str, Any]] = []
    if pod_resources is not None:
        docs, events = pod_allocations(policy, name, spec, pod_resources, pods,
                                       mig_device_index(policy, facts.accelerators))
        current = {pod_key(p): p for p in pods}
        pod_patches = [{"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": k[1], "namespace": k[0],
                                     "annotations": {policy.key("allocation"): annotation_text(d)}}}
                       for k, d in sorted(docs.items()) if annotation_differs(policy, current[k], d)]
        pods = with_annotations(policy, pods, docs)
    status, ledger_events = rebuild_ledger(policy, name, spec, pods)
    return status, events + ledger_events, pod_patches


def plan_node(policy: Policy, facts: NodeFactsDoc, node: Mapping[str, Any], settings: Settings, *,
              worker_now: Mapping[str, Any] | None = None, pods: list[Mapping[str, Any]] | None = None,
              accelerators_known: bool = True, group_id_with_memory: bool = False,
              namespace: str | None = None,
              pod_resources: list[Mapping[str, Any]] | None = None,
              maintenance: Mapping[str, Mapping[str, Any]] | None = None,
              health: Mapping[str, Mapping[str, Any]] | None = None) -> AgentPlan:
    """Compute the node's desired objects (see module docstring).

    ``node`` is the Node as the API returns it (``metadata.name``, labels, uid, ``status.capacity``).
    ``namespace`` defaults to the rules' system namespace. ``pod_resources`` (kubelet PodResources ``List``
    as dicts) given: the Pods' allocation annotations are computed from it
    (runtime/engine/devices/podresources.py), the differing ones land in ``pod_patches``, and the ledger is
    rebuilt from the Pods as they will be once annotated. ``maintenance``, ``health``: UUID -> the
    maintenance entry in force / health record the caller resolved at its time
    (docs/concepts/out-of-service.md; :func:`devices_spec`). Raises ValueError for an unknown accelerator
    manufacturer or a Node ``status.capacity.cpu`` that is not a quantity.
    """
    rules = agent_rules(policy)
    ns = namespace or rules.namespace
    meta = node.get("metadata") or {}
    name = meta["name"]
    node_labels = meta.get("labels") or {}
    capacity_now = (node.get("status") or {}).get("capacity") or {}
    groups = accelerator_groups(policy, facts.accelerators, group_id_with_memory) if accelerators_known \
        else []
    worker_labels_now = ((worker_now or {}).get("spec") or {}).get("labels") or {}
    # unknown accelerators (probe failure): keep whatever cpu-only state the worker NodeFeature has
    has_accelerator = bool(groups) if accelerators_known \
        else policy.key("cpuOnly") not in worker_labels_now
    managed = managed_value(policy, worker_labels_now, node_labels, settings)
    cores = cores_from_capacity(capacity_now.get("cpu"))
    worker = _node_feature(policy, node, "worker",
                           worker_labels(policy, facts.cpu, cores, managed, has_accelerator, settings), ns)
    device_manager = devices = None
    events: list[LedgerEvent] = []
    pod_patches: list[dict[str, Any]] = []
    status: dict[str, Any] | None = None
    spec: dict[str, Any] = {"groups": []}
    if groups:
        dm_labels = device_manager_labels(policy, groups)
        if dm_labels:
            device_manager = _node_feature(policy, node, "deviceManager", dm_labels, ns)
        spec = devices_spec(policy, groups, maintenance, health)
        status, events, pod_patches = _ledger(policy, facts, name, spec, list(pods or []), pod_resources)
        devices = {
            "apiVersion": rules.devices.apiVersion, "kind": rules.devices.kind,
            "metadata": {"name": name,
                         "labels": devices_labels(policy, node_labels, gkey(policy, facts.cpu), groups),
                         "ownerReferences": [owner_reference(node)]},
            "spec": spec, "status": status,
        }
    # DRA accelerators: no sliced or partitioned view or key (docs/concepts/dra.md "Views per manufacturer")
    plugin_groups = [g for g, grp in zip(spec["groups"], groups) if not grp.accelerators[0].dra]
    capacity = node_capacity(policy, {"groups": plugin_groups}, status, capacity_now) \
        if accelerators_known else {}
    return AgentPlan(worker=worker, device_manager=device_manager, devices=devices, events=events,
                     node_patch=_node_patch(policy, node, facts, capacity),
                     accelerators_known=accelerators_known, pod_patches=pod_patches)


def _node_patch(policy: Policy, node: Mapping[str, Any], facts: NodeFactsDoc,
                capacity: dict) -> dict[str, Any]:
    """The Node patch: the CPU annotations, and the capacity keys as capacity and allocatable."""
    patch: dict[str, Any] = {
        "apiVersion": node.get("apiVersion", "v1"), "kind": node.get("kind", "Node"),
        "metadata": {"name": node["metadata"]["name"], "annotations": cpu_annotations(policy, facts.cpu)},
    }
    if capacity:
        patch["status"] = {"capacity": dict(capacity), "allocatable": dict(capacity)}
    return patch
