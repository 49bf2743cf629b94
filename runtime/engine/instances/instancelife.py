"""The Instance reconcile as a decision (docs/concepts/instances.md "Life cycle"): what to do next, not doing
it.

:func:`plan_instance` reads one Instance with its Pod, InstanceType and ClusterQueue and returns an
:class:`InstancePlan`: ordered actions for the controller's applier plus the status to write. It is
level-based: calling it again after the actions took effect gives the next step.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from runtime.engine.instances.instancepods import pool_flavors, render_pod, render_service
from runtime.engine.instances.podstatus import allocations_from_pod, host_ips, phase_from_pod, service_ports
from runtime.engine.policy import Policy
from runtime.engine.settings import Settings
from runtime.engine.snapshot import Snapshot, is_deleting, labels_of, name_of
from runtime.model.nodepin import flavors_holding

class InstanceAction(StrEnum):
    """What :func:`plan_instance` asks of the controller, in ``InstancePlan.actions`` order; the
    controller's dispatch table (runtime/controller/instances.py) turns each into a write."""

    ADD_FINALIZER = "add-finalizer"
    REMOVE_FINALIZER = "remove-finalizer"
    DELETE_POD = "delete-pod"
    CREATE_POD = "create-pod"
    SET_STOP = "set-stop"
    CREATE_SERVICE = "create-service"


ADD_FINALIZER, REMOVE_FINALIZER = InstanceAction.ADD_FINALIZER, InstanceAction.REMOVE_FINALIZER
DELETE_POD, CREATE_POD = InstanceAction.DELETE_POD, InstanceAction.CREATE_POD
SET_STOP, CREATE_SERVICE = InstanceAction.SET_STOP, InstanceAction.CREATE_SERVICE


@dataclass
class InstancePlan:
    """``actions``: (verb, payload) in order; ``status``: the Instance status to write, or None to
    keep it; ``requeue``: seconds until the next look (0: only on events)."""

    actions: list[tuple[InstanceAction, object]] = field(default_factory=list)
    status: dict | None = None
    requeue: int = 0


def plan_instance(policy: Policy, settings: Settings, snapshot: Snapshot, instance: dict, pod: dict | None,
                  instance_type: dict | None, queue: dict | None, pod_age_seconds: float = 0.0,
                  flavors: list[dict] | None = None, check_message: str = "") -> InstancePlan:
    """Decide the next step for one Instance. ``pod_age_seconds``: Pod creation minus Instance creation, for
    the kubelet-refusal rebuild window (step 5). ``flavors``: the pool's ResourceFlavors in queue order for a
    CPU-only Pod's flavor affinity (see :func:`render_pod`; None reads them from ``snapshot``).
    ``check_message``: the node-devices check's Retry message on the Pod's Workload (""): the phaseMessage of
    a Pod not yet scheduled (docs/concepts/out-of-service.md "Cordoned and tainted nodes")."""
    rules = policy.ruleset.get("InstancePod").lifecycle
    finalizer = policy.key("instanceFinalizer")
    spec = instance.get("spec") or {}
    old_status = instance.get("status") or {}
    plan = InstancePlan()
    if is_deleting(instance):                                            # 1
        plan.status = {**old_status, "phase": "Deleting"}
        if pod is not None:
            if not is_deleting(pod):   # a Pod in graceful deletion is not deleted again
                plan.actions.append((DELETE_POD, pod["metadata"]["name"]))
            plan.requeue = rules.requeueSeconds
        else:
            plan.actions.append((REMOVE_FINALIZER, finalizer))
        return plan
    if finalizer not in (instance.get("metadata") or {}).get("finalizers", []):   # 2
        plan.actions.append((ADD_FINALIZER, finalizer))
    stop_policy = ((queue or {}).get("spec") or {}).get("stopPolicy")
    drain = instance_type is None or is_deleting(instance_type) or stop_policy == "HoldAndDrain"
    if spec.get("stop"):                                                 # 3
        stopped_by = ((instance.get("metadata") or {}).get("annotations") or {}).get(
            policy.key("instanceStoppedBy"))
        # the controller stopped it and its pool is back (a queue that holds admits nothing yet)
        if stopped_by and not drain and stop_policy in (None, "None") and pod is None:
            plan.actions.append((SET_STOP, False))
            plan.status = {"phase": "Starting"}
            plan.requeue = rules.requeueSeconds
            return plan
        return _stop(plan, pod, old_status, rules.requeueSeconds)
    # 4
    if drain:
        plan.actions.append((SET_STOP, True))
        return _stop(plan, pod, old_status, rules.requeueSeconds)
    if pod is not None and (pod.get("status") or {}).get("phase") == "Failed" and \
            (pod.get("status") or {}).get("reason") == rules.admissionErrorReason and \
            pod_age_seconds < rules.rebuildWindowSeconds:              # 5
        plan.actions.append((DELETE_POD, pod["metadata"]["name"]))
        plan.requeue = max(int(pod_age_seconds), rules.requeueSeconds)
        return plan
    if pod is None:                                                      # 6
        return _create(policy, settings, snapshot, plan, instance, instance_type, flavors,
                       rules.requeueSeconds)
    _running(policy, snapshot, plan, instance, pod)                      # 7, 8
    if check_message and (plan.status or {}).get("phase") in ("Scheduling", "Pending"):
        plan.status = {**(plan.status or {}), "phaseMessage": check_message}
    _pin_message(policy, snapshot, plan, instance, instance_type, flavors)
    return plan


