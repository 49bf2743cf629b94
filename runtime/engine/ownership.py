"""Which objects accelpolicy owns, and so may delete (docs/concepts/pools-and-flavors.md "Pools and flavors";
docs/concepts/instances.md "The Instance's Pod").

Pure, in the engine (no I/O): the planner (:mod:`runtime.engine.plan`) and the writers
(:mod:`runtime.kube.applier`, :mod:`runtime.agent.cluster`) use the same rules; the one ownership
helper of the agent (:func:`owned_by`) and the controller (:func:`owned`, :func:`owned_by_instance`).

Sources: docs/concepts/dra.md "The ledger from claims".
"""
from __future__ import annotations

from runtime.engine.admission.registration import owned_configuration
from runtime.engine.policy import Policy
from runtime.engine.pools.deviceclasses import owned_device_class
from runtime.engine.snapshot import KNOWN_KINDS, annotations_of, labels_of


def controller_owner(obj: dict) -> dict | None:
    """The ownerReference of ``obj`` marked ``controller: true``, or None."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


def owned_by(obj: dict, owner_uid: str, owner_name: str) -> bool:
    """Whether ``obj``'s controller ownerReference is the owner (by uid, or by name when ``owner_uid`` is
    empty): the agent's rule for the NodeFeatures and Devices it may replace or delete."""
    ref = controller_owner(obj)
    if ref is None:
        return False
    return ref.get("uid") == owner_uid if owner_uid else ref.get("name") == owner_name


def owned_by_instance(obj: dict, instance_uid: str | None = None) -> bool:
    """Whether ``obj``'s controller ownerReference is an Instance (``worker.gpustack.ai``), and, when
    ``instance_uid`` is given, that Instance."""
    ref = controller_owner(obj)
    if ref is None or ref.get("kind") != "Instance" or ref.get("apiVersion") != KNOWN_KINDS["Instance"][0]:
        return False
    return instance_uid is None or ref.get("uid") == instance_uid


def owned(policy: Policy, obj: dict) -> bool:
    """Whether accelpolicy owns ``obj``: ResourceFlavors labelled ``resource.gpustack.ai/type: nodes``,
    ClusterQueues labelled ``resource.gpustack.ai/type: instancetypes``, LocalQueues annotated
    ``schedule.gpustack.ai/queue``, every InstanceTypeFlavor, Pods whose controller ownerReference is
    an Instance, webhook configurations carrying the labels of rules/admission/registration.yaml,
    DeviceClasses labelled ``resource.gpustack.ai/type: deviceclasses``. Never an InstanceType
    (create-only) nor any other kind. Keys and values come from the policy."""
    kind = obj.get("kind")
    resource_type = labels_of(obj).get(policy.key("resourceType"))
    types = policy.derivation.resourceTypes
    if kind == "ResourceFlavor":
        return resource_type == types["flavor"]
    if kind == "ClusterQueue":
        return resource_type == types["queue"]
    if kind == "LocalQueue":
        return policy.key("queueAnnotation") in annotations_of(obj)
    if kind == "Pod":
        return owned_by_instance(obj)
    if kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        return owned_configuration(policy, obj)
    if kind == "DeviceClass":
        return owned_device_class(policy, obj)
    return kind == "InstanceTypeFlavor"
