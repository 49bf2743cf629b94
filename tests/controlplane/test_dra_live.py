"""DRA on a real kube-apiserver v1.37 (docs/concepts/dra.md "Accelerators from DRA drivers"): the controller's DeviceClasses (derived, owned,
reconciled, the feature check's dry-run create), and the agent's `dra` backend reading a ResourceSlice
and charging the ledger from a ResourceClaim allocated to a Pod of its node.

No scheduler or kubelet runs: the test writes the claim's allocation and reservation itself, as the
scheduler would, and moves the Pod's phase, as kubelet would.
"""
from __future__ import annotations

import json

import pytest
import yaml

from runtime.agent.dra import AutoBackend, DraBackend, auto_fallback, cluster_publishes_for
from runtime.agent.runner import NodeAgent
from runtime.engine.policy import Policy
from runtime.kube.session import connect
from runtime.rules.loader import load_rules
from testing.hooks import ObservedController as Controller
from testing.localcluster.testing import get_json, parse_table, wait_for
from tests.controlplane.agentlive import NS, PODS_NS, clean_node, create_node, create_pods, device_manager, devices
from tests.controlplane.agentlive import live  # noqa: F401  (fixture)
from tests.seedfiles import FIXTURES

CLASS = "gpustack-nvidia-gpu.nvidia.com"
A10G = "GPU-e0587d2e-127c-4fb8-e2c1-6e517529f575"
SLICE = FIXTURES / "dra" / "node-a10g-resourceslice.yaml"
SLICE_NAME = "node-a10g-gpu.nvidia.com-lk9xq"
ALLOCATED = "device.gpustack.ai/accelerator.allocated"


def _classes(kubectl) -> dict[str, dict]:
    return {c["metadata"]["name"]: c for c in get_json(kubectl, "deviceclasses").get("items", [])}


@pytest.fixture
def controller(control_plane):
    cluster, kubectl = control_plane
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "Namespace",
                                                   "metadata": {"name": "gpustack-system"}}))
    kubectl("delete", "deviceclasses", "--all", "--wait=true")
    made = []

    def make(policy: Policy) -> Controller:
        ctl = Controller(connect(cluster.kubeconfig), policy, coalesce_seconds=0.1, env={}, fit_coalesce_seconds=0)
        ctl.start()
        made.append(ctl)
        return ctl

    yield make
    for ctl in made:
        ctl.stop()
    kubectl("delete", "deviceclasses", "--all", "--wait=true")


def _nvidia_row_alone(tmp_path) -> Policy:
    """The shipped rules with NVIDIA's driver row alone (AMD's and Intel's rows derive classes of their
    own: tests/cli/test_vendors.py)."""
    import shutil
    from runtime.rules.loader import DEFAULT_RULES_DIR
    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules)
    for other in ("dra-amd.yaml", "dra-intel.yaml"):
        (rules / other).unlink()
    return Policy(load_rules(rules))


