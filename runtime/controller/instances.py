"""The Instance reconciler (docs/concepts/instances.md "Life cycle" and "The Instance's Pod" and "Persistent
volumes"): engine decisions turned into controller writes.

For every cached Instance, :func:`plan_instances` calls the engine's
:func:`runtime.engine.instances.instancelife.plan_instance` with

* the Pod of the same name and namespace, but only when its controller ownerReference is that
  Instance (uid). A same-named Pod owned by anything else is never deleted nor created over: the
  engine sees no Pod, its ``CREATE_POD`` is dropped, and the Instance is reported in
  ``InstanceActions.foreign`` (a deleted Instance still loses its finalizer, leaving that Pod be);
* its InstanceType as the engine derived it (``DesiredState.instance_types``: computed ``status``
  with ``entrance`` and ``detail``) with the live object's ``metadata`` (so a deletion timestamp
  counts), or None when neither exists;
* the live ClusterQueue of that type (same name), whose ``spec.stopPolicy`` drives the drain stop;
* (through the snapshot) the Service of the same name (``status.ports``) and the Pod's Node
  (``status.hostIPs``);

and turns the :class:`~runtime.engine.instances.instancelife.InstancePlan` into :class:`Action` s for
:meth:`runtime.controller.actions.ActionWriter.execute`:

======================  ==============================================================================
engine action           Action
======================  ==============================================================================
ADD_FINALIZER           ``add-finalizer`` Instance (JSON patch; key role ``instanceFinalizer``)
(plan.status)           ``apply-status`` Instance (status subresource), only when it differs
SET_STOP                ``patch`` Instance ``{"spec": {"stop": true}}`` (merge patch) with the
                        ``instanceStoppedBy`` annotation (rules/labels.yaml): the controller stopped
                        it; ``false`` when its pool is back, the annotation removed
DELETE_POD              ``delete`` Pod (the applier refuses a Pod no Instance controls)
CREATE_POD              ``create`` Pod (rendered once, never re-diffed; no ``spec.nodeName``)
CREATE_SERVICE          ``create`` Service (NodePort; created when missing, never updated)
REMOVE_FINALIZER        ``remove-finalizer`` Instance
======================  ==============================================================================

The status goes first, so a drain writes phase ``Stopping`` before ``spec.stop`` and the Pod delete.
``InstanceActions.requeue`` is the smallest ``plan.requeue`` > 0 (seconds), after which the controller
reconciles again without an event.

Re-enqueueing: the controller reconciles every Instance on every pass, and any event (an InstanceType's
deletion timestamp, a ClusterQueue's ``stopPolicy``, a Pod, a PVC, the settings Secret) starts a pass,
so every Instance of a type is looked at again when its type or queue changes.

Sources: docs/concepts/out-of-service.md "Cordoned and tainted nodes".
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from runtime.engine.admissioncheck import RETRY, check_entry
from runtime.engine.ownership import owned_by_instance
from runtime.engine.plan import Action, Verb
from runtime.engine.pools import DesiredState
from runtime.engine.instances import (InstanceAction, claim_status, owns_claim, plan_instance, pool_flavors,
                                      render_claim)
from runtime.engine.policy import Policy
from runtime.engine.snapshot import KNOWN_KINDS, Snapshot, is_deleting, name_of


#: the ``instanceStoppedBy`` annotation's value on an Instance the controller stopped
STOPPED_BY_CONTROLLER = "controller"


@dataclass
class InstanceActions:
    """``actions`` for every Instance in order; ``requeue``: seconds until the next pass is due (0:
    only on events); ``foreign``: ``namespace/name`` of Instances whose same-named Pod is not theirs
    (no Pod is created for them)."""

    actions: list[Action] = field(default_factory=list)
    requeue: float = 0.0
    foreign: list[str] = field(default_factory=list)


def _created(obj: dict | None) -> datetime | None:
    stamp = ((obj or {}).get("metadata") or {}).get("creationTimestamp")
    if not stamp:
        return None
    return datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))


def pod_age_seconds(instance: dict, pod: dict | None) -> float:
    """Pod creation minus Instance creation in seconds; 0 when either is unknown."""
    pod_at, instance_at = _created(pod), _created(instance)
    if pod_at is None or instance_at is None:
        return 0.0
    return (pod_at - instance_at).total_seconds()


def instance_type_for(state: DesiredState, snapshot: Snapshot, name: str) -> dict | None:
    """The InstanceType ``name`` with its derived status and the live metadata (None if neither the
    cluster nor this reconcile holds it; a derived type created by this very reconcile counts)."""
    desired = next((it for it in state.instance_types if name_of(it) == name), None)
    live = snapshot.get("InstanceType", name) if name else None
    if desired is None:
        return live
    if live is None:
        return desired
    return {**desired, "metadata": live["metadata"]}


# The engine's InstanceAction -> the controller's write: (name, namespace, instance, its Pod, payload) ->
# Action.
_INSTANCE_WRITES = {
    InstanceAction.ADD_FINALIZER: lambda name, ns, instance, pod, payload: Action(
        Verb.ADD_FINALIZER, "Instance", name, ns, body=instance, reason="ensure the Instance finalizer"),
    InstanceAction.REMOVE_FINALIZER: lambda name, ns, instance, pod, payload: Action(
        Verb.REMOVE_FINALIZER, "Instance", name, ns, body=instance, reason="its Pod is gone"),
    InstanceAction.SET_STOP: lambda name, ns, instance, pod, payload: Action(
        Verb.PATCH, "Instance", name, ns, body={"spec": {"stop": bool(payload)}},
        reason="drain stop: type gone, being deleted, or its queue HoldAndDrain" if payload
        else "its pool is back: the controller stopped it, so it starts again"),
    InstanceAction.DELETE_POD: lambda name, ns, instance, pod, payload: Action(
        Verb.DELETE, "Pod", name, ns, body=pod, reason="stop, delete or rebuild"),
    InstanceAction.CREATE_POD: lambda name, ns, instance, pod, payload: Action(
        Verb.CREATE, "Pod", name, ns, body=payload, reason="no Pod yet"),
    InstanceAction.CREATE_SERVICE: lambda name, ns, instance, pod, payload: Action(
        Verb.CREATE, "Service", name, ns, body=payload, reason="the Pod has container ports"),
}


def plan_instances(policy: Policy, state: DesiredState, snapshot: Snapshot,
                   remembered: dict[tuple[str, str], str] | None = None) -> InstanceActions:
    """Actions bringing every Instance of ``snapshot`` one step further (see the module docstring).
    ``remembered``: the check's last Retry message per Pod (:class:`RetryMessages`), beside those the
    snapshot's Workloads still carry."""
    out = InstanceActions()
    requeues = []
    api_version = KNOWN_KINDS["Instance"][0]
    desired_queues = {name_of(q): q for q in state.cluster_queues}
    flavors_of: dict[str, list[dict]] = {}   # type name -> its pool's ResourceFlavors (desired, queue order)
    retries = {**(remembered or {}), **check_retries(policy, snapshot)}
    for instance in snapshot.list("Instance"):
        meta = instance["metadata"]
        name, namespace = meta["name"], meta.get("namespace") or "default"
        pod = snapshot.get("Pod", name, namespace)
        foreign = pod is not None and not owned_by_instance(pod, meta.get("uid"))
        if foreign:
            out.foreign.append(f"{namespace}/{name}")
            pod = None
        type_name = (instance.get("spec") or {}).get("type") or ""
        instance_type = instance_type_for(state, snapshot, type_name)
        queue = snapshot.get("ClusterQueue", type_name) if type_name else None
        if type_name not in flavors_of:
            flavors_of[type_name] = pool_flavors(desired_queues.get(type_name), state.resource_flavors)
        decided = plan_instance(policy, state.settings, snapshot, instance, pod, instance_type, queue,
                                pod_age_seconds(instance, pod), flavors=flavors_of[type_name],
                                check_message=retries.get((namespace, name), "") if pod is not None else "")
        first: list[Action] = []
        rest: list[Action] = []
        for verb, payload in decided.actions:
            if verb == InstanceAction.CREATE_POD and foreign:
                continue
            to_action = _INSTANCE_WRITES.get(verb)
            if to_action is None:
                raise ValueError(f"unknown Instance action {verb}")
            action = to_action(name, namespace, instance, pod, payload)
            if verb == InstanceAction.SET_STOP:   # who stopped it: the controller (never its owner)
                action.body["metadata"] = {"annotations": {
                    policy.key("instanceStoppedBy"): STOPPED_BY_CONTROLLER if payload else None}}
            (first if verb == InstanceAction.ADD_FINALIZER else rest).append(action)
        if decided.status is not None and decided.status != (instance.get("status") or {}):
            first.append(Action(Verb.APPLY_STATUS, "Instance", name, namespace,
                                body={"apiVersion": instance.get("apiVersion", api_version),
                                      "kind": "Instance", "metadata": {"name": name, "namespace": namespace},
                                      "status": decided.status},
                                reason=f"phase {decided.status.get('phase', '')}"))
        out.actions += first + rest
        if decided.requeue > 0:
            requeues.append(decided.requeue)
    out.requeue = float(min(requeues)) if requeues else 0.0
    return out


