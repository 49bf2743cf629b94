"""Which objects accelpolicy owns, and so may delete (spec/pools.md §2.4, §4, §7-§8, §11).

Kept apart from :mod:`runtime.kube.applier` so the pure planner can use the same rule without
importing the client library.
"""
from __future__ import annotations

from runtime.engine.policy import Policy
from runtime.engine.snapshot import annotations_of, labels_of


def owned(policy: Policy, obj: dict) -> bool:
    """Whether accelpolicy owns ``obj``: ResourceFlavors labelled ``resource.gpustack.ai/type: nodes``,
    ClusterQueues labelled ``resource.gpustack.ai/type: instancetypes``, LocalQueues annotated
    ``schedule.gpustack.ai/queue``, every InstanceTypeFlavor. Never an InstanceType (create-only,
    §4) nor any other kind. Keys and values come from the policy."""
    kind = obj.get("kind")
    resource_type = labels_of(obj).get(policy.key("resourceType"))
    types = policy.derivation.resourceTypes
    if kind == "ResourceFlavor":
        return resource_type == types["flavor"]
    if kind == "ClusterQueue":
        return resource_type == types["queue"]
    if kind == "LocalQueue":
        return policy.key("queueAnnotation") in annotations_of(obj)
    return kind == "InstanceTypeFlavor"