def _create(policy: Policy, settings: Settings, snapshot: Snapshot, plan: InstancePlan, instance: dict,
            instance_type: dict, flavors: list[dict] | None, requeue: int) -> InstancePlan:
    """Step 6: no Pod yet; create it once the type is ready (entrance, and detail when acceleratable)."""
    old_status = instance.get("status") or {}
    it_status = instance_type.get("status") or {}
    if ((instance_type.get("spec") or {}).get("acceleratable") and not it_status.get("detail")) \
            or not it_status.get("entrance"):
        plan.requeue = requeue
        return plan
    rendered = render_pod(policy, settings, snapshot, instance, instance_type, flavors)
    if rendered.pod is None:
        plan.status = {"phase": "Starting", "phaseMessage": rendered.blocked}
        return plan
    if old_status.get("phase") in ("Stopping", "Stopped", "Ready"):
        plan.status = {"phase": "Starting"}
    plan.actions.append((CREATE_POD, rendered.pod))
    return plan


def _running(policy: Policy, snapshot: Snapshot, plan: InstancePlan, instance: dict, pod: dict) -> None:
    """Steps 7-8: the Pod exists; its Service when it has ports, and the status read from the Pod."""
    service = snapshot.get("Service", pod["metadata"]["name"], pod["metadata"].get("namespace") or "default")
    wanted = render_service(policy, instance, pod)                       # 7
    if wanted is not None and service is None:
        plan.actions.append((CREATE_SERVICE, wanted))
    status = dict(phase_from_pod(policy, pod))                           # 8
    pod_status = pod.get("status") or {}
    node_name = (pod.get("spec") or {}).get("nodeName")
    if node_name:
        status["nodeName"] = node_name
        hosts = host_ips(policy, snapshot.get("Node", node_name))
        if hosts:
            status["hostIPs"] = hosts
    ips = [{"ip": p["ip"]} for p in pod_status.get("podIPs") or []] or \
        ([{"ip": pod_status["podIP"]}] if pod_status.get("podIP") else [])
    if ips:
        status["podIPs"] = ips
    ports = service_ports(service) if wanted is not None else []
    if ports:
        status["ports"] = ports
    allocations = allocations_from_pod(policy, pod)
    if allocations:
        status["allocations"] = allocations
    plan.status = status


def _pin_message(policy: Policy, snapshot: Snapshot, plan: InstancePlan, instance: dict, instance_type: dict,
                 flavors: list[dict] | None) -> None:
    """A Pod pinned to a Node no flavor of its pool holds waits in Kueue for ever: while it is not
    scheduled, the Instance's phaseMessage says so (rules/instances/pod.yaml ``nodePin``)."""
    node_name = (instance.get("spec") or {}).get("nodeName")
    status = plan.status or {}
    if not node_name or status.get("phase") not in ("Scheduling", "Pending"):
        return
    node = snapshot.get("Node", node_name)
    if flavors is None:
        flavors = pool_flavors(snapshot.get("ClusterQueue", name_of(instance_type)),
                               snapshot.list("ResourceFlavor"))
    if node is None or not flavors or flavors_holding(labels_of(node), flavors):
        return
    message = policy.ruleset.get("InstancePod").nodePin.noFlavorMessage
    plan.status = {**status, "phaseMessage": message.format(node=node_name, pool=name_of(instance_type),
                                                            flavors=", ".join(name_of(f) for f in flavors))}


def _stop(plan: InstancePlan, pod: dict | None, old_status: dict, requeue: int) -> InstancePlan:
    if pod is not None:
        plan.status = {**old_status, "phase": "Stopping"}
        if not is_deleting(pod):   # a Pod in graceful deletion is not deleted again
            plan.actions.append((DELETE_POD, pod["metadata"]["name"]))
        plan.requeue = requeue
    else:
        plan.status = {"phase": "Stopped"}
    return plan
