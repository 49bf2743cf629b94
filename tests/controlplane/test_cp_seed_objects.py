"""Every seed object applies cleanly to a real API server with our, Kueue's and NFD's CRDs.

Applied with ``kubectl apply --validate=strict`` (unknown fields are errors, so a schema that would
silently prune a seed field fails here); a seed ``status`` is then written through the status
subresource. The live object must contain every seed field with the seed's value.
"""

from __future__ import annotations

import json

import pytest

from testing.localcluster.testing import SeedObject, seed_objects, shared_dir, shared_missing_reason


def _seed_params():
    d = shared_dir()
    if d is None:
        return [pytest.param(None, marks=pytest.mark.skip(reason=shared_missing_reason()), id="no-seed")]
    return [pytest.param(o, id=o.path.stem) for o in seed_objects(d)]


@pytest.fixture(scope="module", autouse=True)
def _seed_objects_removed_after(control_plane):
    """The seed objects this module applies are deleted when it ends (finalizers dropped first; the
    namespaces stay): later modules on the shared control plane find only what they create."""
    yield
    kubectl = control_plane[1]
    d = shared_dir()
    for obj in reversed(seed_objects(d) if d is not None else []):
        if obj.kind == "Namespace":
            continue
        where = [resource_of(obj.body), obj.name, *ns_args(obj.body)]
        kubectl("patch", *where, "--type=merge", "-p", '{"metadata":{"finalizers":null}}', check=False)
        kubectl("delete", *where, "--ignore-not-found", "--wait=true")


def resource_of(body: dict) -> str:
    """kubectl resource argument for an object body: ``kind.version.group`` (``kind`` for core)."""
    api = body["apiVersion"]
    if "/" not in api:
        return body["kind"].lower()
    group, version = api.split("/")
    return f"{body['kind'].lower()}.{version}.{group}"


def ns_args(body: dict) -> list[str]:
    ns = body["metadata"].get("namespace")
    return ["-n", ns] if ns else []