def check_retries(policy: Policy, snapshot: Snapshot) -> dict[tuple[str, str], str]:
    """(namespace, Pod name) -> the node-devices check's message, for each Workload of a Pod (Kueue's Pod
    integration: its owner) whose check entry is ``Retry`` (a Pending Instance says why)."""
    out: dict[tuple[str, str], str] = {}
    for workload in snapshot.list("Workload"):
        entry = check_entry(policy, workload)
        if entry is None or entry.get("state") != RETRY:
            continue
        meta = workload.get("metadata") or {}
        for owner in meta.get("ownerReferences") or []:
            if owner.get("kind") == "Pod":
                out[(meta.get("namespace") or "", owner.get("name", ""))] = entry.get("message") or ""
    return out


def _owner_pods(workload: dict) -> list[tuple[str, str]]:
    meta = workload.get("metadata") or {}
    return [(meta.get("namespace") or "", o.get("name", "")) for o in meta.get("ownerReferences") or []
            if o.get("kind") == "Pod"]


class RetryMessages:
    """The node-devices check's last Retry message per Pod (its Workload's owner), kept until the check
    answers Ready or the Workload is gone: Kueue resets a Retry to Pending at once when it evicts, so the
    snapshot alone would lose it by the next pass (a waiting Instance says why)."""

    def __init__(self) -> None:
        self.by_pod: dict[tuple[str, str], str] = {}

    def update(self, snapshot: Snapshot, verdicts: dict) -> None:
        """This pass's ``verdicts`` (``(namespace, Workload name)`` -> Verdict) over ``snapshot``."""
        for (namespace, name), verdict in verdicts.items():
            workload = snapshot.get("Workload", name, namespace) or {}
            for pod in _owner_pods(workload):
                if verdict.state == RETRY:
                    self.by_pod[pod] = verdict.message
                else:
                    self.by_pod.pop(pod, None)
        alive = {pod for workload in snapshot.list("Workload") for pod in _owner_pods(workload)}
        self.by_pod = {pod: message for pod, message in self.by_pod.items() if pod in alive}