def test_the_controller_derives_owns_and_reconciles_the_deviceclass(control_plane, controller, tmp_path):
    _, kubectl = control_plane
    ctl = controller(_nvidia_row_alone(tmp_path))
    assert (ctl.device_classes.served, ctl.device_classes.available) == (True, True)   # 1.37 keeps the field
    assert not _classes(kubectl)   # the feature check's create was a dry run
    ctl.reconcile()
    dc = _classes(kubectl)[CLASS]
    assert dc["metadata"]["labels"] == {"resource.gpustack.ai/type": "deviceclasses"}
    assert dc["spec"] == {"extendedResourceName": "nvidia.com/gpu", "selectors": [{"cel": {
        "expression": 'device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "gpu"'}}]}
    table = parse_table(kubectl.stdout("get", "deviceclasses"))
    assert table[0][:2] == ["NAME", "AGE"] and [r["NAME"] for r in table[1]] == [CLASS]

    kubectl("patch", "deviceclass", CLASS, "--type=merge", "-p", '{"spec":{"extendedResourceName":"example.com/gpu"}}')
    theirs = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"},
              "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]}}
    stale = {**theirs, "metadata": {"name": "gpustack-old", "labels": {"resource.gpustack.ai/type": "deviceclasses"}}}
    kubectl("apply", "-f", "-", input=yaml.safe_dump_all([theirs, stale]))
    wait_for(lambda: ctl.cache.get("DeviceClass", "gpustack-old"), bool, what="the stale class cached")
    ctl.reconcile()
    classes = _classes(kubectl)
    assert sorted(classes) == ["gpu.nvidia.com", CLASS]          # ours put back, the stale one deleted
    assert classes[CLASS]["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    assert classes["gpu.nvidia.com"]["spec"] == theirs["spec"]    # not ours: left alone


def test_rules_without_the_driver_row_delete_the_class(control_plane, controller, tmp_path):
    _, kubectl = control_plane
    ctl = controller(Policy(load_rules()))
    ctl.reconcile()
    assert CLASS in _classes(kubectl)
    import shutil
    from runtime.rules.loader import DEFAULT_RULES_DIR
    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules)
    text = (rules / "dra.yaml").read_text()
    (rules / "dra.yaml").write_text(text[:text.index("# NVIDIA's driver")])
    ctl.policy = Policy(load_rules(rules))
    wait_for(lambda: ctl.cache.get("DeviceClass", CLASS), bool, what="the class cached")
    ctl.reconcile()
    assert CLASS not in _classes(kubectl)


@pytest.fixture
def dra_node(live, policy, monkeypatch):  # noqa: F811
    """node-a10g created fresh with its gpu.nvidia.com ResourceSlice; yields (kubectl, agent)."""
    kubectl, session = live
    monkeypatch.setenv("KUBERNETES_POD_NAMESPACE", NS)
    clean_node(kubectl, "node-a10g")
    kubectl("delete", "resourceclaims", "--all", "-n", PODS_NS, "--wait=true")
    kubectl("delete", "resourceslices", "--all", "--wait=true")
    create_node(kubectl, "node-a10g")
    kubectl("apply", "-f", str(SLICE))
    backend = DraBackend(policy, "node-a10g", lambda: [], "the cluster's ResourceSlices")
    agent = NodeAgent(policy, backend, "node-a10g", session=session, cpuinfo=str(FIXTURES / "dra" / "node-a10g-cpuinfo.txt"),
                      allocation_source="annotation")
    yield kubectl, agent
    agent.close()
    kubectl("delete", "resourceclaims", "--all", "-n", PODS_NS, "--wait=true")
    kubectl("delete", "resourceslices", "--all", "--wait=true")
    clean_node(kubectl, "node-a10g")


def test_auto_picks_dra_where_a_configured_driver_publishes_for_the_node(dra_node, policy, live):  # noqa: F811
    _, session = live
    assert cluster_publishes_for(session, policy, "node-a10g") == ["gpu.nvidia.com"]
    assert cluster_publishes_for(session, policy, "node-t4-a") == []


def test_auto_started_before_the_driver_reads_the_slice_once_it_is_published(live, policy, tmp_path, monkeypatch):  # noqa: F811
    """A DRA node joining a mixed cluster: the chart's ``auto`` agent and the driver start together, the
    agent first. Until the slice exists it publishes the node's recorded CPU and no accelerator; the
    next pass reads the A10G from the slice in its watch cache (no restart)."""
    kubectl, session = live
    monkeypatch.setenv("KUBERNETES_POD_NAMESPACE", NS)
    clean_node(kubectl, "node-a10g")
    kubectl("delete", "resourceslices", "--all", "--wait=true")
    create_node(kubectl, "node-a10g")
    host = tmp_path / "node-a10g.yaml"   # what the chart mounts for a DRA node: its CPU, no NVML accelerator
    from probes.fake import recorded
    host.write_text(yaml.safe_dump({**yaml.safe_load(recorded("node-a10g").read_text()), "accelerators": []}))
    assert cluster_publishes_for(session, policy, "node-a10g") == []
    agent = NodeAgent(policy, AutoBackend(policy, "node-a10g", auto_fallback(str(host), "node-a10g")), "node-a10g",
                      session=session, allocation_source="annotation")
    try:
        assert agent.reconcile() is not None and not agent.dra
        assert device_manager(kubectl, "node-a10g") == {} and devices(kubectl, "node-a10g") == {}
        annotations = get_json(kubectl, "node", "node-a10g")["metadata"]["annotations"]
        assert annotations["feature.gpustack.ai/cpu-name"] == "AMD EPYC 7R32"
        kubectl("apply", "-f", str(SLICE))
        wait_for(agent.cluster.resource_slices, bool, what="the slice cached")
        assert agent.reconcile() is not None and agent.dra
        (acc,) = devices(kubectl, "node-a10g")["spec"]["groups"][0]["accelerators"]
        assert acc["id"] == A10G and acc["dra"] == {"driver": "gpu.nvidia.com", "pool": "node-a10g", "device": "gpu-0"}
        labels = device_manager(kubectl, "node-a10g")["spec"]["labels"]
        assert labels["acceleratable.feature.gpustack.ai/nvidia-a10g.memory"] == "24Gi"
    finally:
        agent.close()
        kubectl("delete", "resourceslices", "--all", "--wait=true")
        clean_node(kubectl, "node-a10g")