def assert_contains(expected, actual, path="") -> None:
    """Every key/value of ``expected`` is in ``actual`` (lists element-wise, same length)."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{path}: expected an object, got {actual!r}"
        for k, v in expected.items():
            assert k in actual, f"{path}.{k} missing from the live object (pruned by the schema?)"
            assert_contains(v, actual[k], f"{path}.{k}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), f"{path}: {actual!r} != {expected!r}"
        for i, (e, a) in enumerate(zip(expected, actual)):
            assert_contains(e, a, f"{path}[{i}]")
    else:
        assert actual == expected, f"{path}: live {actual!r} != seed {expected!r}"


def apply_seed(kubectl, obj: SeedObject) -> dict:
    """Apply one seed file (strict field validation), write its status, return the live object."""
    body = obj.body
    if obj.namespace:
        kubectl("create", "namespace", obj.namespace, check=False)
    kubectl("apply", "--validate=strict", "-f", str(obj.path))
    res = resource_of(body)
    if "status" in body:
        kubectl("patch", res, obj.name, *ns_args(body), "--subresource=status", "--type=merge",
                "-p", json.dumps({"status": body["status"]}))
    return json.loads(kubectl.stdout("get", res, obj.name, *ns_args(body), "-o", "json"))


@pytest.mark.parametrize("obj", _seed_params())
def test_seed_object_applies(kubectl, obj: SeedObject):
    live = apply_seed(kubectl, obj)
    expected = {k: v for k, v in obj.body.items() if k not in ("apiVersion", "kind")}
    assert live["kind"] == obj.kind and live["apiVersion"] == obj.body["apiVersion"]
    assert_contains(expected, live)
    # applying the same file again is a no-op
    out = kubectl.stdout("apply", "--validate=strict", "-f", str(obj.path))
    assert out.strip().endswith("unchanged"), out


def test_seed_covers_every_kind_we_ship(seed):
    kinds = {(o.body["apiVersion"], o.kind) for o in seed}
    for needed in [("worker.gpustack.ai/v1", "InstanceType"), ("worker.gpustack.ai/v1", "InstanceTypeFlavor"),
                   ("worker.gpustack.ai/v1", "Devices"), ("worker.gpustack.ai/v1", "Instance"),
                   ("kueue.x-k8s.io/v1beta2", "ClusterQueue"), ("kueue.x-k8s.io/v1beta2", "ResourceFlavor"),
                   ("nfd.k8s-sigs.io/v1alpha1", "NodeFeature"), ("v1", "Node")]:
        assert needed in kinds


def test_status_is_a_subresource(kubectl):
    """A status sent with the main resource is dropped; the status subresource stores it."""
    body = {"apiVersion": "worker.gpustack.ai/v1", "kind": "InstanceType",
            "metadata": {"name": "status-subresource-check"},
            "spec": {"acceleratable": False, "os": "linux", "arch": "amd64"},
            "status": {"phase": "Active"}}
    kubectl("apply", "-f", "-", input=json.dumps(body))
    live = json.loads(kubectl.stdout("get", "instancetype", "status-subresource-check", "-o", "json"))
    assert "status" not in live
    kubectl("patch", "instancetype", "status-subresource-check", "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": {"phase": "Active"}}))
    assert kubectl.stdout("get", "instancetype", "status-subresource-check",
                          "-o", "jsonpath={.status.phase}") == "Active"
    kubectl("delete", "instancetype", "status-subresource-check")


# docs/concepts/pools-and-flavors.md "InstanceType status", docs/reference/crds.md "InstanceType (`worker.gpustack.ai`)": the full status shape round-trips without pruning
FULL_STATUS = {
    "phase": "Active", "phaseMessage": "", "entrance": "gpustack-fnv64-c4680bb149644f1c",
    "accelerator": {"capacity": "1", "onceMaxRequest": "1", "remaining": "1"},
    "acceleratorShared": {"capacity": "10", "onceMaxRequest": "10", "remaining": "10"},
    "acceleratorSliced": {"capacity": "100", "onceMaxRequest": "100", "remaining": "100"},
    "acceleratorPartitioned": {"capacity": "7", "onceMaxRequest": "7", "remaining": "5",
                               "allocatedProfiles": [{"name": "1g.10gb", "count": 2}],
                               "remainingProfiles": [{"name": "1g.10gb", "count": 5}, {"name": "7g.80gb", "count": 0}]},
    "cpu": {"capacity": "0", "onceMaxRequest": "0", "remaining": "0"},
    "detail": {"manufacturer": "nvidia", "product": "NVIDIA-A10G", "family": "Ampere", "memory": "24Gi",
               "cores": "10240", "computeCapability": "8.6",
               "slicedDetail": {"logical": {"count": 128, "coresPercentageOvercommit": True},
                                "physical": {"count": 7, "profiles": [{"name": "1g.10gb", "count": 7, "memoryMib": 9984}]}}},
    "summary": {"unit": "8/64Gi/100Gi", "accelerator": "1/1 10/10 100/100 7/5", "cpu": "0/0",
                "partitions": "1g.10gb=5,7g.80gb=0"},
}


def test_full_instancetype_status_round_trips(kubectl):
    body = {"apiVersion": "worker.gpustack.ai/v1", "kind": "InstanceType", "metadata": {"name": "full-status"},
            "spec": {"acceleratable": True, "acceleratorGroup": "nvidia-a10g", "os": "linux", "arch": "amd64",
                     "displayName": "A10G", "description": "d", "inactive": False, "computeCapability": "8.6",
                     "feature": {"logicalSliced": {"maxSize": 128, "coresPercentageOvercommit": True,
                                                   "memoryPercentageStep": 1},
                                 "physicalSliced": {"maxSize": 0}}}}
    kubectl("apply", "--validate=strict", "-f", "-", input=json.dumps(body))
    kubectl("patch", "instancetype", "full-status", "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": FULL_STATUS}))
    live = json.loads(kubectl.stdout("get", "instancetype", "full-status", "-o", "json"))
    assert live["status"] == FULL_STATUS
    assert live["spec"] == body["spec"]
    wide = kubectl.stdout("get", "instancetype", "full-status", "-o", "wide").splitlines()
    assert wide[0].split()[-1] == "PARTITIONS" and wide[1].split()[-1] == "1g.10gb=5,7g.80gb=0"
    narrow = kubectl.stdout("get", "instancetype", "full-status").splitlines()
    assert "PARTITIONS" not in narrow[0]
    kubectl("delete", "instancetype", "full-status")


def test_devices_spec_and_instance_status_round_trip(kubectl):
    devices = {"apiVersion": "worker.gpustack.ai/v1", "kind": "Devices", "metadata": {"name": "node-roundtrip"},
               "spec": {"groups": [{"id": "a100", "manufacturer": "nvidia", "name": "NVIDIA A100-SXM4-80GB",
                                    "memory": 81920, "cores": 6912, "driverVersion": "580.159.03",
                                    "runtimeVersion": "13.0", "computeCapability": "8.0", "family": "Ampere",
                                    "accelerators": [{"id": "GPU-1", "index": 0, "physicalIndexes": [0],
                                                      "status": {"unhealthy": False,
                                                                 "logicalSliced": {"count": 0, "coresPercentageOvercommit": False},
                                                                 "physicalSliced": {"count": 7, "profiles": [
                                                                     {"name": "1g.10gb", "memoryMib": 9984, "computeSlices": 1,
                                                                      "memorySlices": 1, "count": 7,
                                                                      "placements": [{"start": 0, "length": 1}]}]}}}]}]}}
    status = {"groups": [{"id": "a100", "manufacturer": "nvidia", "accelerators": [
        {"id": "GPU-1", "index": 0, "mode": 4, "allocated": 228571, "remaining": 1371429,
         "allocatedProfiles": [{"name": "1g.10gb", "count": 1}],
         "remainingProfiles": [{"name": "1g.10gb", "count": 6}]}]}]}
    kubectl("apply", "--validate=strict", "-f", "-", input=json.dumps(devices))
    kubectl("patch", "devices", "node-roundtrip", "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": status}))
    live = json.loads(kubectl.stdout("get", "devices", "node-roundtrip", "-o", "json"))
    assert live["spec"] == devices["spec"] and live["status"] == status
    kubectl("delete", "devices", "node-roundtrip")

    inst = {"apiVersion": "worker.gpustack.ai/v1", "kind": "Instance",
            "metadata": {"name": "roundtrip", "namespace": "default"},
            "spec": {"type": "t", "image": "ubuntu:24.04", "imagePullPolicy": "Always", "privileged": False,
                     "ports": [{"port": 22, "protocol": "TCP", "name": "ssh"}], "env": [{"name": "A", "value": "1"}],
                     "resources": {"cpu": "1", "ram": "12Gi", "localStorage": "15Gi", "accelerator": "1",
                                   "acceleratorSlicedMemoryPercentage": 20, "acceleratorSlicedCoresPercentage": 100,
                                   "acceleratorPartitionedProfile": ""},
                     "imagePullSecret": {"name": "pull"}, "sshPublicKey": {"name": "ssh"}, "stop": False,
                     "volume": {"persistent": {"name": "ws"}}, "volumeMount": "/workspace",
                     "additionalVolumes": [{"mountPath": "/s", "secret": {"name": "s"}}]}}
    inst_status = {"phase": "Ready", "phaseMessage": "", "nodeName": "node-a10g",
                   "hostIPs": [{"ip": "192.0.2.1"}], "podIPs": [{"ip": "10.1.0.5"}],
                   "ports": [{"port": 22, "protocol": "TCP", "name": "ssh", "nodePort": 30022}],
                   "allocations": [{"id": "a10g", "manufacturer": "nvidia", "accelerators": [
                       {"id": "GPU-e0587d2e", "index": 0, "mode": 4, "allocated": 320000,
                        "allocatedPhysicalProfile": "1g.6gb", "allocatedPhysicalPlacements": [{"start": 0, "length": 1}]}]}]}
    kubectl("apply", "--validate=strict", "-f", "-", input=json.dumps(inst))
    kubectl("patch", "instance", "roundtrip", "-n", "default", "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": inst_status}))
    live = json.loads(kubectl.stdout("get", "instance", "roundtrip", "-n", "default", "-o", "json"))
    assert live["spec"] == inst["spec"] and live["status"] == inst_status
    table = kubectl.stdout("get", "inst", "roundtrip", "-n", "default").splitlines()
    assert table[0].split() == ["NAME", "TYPE", "PHASE", "NODE", "AGE"]
    assert table[1].split()[:4] == ["roundtrip", "t", "Ready", "node-a10g"]
    kubectl("delete", "instance", "roundtrip", "-n", "default")