def plan_persistent_volumes(policy: Policy, snapshot: Snapshot) -> list[Action]:
    """Actions for every InstancePersistentVolume (docs/concepts/instances.md "Persistent volumes"):
    ``create`` its claim when no PersistentVolumeClaim of that name exists (created once, never updated: the
    claim's fields are immutable), and ``apply-status`` ``{phase, volume}`` mirrored from the claim when it
    differs. A same-named claim the InstancePersistentVolume does not control is neither touched nor mirrored.
    Deleting the InstancePersistentVolume removes the claim through its ownerReference (garbage
    collector)."""
    out: list[Action] = []
    api_version = KNOWN_KINDS["InstancePersistentVolume"][0]
    for ipv in snapshot.list("InstancePersistentVolume"):
        if is_deleting(ipv):
            continue
        meta = ipv["metadata"]
        name, namespace = meta["name"], meta.get("namespace") or "default"
        pvc = snapshot.get("PersistentVolumeClaim", name, namespace)
        if pvc is None:
            out.append(Action(Verb.CREATE, "PersistentVolumeClaim", name, namespace,
                              body=render_claim(policy, ipv),
                              reason="the InstancePersistentVolume's claim"))
            continue
        status = claim_status(pvc) if owns_claim(ipv, pvc) else {}
        if status and status != (ipv.get("status") or {}):
            out.append(Action(Verb.APPLY_STATUS, "InstancePersistentVolume", name, namespace,
                              body={"apiVersion": ipv.get("apiVersion", api_version),
                                    "kind": "InstancePersistentVolume",
                                    "metadata": {"name": name, "namespace": namespace}, "status": status},
                              reason=f"claim {status.get('phase', '')}"))
    return out
