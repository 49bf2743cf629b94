"""The DeviceClasses the controller derives for the DRA drivers of the rules (docs/concepts/dra.md "The ledger from claims"): the
objects, the plan against what the cluster holds, ownership, and Kueue's deviceClassMappings."""
from __future__ import annotations

import copy

import pytest

from runtime.controller.deviceclasses import plan_device_classes
from runtime.engine.ownership import owned
from runtime.engine.plan import Verb
from runtime.engine.pools.deviceclasses import device_class_mappings, device_classes
from runtime.engine.snapshot import Snapshot
from tests.fakeapi import FakeApi

NVIDIA_CLASS = {
    "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
    "metadata": {"name": "gpustack-nvidia-gpu.nvidia.com", "labels": {"resource.gpustack.ai/type": "deviceclasses"}},
    "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com" && '
                                                  'device.attributes["gpu.nvidia.com"].type == "gpu"'}}],
             "extendedResourceName": "nvidia.com/gpu"},
}


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    """The shipped rules with NVIDIA's driver row alone (AMD's and Intel's rows left out: their classes are
    tests/cli/test_vendors.py's)."""
    import shutil

    from runtime.engine.policy import Policy
    from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules

    rules = tmp_path_factory.mktemp("nvidia-only") / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules)
    for other in ("dra-amd.yaml", "dra-intel.yaml"):
        (rules / other).unlink()
    return Policy(load_rules(rules))


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


# --- the feature check (runtime/controller/deviceclasses.py DeviceClassFeature) -----------------------
DEVICE_CLASSES = {"DeviceClass": ("resource.k8s.io/v1", "deviceclasses", False)}


def _session(served=True, drops=None) -> FakeApi:
    """The in-memory API serving DeviceClasses or not; ``drops``: the fields it does not know."""
    return FakeApi(kinds=DEVICE_CLASSES if served else {}, drops=drops)


MISSING = ("the cluster does not serve resource.k8s.io/v1 deviceclasses with spec.extendedResourceName (Kubernetes' "
           "DRA extended-resource feature); no DeviceClass is derived for the DRA drivers gpu.nvidia.com, so Pods on "
           "nodes whose accelerators come from DRA cannot get them through nvidia.com/gpu")


def _check(policy, session):
    from runtime.controller.deviceclasses import DeviceClassFeature
    events = []
    feature = DeviceClassFeature(session)
    return feature, feature.check(policy, "gpustack-system", events.append), events


def test_a_server_keeping_the_field_takes_the_classes_after_a_dry_run(policy):
    session = _session()
    feature, available, events = _check(policy, session)
    assert available and feature.served and events == []
    assert session.calls == [("post", "/apis/resource.k8s.io/v1/deviceclasses", {"dryRun": "All"})]


@pytest.mark.parametrize("session, why", [
    (_session(served=False), "404 NotFound: the server does not serve DeviceClass (resource.k8s.io/v1)"),
    (_session(drops={"DeviceClass": ["spec.extendedResourceName"]}),
     "spec.extendedResourceName is dropped by the server"),
])
def test_without_the_feature_a_warning_event_and_nothing_derived(policy, session, why):
    feature, available, events = _check(policy, session)
    assert not available
    (event,) = events
    assert (event["type"], event["reason"], event["message"]) == ("Warning", "DeviceClassesNotDerived", f"{MISSING} ({why})")
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Namespace", "name": "gpustack-system",
                                       "namespace": "gpustack-system"}
    assert event["metadata"]["namespace"] == "gpustack-system"