def test_the_agent_reads_its_slice_and_charges_the_claim_of_its_pod(dra_node):
    kubectl, agent = dra_node
    assert agent.reconcile() is not None
    labels = device_manager(kubectl, "node-a10g")["spec"]["labels"]
    assert labels["acceleratable.feature.gpustack.ai/nvidia-a10g.memory"] == "24Gi"
    assert "acceleratable.feature.gpustack.ai/nvidia-a10g.cores" not in labels
    dev = devices(kubectl, "node-a10g")
    (acc,) = dev["spec"]["groups"][0]["accelerators"]
    assert acc["id"] == A10G and acc["dra"] == {"driver": "gpu.nvidia.com", "pool": "node-a10g", "device": "gpu-0"}
    assert dev["status"]["groups"][0]["accelerators"] == [{"id": A10G, "index": 0, "mode": 0, "remaining": 1600000}]
    assert set(get_json(kubectl, "node", "node-a10g")["status"]["capacity"]) == {"cpu"}   # no sliced/partitioned keys

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "demo"},
           "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "demo-gpu"}],
                    "containers": [{"name": "main", "resources": {"claims": [{"name": "gpu"}]}}]}}
    create_pods(kubectl, "node-a10g", [pod])
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "demo-gpu", "namespace": PODS_NS},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                 "deviceClassName": CLASS, "allocationMode": "ExactCount", "count": 1}}]}}}
    kubectl("apply", "-f", "-", input=json.dumps(claim))
    uid = get_json(kubectl, "pod", "demo", "-n", PODS_NS)["metadata"]["uid"]
    kubectl("patch", "resourceclaim", "demo-gpu", "-n", PODS_NS, "--subresource=status", "--type=merge", "-p", json.dumps(
        {"status": {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "node-a10g", "device": "gpu-0"}]}},
            "reservedFor": [{"resource": "pods", "name": "demo", "uid": uid}]}}))
    wait_for(lambda: [c for c in agent.cluster.resource_claims() if (c.get("status") or {}).get("reservedFor")],
             bool, what="the reserved claim cached")
    wait_for(agent.cluster.pods, lambda pods: len(pods) == 1, what="the Pod cached")
    assert agent.reconcile() is not None
    annotation = json.loads(get_json(kubectl, "pod", "demo", "-n", PODS_NS)["metadata"]["annotations"][ALLOCATED])
    assert annotation == {"main": [{"id": "a10g", "manufacturer": "nvidia", "accelerators": [
        {"id": A10G, "index": 0, "mode": 1, "allocated": 1600000}]}]}
    assert devices(kubectl, "node-a10g")["status"]["groups"][0]["accelerators"] == [
        {"id": A10G, "index": 0, "mode": 1, "allocated": 1600000}]

    kubectl("patch", "pod", "demo", "-n", PODS_NS, "--subresource=status", "--type=merge",
            "-p", '{"status":{"phase":"Succeeded"}}')
    wait_for(agent.cluster.pods, lambda pods: pods and pods[0]["status"].get("phase") == "Succeeded",
             what="the finished Pod cached")
    assert agent.reconcile() is not None
    assert devices(kubectl, "node-a10g")["status"]["groups"][0]["accelerators"] == [
        {"id": A10G, "index": 0, "mode": 0, "remaining": 1600000}]


