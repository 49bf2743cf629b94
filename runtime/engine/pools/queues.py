"""Kueue objects of a pool: ClusterQueue, LocalQueues, the AdmissionCheck (docs/concepts/pools-and-flavors.md
"Queues and the entrance" and "The AdmissionCheck `gpustack-node-devices`").

Quota comes from flavors only (never from the InstanceType): accelerated queues cover
``credits.gpustack.ai/<manufacturer>`` at D per usable accelerator (the flavor's capacity, less what
its nodes' Devices cannot use: docs/concepts/pools-and-flavors.md), CPU queues cover
``cpu`` at capacity cores.
"""
from __future__ import annotations

import copy

from runtime.engine.pools.flavors import FlavorPlan
from runtime.engine.pools.instancetypes import entrance, flavor_selector, matches, schedule_labels
from runtime.model.normalize import format_decimal_quantity
from runtime.engine.policy import Policy
from runtime.engine.settings import Settings
from runtime.engine.snapshot import is_deleting, name_of


def queue_labels(policy: Policy, it: dict, aware: bool) -> dict[str, str]:
    """The ClusterQueue labels: PoolScheduleLabels + ``resource.gpustack.ai/type: instancetypes``."""
    labels = schedule_labels(policy, it.get("spec") or {}, aware)
    labels[policy.key("resourceType")] = policy.derivation.resourceTypes["queue"]
    return labels


def queue_flavors(policy: Policy, labels: dict[str, str], plans: dict[str, FlavorPlan],
                  rendered: dict[str, dict]) -> list[FlavorPlan]:
    """The pool's flavors: selector match, capacity > 0, by per-node count then name."""
    selector = flavor_selector(policy, labels)
    chosen = [plans[name] for name, flavor in rendered.items()
              if plans[name].capacity > 0 and matches(selector, flavor["metadata"]["labels"])]
    return sorted(chosen, key=lambda p: (p.count, p.name))


def holds_reservations(queue: dict | None) -> bool:
    """Whether Workloads still hold a reservation or admission in ``queue`` (its Kueue status)."""
    status = (queue or {}).get("status") or {}
    return int(status.get("reservingWorkloads") or 0) > 0 or int(status.get("admittedWorkloads") or 0) > 0


def cluster_queue(policy: Policy, settings: Settings, it: dict, labels: dict[str, str],
                  flavors: list[FlavorPlan], old: dict | None = None,
                  usable: dict[str, int] | None = None) -> tuple[dict, str]:
    """(ClusterQueue object, phaseMessage) for one InstanceType.

    ``usable``: device flavor name -> the accelerators its quota counts
    (:func:`runtime.engine.pools.reach.usable_quota`); a flavor not in it counts its capacity.

    ``old`` is the queue as the cluster holds it. When the pool lost every flavor while Workloads
    still hold reservations, the old groups are kept: with ``instance-type-drain-when-no-flavors``
    the queue goes ``HoldAndDrain`` (Kueue evicts, the Instances are stopped), otherwise it waits for
    the reservations to clear; once none remains the groups are emptied. A queue a rules generation
    emptied (``old`` carries the ``queueEmptiedByRules`` annotation, written when that generation went
    live) is never drained: it keeps its groups under ``Hold`` (nothing new is admitted, nothing running
    is evicted) until its flavors come back, and keeps the annotation until then.
    """
    spec_it = it.get("spec") or {}
    rules = policy.queues.clusterQueue
    spec = copy.deepcopy(rules.template)
    message = ""
    if len(flavors) > rules.maxFlavors:
        message = rules.tooManyFlavorsMessage.evaluate({"count": len(flavors), "max": rules.maxFlavors})
        flavors = flavors[: rules.maxFlavors]
    acceleratable = bool(spec_it.get("acceleratable"))
    if acceleratable:
        resource = policy.prefix("credits") + (spec_it.get("acceleratorGroup") or "").split("-", 1)[0]
        counted = usable or {}
        quota = lambda plan: format_decimal_quantity(  # noqa: E731
            counted.get(plan.name, plan.capacity) * policy.constants.creditsPerAccelerator)
    else:
        resource = policy.kueue.cpuResource
        quota = lambda plan: format_decimal_quantity(plan.capacity)  # noqa: E731
    groups = []
    if flavors:
        groups.append({"coveredResources": [resource],
                       "flavors": [{"name": plan.name,
                                    "resources": [{"name": resource, "nominalQuota": quota(plan)}]}
                                   for plan in flavors]})
    spec["resourceGroups"] = groups
    old_spec = (old or {}).get("spec") or {}
    if spec_it.get("inactive"):
        spec["stopPolicy"] = "Hold"
    emptied_by = (((old or {}).get("metadata") or {}).get("annotations") or {}).get(
        policy.key("queueEmptiedByRules"))
    if not flavors and old_spec.get("resourceGroups") and (holds_reservations(old) or emptied_by):
        _keep_without_flavors(policy, settings, spec, old_spec, bool(emptied_by))
    if is_deleting(it):
        spec["stopPolicy"] = "HoldAndDrain"
    if acceleratable and settings.flag(policy.setting("derivedFromNode")):
        spec["admissionChecksStrategy"] = {
            "admissionChecks": [{"name": policy.queues.admissionCheck.name}]}
    obj = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
           "metadata": {"name": name_of(it), "labels": labels}, "spec": spec}
    if emptied_by and not flavors:
        obj["metadata"]["annotations"] = {policy.key("queueEmptiedByRules"): emptied_by}
    return obj, message


def _keep_without_flavors(policy: Policy, settings: Settings, spec: dict, old_spec: dict,
                          emptied: bool) -> None:
    """A pool without flavors whose queue still counts: its old groups are kept, under ``Hold`` when a rules
    generation ``emptied`` it, else ``HoldAndDrain`` (``instance-type-drain-when-no-flavors``) or its old
    stop policy (see :func:`cluster_queue`)."""
    spec["resourceGroups"] = old_spec["resourceGroups"]
    if emptied:
        spec["stopPolicy"] = "Hold"
    elif settings.flag(policy.setting("drainWhenNoFlavors")):
        spec["stopPolicy"] = "HoldAndDrain"
    else:
        spec["stopPolicy"] = old_spec.get("stopPolicy", spec["stopPolicy"])


def local_queues(policy: Policy, queue: dict, namespaces: list[str]) -> list[dict]:
    """One LocalQueue per namespace, named by the entrance, owned by the ClusterQueue."""
    name = name_of(queue)
    lq_name = entrance(policy, name)
    return [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
             "metadata": {"name": lq_name, "namespace": ns,
                          "annotations": {policy.key("queueAnnotation"): name}},
             "spec": {"clusterQueue": name}} for ns in namespaces]


def admission_check(policy: Policy) -> dict:
    """The ``gpustack-node-devices`` AdmissionCheck (docs/concepts/pools-and-flavors.md "The AdmissionCheck
    `gpustack-node-devices`")."""
    ac = policy.queues.admissionCheck
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck",
            "metadata": {"name": ac.name, "labels": dict(ac.labels)},
            "spec": {"controllerName": ac.controllerName}}
