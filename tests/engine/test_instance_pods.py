"""Instance -> Pod rendering and phases (docs/concepts/instances.md "Instances")."""
from __future__ import annotations

import copy

import pytest

from runtime.engine.pools.derive import derive
from runtime.engine.instances.instancepods import container_resources, render_pod
from runtime.engine.instances.podstatus import phase_from_pod
from runtime.engine.snapshot import Snapshot
from runtime.snapshots import load_snapshot
from tests.seedfiles import FIXTURES, seed_object


@pytest.fixture(scope="module")
def seed(policy):
    snapshot = load_snapshot([FIXTURES / "seed" / "step1"])
    state = derive(policy, snapshot)
    types = {it["metadata"]["name"]: it for it in state.instance_types}
    return snapshot, state.settings, types


def instance(type_name, cpu, ram, storage, accelerator=None, **extra):
    res = {"cpu": cpu, "ram": ram, "localStorage": storage}
    if accelerator is not None:
        res["accelerator"] = accelerator
    res.update(extra)
    return {"apiVersion": "worker.gpustack.ai/v1", "kind": "Instance",
            "metadata": {"name": "demo", "namespace": "default", "uid": "u-1"},
            "spec": {"type": type_name, "image": "ubuntu:24.04", "resources": res,
                     "volume": {"ephemeral": {"capacity": "1Gi"}}}}


T4 = "gpustack--nvidia-tesla-t4-linux-amd64"
A10G = "gpustack--nvidia-a10g-linux-amd64"
CPU = "gpustack--generic-linux-amd64"


@pytest.mark.parametrize("type_name, inst, limits, requests", [
    (T4, instance(T4, "8", "32Gi", "15Gi", "1"), ("8", "32Gi", "15Gi"), ("800m", "4Gi", "1920Mi")),
    (A10G, instance(A10G, "1", "12Gi", "15Gi", "1", acceleratorSlicedMemoryPercentage=20, acceleratorSlicedCoresPercentage=100),
     ("1", "12Gi", "15Gi"), ("100m", "1536Mi", "1920Mi")),
    (A10G, instance(A10G, "12", "128Gi", "15Gi", "1"), ("12", "128Gi", "15Gi"), ("1200m", "16Gi", "1920Mi")),
    (T4, instance(T4, "2", "8Gi", "64Gi", "2"), ("2", "8Gi", "64Gi"), ("200m", "1Gi", "8Gi")),
    (CPU, instance(CPU, "4", "8Gi", "15Gi"), ("4", "8Gi", "15Gi"), ("3200m", "1Gi", "1920Mi")),
    (CPU, instance(CPU, "100m", "1Gi", "1Gi"), ("100m", "1Gi", "1Gi"), ("100m", "128Mi", "128Mi")),
    (A10G, instance(A10G, "12", "192Gi", "100Gi", "1"), ("12", "192Gi", "100Gi"), ("1200m", "24Gi", "12800Mi")),
])
def test_request_vectors_of_instances_md_11_4(policy, seed, type_name, inst, limits, requests):
    _, settings, types = seed
    res = container_resources(policy, settings, inst, types[type_name])
    assert (res["limits"]["cpu"], res["limits"]["memory"], res["limits"]["ephemeral-storage"]) == limits
    assert (res["requests"]["cpu"], res["requests"]["memory"], res["requests"]["ephemeral-storage"]) == requests


def test_accelerator_keys_per_shape(policy, seed):
    _, settings, types = seed
    sliced = container_resources(policy, settings, instance(A10G, "1", "12Gi", "15Gi", "1",
                                                            acceleratorSlicedMemoryPercentage=20,
                                                            acceleratorSlicedCoresPercentage=100), types[A10G])
    assert {k: v for k, v in sliced["limits"].items() if k.startswith("nvidia")} == {
        "nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "20",
        "nvidia.com/gpu.sliced.cores-percentage": "100"}
    whole = container_resources(policy, settings, instance(A10G, "12", "128Gi", "15Gi", "1"), types[A10G])
    assert whole["requests"]["nvidia.com/gpu"] == "1" and whole["limits"]["nvidia.com/gpu"] == "1"


def test_pinned_demo_pod_of_seed_step_6(policy, seed):
    snapshot, settings, types = seed
    pinned = seed_object("step6-instance-pinned-demo.yaml")
    pinned["spec"]["resources"].update({"cpu": "8", "ram": "32Gi", "localStorage": "15Gi"})
    pinned["metadata"]["uid"] = "u-2"
    placement_off = type(settings)(values={**settings.values, "instance-persistent-volume-placement": False})
    plan = render_pod(policy, placement_off, snapshot, pinned, types[T4])
    pod = plan.pod
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "node-t4-b"}
    assert "nodeName" not in pod["spec"]
    assert pod["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "gpustack-fnv64-6b371caa2da0b799",
                                         "app.kubernetes.io/part-of": "u-2"}
    assert pod["spec"]["volumes"] == [
        {"name": "workspace", "emptyDir": {"sizeLimit": "1Gi"}},
        {"name": "additional-0", "persistentVolumeClaim": {"claimName": "datasets"}},
        {"name": "additional-1", "configMap": {"name": "model-config"}},
        {"name": "additional-2", "hostPath": {"path": "/var/lib/gpustack-cache", "type": "DirectoryOrCreate"}}]
    [main] = pod["spec"]["containers"]
    assert main["name"] == "main" and main["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert main["volumeMounts"] == [
        {"name": "workspace", "mountPath": "/workspace"},
        {"name": "additional-0", "mountPath": "/mnt/datasets"},
        {"name": "additional-1", "mountPath": "/etc/model/config.json", "readOnly": True, "subPath": "config.json"},
        {"name": "additional-2", "mountPath": "/mnt/host-cache", "readOnly": True}]
    assert pod["spec"]["hostIPC"] is True and pod["spec"]["automountServiceAccountToken"] is False


