"""The DeviceClasses the controller derives for the DRA drivers of the rules (spec/dra.md §4): the
objects, the plan against what the cluster holds, ownership, and Kueue's deviceClassMappings."""
from __future__ import annotations

import copy

from runtime.controller.deviceclasses import plan_device_classes
from runtime.controller.plan import Verb
from runtime.engine.pools.deviceclasses import device_class_mappings, device_classes
from runtime.engine.snapshot import Snapshot
from runtime.kube.ownership import owned

NVIDIA_CLASS = {
    "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
    "metadata": {"name": "gpustack-nvidia-gpu.nvidia.com", "labels": {"resource.gpustack.ai/type": "deviceclasses"}},
    "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com" && '
                                                  'device.attributes["gpu.nvidia.com"].type == "gpu"'}}],
             "extendedResourceName": "nvidia.com/gpu"},
}


def live(obj: dict, **meta) -> dict:
    out = copy.deepcopy(obj)
    out["metadata"].update({"uid": "u1", "resourceVersion": "7", **meta})
    return out


def test_one_class_per_driver_row_serves_the_manufacturers_base_key(policy):
    assert device_classes(policy) == [NVIDIA_CLASS]
    assert device_class_mappings(policy) == [{"name": "nvidia.com/gpu",
                                              "deviceClassNames": ["gpustack-nvidia-gpu.nvidia.com"]}]


def test_a_missing_class_is_applied_and_an_equal_one_left_alone(policy):
    (action,) = plan_device_classes(policy, Snapshot.from_objects([]))
    assert (action.verb, action.kind, action.name, action.body, action.reason) == (
        Verb.APPLY, "DeviceClass", "gpustack-nvidia-gpu.nvidia.com", NVIDIA_CLASS, "missing")
    assert plan_device_classes(policy, Snapshot.from_objects([live(NVIDIA_CLASS)])) == []


def test_an_edited_class_is_put_back(policy):
    edited = live(NVIDIA_CLASS)
    edited["spec"]["extendedResourceName"] = "example.com/gpu"
    (action,) = plan_device_classes(policy, Snapshot.from_objects([edited]))
    assert (action.verb, action.reason) == (Verb.APPLY, "labels or spec differ")
    unlabelled = live(NVIDIA_CLASS)
    unlabelled["metadata"]["labels"] = {}
    assert [a.reason for a in plan_device_classes(policy, Snapshot.from_objects([unlabelled]))] == ["labels or spec differ"]


def test_only_owned_classes_no_row_derives_are_deleted(policy):
    stale = live(NVIDIA_CLASS, name="gpustack-amd-gpu.amd.com")
    theirs = live(NVIDIA_CLASS, name="gpu.nvidia.com", labels={})
    deleting = live(NVIDIA_CLASS, name="gpustack-old", deletionTimestamp="2026-01-01T00:00:00Z")
    actions = plan_device_classes(policy, Snapshot.from_objects([live(NVIDIA_CLASS), stale, theirs, deleting]))
    assert [(a.verb, a.name, a.reason) for a in actions] == [(Verb.DELETE, "gpustack-amd-gpu.amd.com", "no DraDriver derives it")]
    assert owned(policy, stale) and not owned(policy, theirs)


def test_a_class_being_deleted_is_recreated_only_once_gone(policy):
    deleting = live(NVIDIA_CLASS, deletionTimestamp="2026-01-01T00:00:00Z")
    assert plan_device_classes(policy, Snapshot.from_objects([deleting])) == []