def test_a_tainted_device_turns_unhealthy_and_keeps_the_labels(dra_node):
    kubectl, agent = dra_node
    assert agent.reconcile() is not None
    kubectl("patch", "resourceslice", SLICE_NAME, "--type=json", "-p", json.dumps(
        [{"op": "add", "path": "/spec/devices/0/taints", "value": [{"key": "gpu.nvidia.com/xid", "value": "79",
                                                                      "effect": "NoExecute"}]}]))
    wait_for(lambda: agent.cluster.resource_slices(), lambda s: s and s[0]["spec"]["devices"][0].get("taints"),
             what="the tainted slice cached")
    assert agent.reconcile() is not None
    (acc,) = devices(kubectl, "node-a10g")["spec"]["groups"][0]["accelerators"]
    assert acc["status"]["unhealthy"] is True
    # the driver's XID taint is a health fact (rules/dra.yaml healthTaints) judged by rules/health.yaml
    assert (acc["status"]["health"]["fact"], acc["status"]["health"]["rule"]) == ("xid 79", "fatal-xid")
    # the labels stay: .count counts the accelerators installed (decision 26)
    assert device_manager(kubectl, "node-a10g")["spec"]["labels"][
        "acceleratable.feature.gpustack.ai/nvidia-a10g.count"] == "1"


# --- what the chart's RBAC lets each component do with DRA objects, and what it refuses --------------
from tests.controlplane.test_chart_live import ACCELPOLICY, NS as SYSTEM_NS, _refusals, _sa_kubeconfig  # noqa: E402
from tests.controlplane.test_chart_live import chart_rbac  # noqa: E402,F401  (fixture)


def test_the_agent_reads_slices_and_claims_with_the_charts_rbac_and_may_not_write_them(chart_rbac, tmp_path):  # noqa: F811
    import subprocess
    cluster, kubectl = chart_rbac
    kubectl("apply", "-f", str(SLICE))
    try:
        config = _sa_kubeconfig(cluster, kubectl, "gpustack-device-manager", tmp_path / "agent.kubeconfig")
        result = subprocess.run([str(ACCELPOLICY), "agent", "--kubeconfig", str(config), "--once", "--node", "node-a10g",
                                 "--backend", "auto", "--cpuinfo", str(FIXTURES / "dra" / "node-a10g-cpuinfo.txt"),
                                 "--allocation-source", "annotation"], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        assert _refusals(result.stdout + result.stderr) == []
        assert "backend auto: gpu.nvidia.com publish(es) slices for node node-a10g: reading them (backend dra)" \
            in result.stderr
        labels = get_json(kubectl, "nodefeatures.nfd.k8s-sigs.io", "node-a10g-gpustack-device-manager",
                          "-n", SYSTEM_NS)["spec"]["labels"]
        assert "acceleratable.feature.gpustack.ai/nvidia-a10g.cores" not in labels   # replaced from the slice
        agent = f"system:serviceaccount:{SYSTEM_NS}:gpustack-device-manager"
        controller = f"system:serviceaccount:{SYSTEM_NS}:gpustack-controller"
        for who, verb, resource, want in (
                (agent, "list", "resourceslices.resource.k8s.io", "yes"),
                (agent, "watch", "resourceclaims.resource.k8s.io", "yes"),
                (agent, "create", "resourceslices.resource.k8s.io", "no"),
                (agent, "patch", "resourceclaims.resource.k8s.io", "no"),
                (agent, "update", "resourceclaims.resource.k8s.io/status", "no"),
                (agent, "create", "deviceclasses.resource.k8s.io", "no"),
                (controller, "create", "deviceclasses.resource.k8s.io", "yes"),
                (controller, "list", "resourceslices.resource.k8s.io", "no"),
                (controller, "patch", "resourceclaims.resource.k8s.io", "no")):
            got = kubectl.stdout("auth", "can-i", verb, resource, "--as", who, "-A", check=False).strip()
            assert got == want, (who, verb, resource, got)
    finally:
        kubectl("delete", "resourceslices", "--all", "--wait=true")
