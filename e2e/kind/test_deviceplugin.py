"""The device-plugin stand-in against a real kubelet (docs/tasks/e2e.md "The offline kind cluster").

The stand-in registers the recorded devices of seed node node-t4-a (probes/recorded/node-t4-a.yaml, one
Tesla T4) with a kind worker's kubelet; a Pod asking for ``nvidia.com/gpu`` and ``nvidia.com/gpu.shared``
is admitted and started by that kubelet, which calls ``Allocate``; the allocation is then read back
through the kubelet's PodResources socket with the agent's own client (runtime.kube.podresources).
"""
from __future__ import annotations

import json
import time

import pytest

from kind_deviceplugin.kindnode import node_kubelet_dir, short_link
from kind_deviceplugin.plugin import DevicePluginStandIn, advertised_devices, env_name
from kindcluster import sh
from probes.fake import load_document, recorded
from runtime.engine.policy import Policy
from runtime.kube.podresources import list_pod_resources
from runtime.rules.loader import load_rules

pytestmark = pytest.mark.kind

T4_UUID = "GPU-7d1c4a3e-2b8f-4c61-9a0e-5f3b2c1d0a01"   # probes/recorded/node-t4-a.yaml
POD = "standin-gpu"


@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy(load_rules())


def test_advertised_devices_of_the_recorded_t4_node(policy):
    devices = advertised_devices(policy, load_document(recorded("node-t4-a")), "probes/recorded/node-t4-a.yaml")
    assert devices == {"nvidia.com/gpu": [T4_UUID],
                       "nvidia.com/gpu.shared": [f"{T4_UUID}::{n}" for n in range(10)],
                       "nvidia.com/gpu.sliced": [f"{T4_UUID}::slice-{n}" for n in range(128)]}   # logicalSlices: 128


def test_advertised_devices_name_an_unknown_manufacturer(policy):
    doc = load_document(recorded("node-t4-a"))
    doc["accelerators"][0]["manufacturer"] = "acme"
    with pytest.raises(ValueError, match=r"node-t4-a.yaml: accelerators\[0\].manufacturer: 'acme' is not in "
                                         r"rules/manufacturers.yaml"):
        advertised_devices(policy, doc, "node-t4-a.yaml")


def wait_for(what: str, check, timeout: float = 90.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(1)


def test_kubelet_allocates_stand_in_devices_and_podresources_reports_them(kind_cluster, policy):
    node = kind_cluster.nodes[-1]
    devices = advertised_devices(policy, load_document(recorded("node-t4-a")), "node-t4-a")
    kubelet_dir = node_kubelet_dir(node)
    standin = DevicePluginStandIn(short_link(kubelet_dir / "device-plugins"), devices)
    standin.start()
    pause = next(i for i in kind_cluster.node_exec(node, "cat", "/kind/images/list.txt").split() if "/pause:" in i)
    try:
        def allocatable():
            alloc = kind_cluster.kubectl_json("get", "node", node)["status"].get("allocatable", {})
            return alloc.get("nvidia.com/gpu") == "1" and alloc.get("nvidia.com/gpu.shared") == "10"
        wait_for(f"{node} to advertise nvidia.com/gpu=1 and nvidia.com/gpu.shared=10", allocatable)

        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": POD, "namespace": "default"},
               "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "terminationGracePeriodSeconds": 0,
                        "containers": [
                            {"name": "main", "image": pause, "imagePullPolicy": "Never",
                             "resources": {"limits": {"nvidia.com/gpu": "1"}}},
                            {"name": "side", "image": pause, "imagePullPolicy": "Never",
                             "resources": {"limits": {"nvidia.com/gpu.shared": "2"}}}]}}
        sh(kind_cluster.kubectl_bin, "--kubeconfig", str(kind_cluster.kubeconfig), "apply", "-f", "-",
           input=json.dumps(pod))
        wait_for(f"Pod {POD} Running", lambda: kind_cluster.kubectl_json("get", "pod", POD, "-n", "default")
                 ["status"].get("phase") == "Running")

        allocations = standin.allocations
        assert allocations["nvidia.com/gpu"] == [[T4_UUID]]
        [shared] = allocations["nvidia.com/gpu.shared"]
        assert len(shared) == 2 and set(shared) <= set(devices["nvidia.com/gpu.shared"])

        answer = list_pod_resources(str(short_link(kubelet_dir / "pod-resources") / "kubelet.sock"))
        [entry] = [p for p in answer if p.get("name") == POD and p.get("namespace") == "default"]
        by_container = {c["name"]: c.get("devices", []) for c in entry["containers"]}
        assert by_container["main"] == [{"resourceName": "nvidia.com/gpu", "deviceIds": [T4_UUID]}]
        # the kubelet may report one entry per device (per NUMA grouping): compare the union
        assert {d["resourceName"] for d in by_container["side"]} == {"nvidia.com/gpu.shared"}
        assert sorted(i for d in by_container["side"] for i in d["deviceIds"]) == sorted(shared)

        # the kubelet put the plugin's Allocate answer into the container's environment
        cid = kind_cluster.kubectl_json("get", "pod", POD, "-n", "default")["status"]["containerStatuses"]
        main_id = next(c["containerID"] for c in cid if c["name"] == "main").split("://", 1)[1]
        spec = json.loads(kind_cluster.node_exec(node, "ctr", "-n", "k8s.io", "containers", "info", main_id))
        assert f"{env_name('nvidia.com/gpu')}={T4_UUID}" in spec["Spec"]["process"]["env"]

        # a restarted kubelet forgets its plugins; the stand-in notices and registers again
        kind_cluster.node_exec(node, "systemctl", "restart", "kubelet")
        wait_for("the stand-in to register again after the kubelet restart", lambda: standin.reregistrations >= 1)
        wait_for(f"{node} to advertise the devices again", allocatable)

        def restarted_entries():
            answer = list_pod_resources(str(short_link(kubelet_dir / "pod-resources") / "kubelet.sock"))
            return [p for p in answer if p.get("name") == POD and p.get("namespace") == "default"]
        # the restarted kubelet lists the Pod again once it has re-synced it
        [entry] = wait_for(f"PodResources to list {POD} again after the kubelet restart", restarted_entries)
        assert {c["name"]: c.get("devices", []) for c in entry["containers"]}["main"] == [
            {"resourceName": "nvidia.com/gpu", "deviceIds": [T4_UUID]}]
    finally:
        sh(kind_cluster.kubectl_bin, "--kubeconfig", str(kind_cluster.kubeconfig), "delete", "pod", POD,
           "-n", "default", "--ignore-not-found", "--wait=false", check=False)
        standin.stop()