def test_a_missing_claim_blocks_the_pod_with_the_seed_message(policy, seed):
    snapshot, settings, types = seed
    pinned = seed_object("step6-instance-pinned-demo.yaml")
    plan = render_pod(policy, settings, snapshot, pinned, types[T4])
    assert plan.pod is None
    assert plan.blocked == 'PersistentVolumeClaim "datasets" does not exist in this namespace'


def test_a_bound_local_claim_pins_through_node_affinity(policy, seed):
    snapshot, settings, types = seed
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": "default"},
           "spec": {"volumeName": "pv-1"}, "status": {"phase": "Bound"}}
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-t4-b"]}]}
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-1"},
          "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [term]}}}}
    inst = instance(T4, "8", "32Gi", "15Gi", "1")
    inst["spec"]["volume"] = {"persistent": {"name": "data"}}
    plan = render_pod(policy, settings, Snapshot.from_objects(list(snapshot) + [pvc, pv]), inst, types[T4])
    assert plan.pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [term]}
    assert plan.pod["spec"]["volumes"][0] == {"name": "workspace", "persistentVolumeClaim": {"claimName": "data"}}


def test_an_unbound_immediate_claim_blocks(policy, seed):
    snapshot, settings, types = seed
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": "default"},
           "spec": {}, "status": {"phase": "Pending"}}
    inst = instance(T4, "8", "32Gi", "15Gi", "1")
    inst["spec"]["volume"] = {"persistent": {"name": "data"}}
    plan = render_pod(policy, settings, Snapshot.from_objects(list(snapshot) + [pvc]), inst, types[T4])
    assert plan.blocked.startswith('PersistentVolumeClaim "data" is Pending and nothing binds it')


def test_ssh_sidecar_gets_visibility_only(policy, seed):
    snapshot, settings, types = seed
    inst = instance(T4, "8", "32Gi", "15Gi", "2")
    inst["spec"]["sshPublicKey"] = {"name": "keys"}
    inst["spec"]["ports"] = [{"port": 8080}]
    pod = render_pod(policy, settings, snapshot, inst, types[T4]).pod
    main, sshd = pod["spec"]["containers"]
    assert main["ports"] == [{"name": "tcp-8080", "containerPort": 8080, "protocol": "TCP"}]
    assert sshd["image"] == "gpustack/ssh-server:v1.3.0"
    assert sshd["resources"] == {"limits": {"device.gpustack.ai/nvidia.visibility": "2"},
                                 "requests": {"device.gpustack.ai/nvidia.visibility": "2"}}
    assert pod["spec"]["volumes"][0] == {"name": "sshd-authorized-keys", "secret": {"secretName": "keys", "defaultMode": 384}}


@pytest.mark.parametrize("conditions, expected", [
    ([], {"phase": "Scheduling"}),
    ([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/4 nodes are available"}],
     {"phase": "Pending", "phaseMessage": "0/4 nodes are available"}),
    ([{"type": "PodScheduled", "status": "True"}], {"phase": "Initializing"}),
    ([{"type": "PodScheduled", "status": "True"}, {"type": "Initialized", "status": "False", "reason": "ContainersNotInitialized"}],
     {"phase": "Initializing"}),
    ([{"type": "PodScheduled", "status": "True"}, {"type": "Initialized", "status": "False", "reason": "Crash"}],
     {"phase": "InitializeFailed"}),
    ([{"type": "PodScheduled", "status": "True"}, {"type": "Initialized", "status": "True"},
      {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}], {"phase": "Starting"}),
    ([{"type": "PodScheduled", "status": "True"}, {"type": "Initialized", "status": "True"},
      {"type": "Ready", "status": "False", "reason": "PodFailed"}], {"phase": "NotReady"}),
    ([{"type": "PodScheduled", "status": "True"}, {"type": "Initialized", "status": "True"},
      {"type": "Ready", "status": "True"}], {"phase": "Ready"}),
])
def test_phases_from_pod_conditions(policy, conditions, expected):
    assert phase_from_pod(policy, {"status": {"conditions": copy.deepcopy(conditions)}}) == expected


@pytest.mark.parametrize("value, privileged", [(True, True), ("true", None), ("false", None), (1, None), (False, None)])
def test_only_a_boolean_true_renders_a_privileged_container(policy, seed, value, privileged):
    """docs/concepts/instances.md "Additional volumes and host access": the gate reads ``privileged == true``; the renderer read any truthy value, so the
    string "true" passed the gate and rendered a privileged container. Both now read the boolean only."""
    snapshot, settings, types = seed
    inst = instance(T4, "8", "32Gi", "15Gi", "1")
    inst["spec"]["privileged"] = value
    main = render_pod(policy, settings, snapshot, inst, types[T4]).pod["spec"]["containers"][0]
    assert main["securityContext"].get("privileged") is privileged
