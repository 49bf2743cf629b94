"""The DRA driver stand-in (kind_draplugin, docs/tasks/e2e.md "The offline kind cluster") against a real kubelet, scheduler and
kube-controller-manager, with a DeviceClass made by hand (no accelpolicy installed).

The stand-in runs on the session cluster's first worker and publishes the walkthrough's A10G
(kind_draplugin/nodes/node-a10g-dra.yaml). A DeviceClass with ``extendedResourceName: nvidia.com/gpu``
(Kubernetes 1.37: DRAExtendedResource GA, on by default) selects its ``type == "gpu"`` devices:

1. a Pod asking ``nvidia.com/gpu: 1`` on that node (no device plugin there) gets a ResourceClaim made by
   the scheduler, allocated to the mock device, reserved for the Pod; the kubelet has the stand-in
   prepare it (its record on the node) and starts the Pod;
2. a Pod with a ResourceClaim of the same class stays Pending: the one device is taken;
3. the first Pod deleted: its claim is unprepared and deleted, the second Pod's claim is allocated the
   device and that Pod runs.

``go test`` of the module (parsing the devices file, prepare/unprepare) runs too (no cluster).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from draworker import (A10G_DEVICES, DRIVER, Kube, driver_image, node_slices, prepared_claims, start_driver,
                       stop_driver, wait)
from kindcluster import HERE, sh

pytestmark = pytest.mark.kind

CLASS = "kind-dra-test-gpu"
A10G_UUID = "GPU-5b2f7c1e-8a3d-4e6b-b1f0-2d9c4a7e6f13"   # kind_draplugin/nodes/node-a10g-dra.yaml


def test_go_unit_tests_of_the_stand_in():
    if not shutil.which("go"):
        pytest.skip("go is not on PATH")
    out = subprocess.run(["go", "test", "./..."], cwd=HERE / "kind_draplugin", capture_output=True, text=True,
                         timeout=1500)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def test_print_shows_the_slice_it_would_publish():
    if not shutil.which("go"):
        pytest.skip("go is not on PATH")
    binary = sh("bash", str(HERE / "kind_draplugin" / "build.sh"), "--binary", timeout=1500).stdout.strip()
    spec = json.loads(sh(binary, "--devices", str(A10G_DEVICES), "--node-name", "kind-x", "--print").stdout)
    file_devices = yaml.safe_load(A10G_DEVICES.read_text())["spec"]["devices"]
    assert {k: spec[k] for k in ("driver", "nodeName", "pool")} == \
        {"driver": DRIVER, "nodeName": "kind-x", "pool": {"name": "kind-x", "generation": 0, "resourceSliceCount": 1}}
    assert [d["name"] for d in spec["devices"]] == [d["name"] for d in file_devices] == ["gpu-0"]
    assert spec["devices"][0]["attributes"] == file_devices[0]["attributes"]
    bad = sh(binary, "--devices", str(A10G_DEVICES), "--node-name", "kind-x", "--driver-name", "gpu.amd.com",
             "--print", check=False)
    assert bad.returncode == 1
    assert bad.stderr == f'kind-dra-plugin: {A10G_DEVICES}: no device of driver "gpu.amd.com" (spec.driver of its ResourceSlices)\n'


def _pod(name: str, node: str, image: str, resources: dict | None = None, claim: str | None = None) -> dict:
    container = {"name": "main", "image": image, "imagePullPolicy": "Never", "resources": resources or {}}
    spec = {"nodeSelector": {"kubernetes.io/hostname": node}, "terminationGracePeriodSeconds": 0,
            "containers": [container]}
    if claim:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
        container["resources"] = {"claims": [{"name": "gpu"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def test_claims_allocated_to_the_mock_device_through_a_hand_made_device_class(kind_cluster):
    from stack import containerd_ref, load_images, tools
    node = kind_cluster.nodes[1]            # the first worker (the device-plugin test uses the last)
    kube = Kube(kind_cluster.kubectl_bin, kind_cluster.kubeconfig)
    image = driver_image()
    load_images(tools(), kind_cluster.name, kind_cluster.nodes, [image])
    pause = next(i for i in kind_cluster.node_exec(node, "cat", "/kind/images/list.txt").split() if "/pause:" in i)
    try:
        [slice_] = start_driver(kube, node, image)
        assert slice_["spec"]["pool"]["name"] == node and slice_["spec"]["driver"] == DRIVER
        assert [d["name"] for d in slice_["spec"]["devices"]] == ["gpu-0"]
        assert slice_["spec"]["devices"][0]["attributes"]["uuid"] == {"string": A10G_UUID}
        owner = slice_["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"]) == ("Node", node)

        device_class = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": CLASS},
                        "spec": {"extendedResourceName": "nvidia.com/gpu", "selectors": [{"cel": {"expression":
                                 f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "gpu"'}}]}}
        kube("apply", "-f", "-", input=json.dumps(device_class))

        # 1. the extended resource, served by DRA: the scheduler makes and allocates the claim
        kube("apply", "-f", "-", input=json.dumps(_pod("dra-ext", node, pause, {"limits": {"nvidia.com/gpu": "1"}})))
        pod = wait("Pod dra-ext Running", lambda: (p := kube.json("get", "pod", "dra-ext", "-n", "default"))
                   and p["status"].get("phase") == "Running" and p)
        status = pod["status"]["extendedResourceClaimStatus"]
        assert status["requestMappings"] == [{"containerName": "main", "resourceName": "nvidia.com/gpu",
                                              "requestName": "container-0-request-0"}]
        claim = kube.json("get", "resourceclaim", status["resourceClaimName"], "-n", "default")
        assert claim["status"]["allocation"]["devices"]["results"] == [
            {"request": "container-0-request-0", "driver": DRIVER, "pool": node, "device": "gpu-0"}]
        assert [r["name"] for r in claim["status"]["reservedFor"]] == ["dra-ext"]
        records = prepared_claims(node)
        assert records[claim["metadata"]["uid"]] == {
            "namespace": "default", "name": claim["metadata"]["name"], "uid": claim["metadata"]["uid"],
            "devices": [{"request": "container-0-request-0", "pool": node, "device": "gpu-0", "uuid": A10G_UUID}]}

        # 2. a claim of the same class: the one device is taken, the Pod waits
        kube("apply", "-f", "-", input=json.dumps({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "dra-direct", "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": CLASS}}]}}}))
        kube("apply", "-f", "-", input=json.dumps(_pod("dra-direct", node, pause, claim="dra-direct")))
        cond = wait("Pod dra-direct unschedulable", lambda: next(
            (c for c in (kube.json("get", "pod", "dra-direct", "-n", "default").get("status") or {}).get("conditions") or []
             if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable"), None))
        assert "cannot allocate all claims" in cond["message"], cond

        # 3. the first Pod gone: its claim unprepared and deleted; the device goes to the second
        kube("delete", "pod", "dra-ext", "-n", "default", "--wait=true", "--timeout=120s", timeout=180)
        wait("the extended-resource claim deleted", lambda: not kube.json("get", "resourceclaim",
                                                                          claim["metadata"]["name"], "-n", "default"))
        wait("Pod dra-direct Running", lambda: kube.json("get", "pod", "dra-direct", "-n", "default")
             .get("status", {}).get("phase") == "Running")
        direct = kube.json("get", "resourceclaim", "dra-direct", "-n", "default")
        assert direct["status"]["allocation"]["devices"]["results"] == [
            {"request": "gpu", "driver": DRIVER, "pool": node, "device": "gpu-0"}]
        assert set(prepared_claims(node)) == {direct["metadata"]["uid"]}
        kube("delete", "pod", "dra-direct", "-n", "default", "--wait=true", "--timeout=120s", timeout=180)
        wait("the stand-in to unprepare dra-direct", lambda: prepared_claims(node) == {})
    finally:
        kube("delete", "pod", "dra-ext", "dra-direct", "-n", "default", "--ignore-not-found", "--wait=false", check=False)
        kube("delete", "resourceclaim", "dra-direct", "-n", "default", "--ignore-not-found", check=False)
        kube("delete", "deviceclass", CLASS, "--ignore-not-found", check=False)
        stop_driver(kube, node)
        for n in kind_cluster.nodes:   # the nodes hold the preloaded images only again (test_no_image_was_pulled)
            _remove_image(n, containerd_ref(image))
    assert node_slices(kube, node) == []
    if os.environ.get("ACCELPOLICY_KIND_DRA_KEEP_LOGS"):
        print(kube("-n", "default", "get", "events", check=False).stdout)


# -- the objects draworker.py applies (no cluster) -----------------------------------------------------------
def test_driver_daemonset_runs_on_one_node_with_the_kubelet_plugin_directories_only():
    from draworker import driver_objects
    objects = {o["kind"]: o for o in driver_objects("kind-worker4", "accelpolicy.local/kind-dra-plugin:x", "devices: []")}
    assert sorted(objects) == ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "Namespace", "ServiceAccount"]
    assert objects["ClusterRole"]["rules"] == [
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"],
         "verbs": ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]},
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    pod = objects["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "kind-worker4"}
    assert {v["name"]: v.get("hostPath", {}).get("path") for v in pod["volumes"]} == {
        "registry": "/var/lib/kubelet/plugins_registry", "plugin": "/var/lib/kubelet/plugins/gpu.nvidia.com",
        "devices": None}
    [container] = pod["containers"]
    assert container["imagePullPolicy"] == "Never" and container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert "privileged" not in container["securityContext"]


def test_one_chart_agent_runs_auto_on_every_node_the_dra_worker_with_a_cpu_only_document():
    """The kind stack's agent (e2e/test_kind_dra.py relies on it): the chart's one DaemonSet, ``auto``
    on every node, no node selector; the seed nodes' recorded facts and, for the DRA worker, node-a10g's
    CPU with no accelerator (its A10G comes from the stand-in's slice)."""
    from stack import DRA_HOST, REPO, helm_values, seed_mapping, tools
    helm = tools()["helm"]
    if not Path(helm).exists():
        pytest.skip(f"helm is not built ({helm}; make helm)")
    nodes = ["c-control-plane", "c-worker", "c-worker2", "c-worker3", "c-worker4"]
    from tests.deploy.test_chart import KUBE_VERSION   # the chart requires >= 1.30; helm template says 1.20
    out = sh(helm, "template", "accelpolicy", str(REPO / "deploy" / "chart"), "-n", "gpustack-system",
             "--kube-version", KUBE_VERSION, *helm_values(seed_mapping(nodes), "accelpolicy:0.1.0-abc"), timeout=300).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    [ds] = [d for d in docs if d["kind"] == "DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    assert "nodeSelector" not in spec
    [container] = spec["containers"]
    assert [a for a in container["args"] if a.startswith(("--backend", "--facts", "--cpuinfo"))] == [
        "--backend=auto", "--facts=/etc/accelpolicy/facts/$(NODE_NAME).yaml"]
    [facts] = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-facts")]
    assert sorted(facts["data"]) == [f"{n}.yaml" for n in nodes]
    dra_host = yaml.safe_load(facts["data"]["c-worker4.yaml"])
    seed = yaml.safe_load((REPO / "probes" / "recorded" / f"{DRA_HOST}.yaml").read_text())
    assert dra_host == {"node": "c-worker4", "cpu": seed["cpu"], "accelerators": []}
    assert yaml.safe_load(facts["data"]["c-worker.yaml"])["accelerators"] == seed["accelerators"]


def _remove_image(node: str, ref: str) -> None:
    """Remove ``ref`` from ``node``'s containerd with every other name of the same digest: ``kind load``
    imports with ``ctr images import --digests``, which also names the image ``import-<date>@sha256:...``."""
    rows = [line.split() for line in sh("docker", "exec", node, "ctr", "-n", "k8s.io", "images", "ls").stdout.splitlines()[1:]]
    digests = {row[2] for row in rows if len(row) > 2 and row[0] == ref}
    names = [row[0] for row in rows if len(row) > 2 and row[2] in digests]
    if names:
        sh("docker", "exec", node, "ctr", "-n", "k8s.io", "images", "rm", *names, check=False)

