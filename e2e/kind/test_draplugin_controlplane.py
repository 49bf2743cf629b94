"""The DRA driver stand-in against a real kube-apiserver and kube-scheduler (no kubelet), and accelpolicy's
agent ``--backend dra`` reading what it published (docs/tasks/e2e.md "The offline kind cluster", docs/concepts/dra.md "Accelerators from DRA drivers").

On a local control plane of its own (``make controlplane``'s binaries: API server, scheduler) with one
Node object and no kubelet, the stand-in runs as a host process (its registration and DRA sockets in a
temporary directory: no kubelet connects; the kind test covers that) and publishes the walkthrough's
A10G. A DeviceClass made by hand maps ``nvidia.com/gpu`` to it; a Pod asking ``nvidia.com/gpu: 1`` is
bound by the scheduler with a ResourceClaim allocated to the mock device. One pass of the agent with the
``dra`` backend then writes the node's Devices from the slice and charges its ledger from that claim.
"""
from __future__ import annotations

import json
import subprocess
import time

import pytest

from draworker import A10G_DEVICES, BUILD, DRIVER, cpuinfo_of, wait
from kindcluster import sh
from stack import REPO

pytestmark = pytest.mark.controlplane

NODE = "dra-node"
A10G_UUID = "GPU-5b2f7c1e-8a3d-4e6b-b1f0-2d9c4a7e6f13"   # kind_draplugin/nodes/node-a10g-dra.yaml


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@pytest.fixture(scope="module")
def scheduler_cluster():
    from testing.localcluster import LocalCluster, MissingBinariesError
    from testing.localcluster.testing import with_crds
    try:
        lc, kubectl = with_crds(LocalCluster(scheduler=True, components=()).start())
    except MissingBinariesError as e:
        pytest.fail(str(e), pytrace=False)
    yield lc, kubectl
    lc.stop()


def test_scheduler_allocates_the_published_device_and_the_agent_charges_it(scheduler_cluster, tmp_path):
    lc, kubectl = scheduler_cluster
    binary = sh("bash", str(BUILD), "--binary", timeout=1500).stdout.strip()
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": NODE, "labels": {"kubernetes.io/hostname": NODE, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}}}))
    allocatable = {"cpu": "4", "memory": "16Gi", "pods": "110"}
    kubectl("patch", "node", NODE, "--subresource=status", "--type=merge", "-p", json.dumps({"status": {
        "capacity": allocatable, "allocatable": allocatable, "conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "no kubelet: a Node object only",
             "lastHeartbeatTime": _now(), "lastTransitionTime": _now()}]}}))
    registry, plugin = tmp_path / "registry", tmp_path / "plugin"
    registry.mkdir(), plugin.mkdir()
    log = (tmp_path / "driver.log").open("w")
    driver = subprocess.Popen([binary, "--kubeconfig", str(lc.kubeconfig), "--node-name", NODE, "--devices", str(A10G_DEVICES),
                               "--registrar-dir", str(registry), "--plugin-dir", str(plugin)], stdout=log, stderr=subprocess.STDOUT)
    try:
        [slice_] = wait("the stand-in's ResourceSlice", lambda: json.loads(
            kubectl.stdout("get", "resourceslices", "-o", "json"))["items"])
        assert {k: slice_["spec"][k] for k in ("driver", "nodeName", "pool")} == {
            "driver": DRIVER, "nodeName": NODE, "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1}}
        node_uid = json.loads(kubectl.stdout("get", "node", NODE, "-o", "json"))["metadata"]["uid"]
        assert slice_["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node_uid, "controller": True}]
        assert [d["name"] for d in slice_["spec"]["devices"]] == ["gpu-0"]
        assert sorted(p.name for p in registry.iterdir()) == [f"{DRIVER}-reg.sock"]
        assert sorted(p.name for p in plugin.iterdir()) == ["claims", "dra.sock"]

        kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "by-hand-gpu"},
            "spec": {"extendedResourceName": "nvidia.com/gpu", "selectors": [{"cel": {"expression":
                     f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "gpu"'}}]}}))
        kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p1", "namespace": "default"},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": NODE}, "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "main", "image": "unused", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}))
        pod = wait("Pod p1 bound", lambda: (p := json.loads(kubectl.stdout("get", "pod", "p1", "-o", "json")))
                     ["spec"].get("nodeName") and p)
        assert pod["spec"]["nodeName"] == NODE
        claim = json.loads(kubectl.stdout("get", "resourceclaim", pod["status"]["extendedResourceClaimStatus"]
                                          ["resourceClaimName"], "-o", "json"))
        assert claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "by-hand-gpu"
        assert claim["status"]["allocation"]["devices"]["results"] == [
            {"request": "container-0-request-0", "driver": DRIVER, "pool": NODE, "device": "gpu-0"}]
        assert [(r["resource"], r["name"]) for r in claim["status"]["reservedFor"]] == [("pods", "p1")]

        cpuinfo = tmp_path / "cpuinfo"
        cpuinfo.write_text(cpuinfo_of("node-a10g"))
        kubectl("create", "namespace", "gpustack-system")
        agent = subprocess.run([str(REPO / ".venv/bin/accelpolicy"), "agent", "--node", NODE, "--kubeconfig", str(lc.kubeconfig),
                                "--once", "--backend", "dra", "--cpuinfo", str(cpuinfo)], capture_output=True, text=True,
                               timeout=300, cwd=REPO)
        assert agent.returncode == 0, agent.stderr[-3000:]
        devices = json.loads(kubectl.stdout("get", "devices", NODE, "-o", "json"))
        [group] = devices["spec"]["groups"]
        assert (group["id"], group["name"], group["memory"]) == ("a10g", "NVIDIA A10G", 24563)
        assert [(a["id"], a["dra"]) for a in group["accelerators"]] == [
            (A10G_UUID, {"driver": DRIVER, "pool": NODE, "device": "gpu-0"})]
        assert devices["status"]["groups"][0]["accelerators"] == [
            {"id": A10G_UUID, "index": 0, "mode": 1, "allocated": 1600000}]
    finally:
        driver.terminate()
        driver.wait(timeout=30)
        log.close()
