"""The Instance reconciler and the Setting view on a real kube-apiserver + etcd (docs/development/testing.md "Test layers").

The seed cluster is applied as in test_controller.py and the controller loop runs in this process.
Instances are applied as the defaulting webhook would have left them (``spec.resources`` with cpu,
ram and localStorage filled in, docs/concepts/instances.md "Defaulting"): no webhook runs here.

What the local cluster does not do: there is no kubelet, no kube-scheduler (the session cluster
runs without it) and no Kueue controller or webhook. So Pods are never gated, admitted, bound or
started; they stay Pending without conditions, which the phase table of docs/concepts/instances.md "Life cycle" reads as
``Scheduling`` (PodScheduled Unknown). Deleting an unbound Pod is immediate (no kubelet grace), so a
stop finishes at once. The tests assert those phases, and a phase after a condition is written into
a Pod's status by hand, as the scheduler would.
"""
from __future__ import annotations

import base64
import copy
import json
import time

import pytest
import yaml

from testing.hooks import ObservedController as Controller
from runtime.engine.policy import Policy
from runtime.kube.session import connect
from runtime.rules.loader import load_rules
from testing.localcluster.testing import get_json, set_setting, wait_for
from tests.controlplane.test_controller import _apply_seed_cluster, _clean, loop_running
from tests.engine.test_node_pin import PINNED_AFFINITY
from tests.seedfiles import seed_object

POLICY = Policy(load_rules())
A10G_ENTRANCE = "gpustack-fnv64-c4680bb149644f1c"   # status.entrance of gpustack--nvidia-a10g-linux-amd64
NS = "default"
SYSTEM = "gpustack-system"
FINALIZER = POLICY.key("instanceFinalizer")
ALLOCATION = POLICY.key("allocation")
FIGURES: dict[str, list[float]] = {}


def _get(kubectl, *args) -> dict:
    return get_json(kubectl, *args)


def _wait(fetch, predicate, timeout=20.0, what="condition"):
    return wait_for(fetch, predicate, timeout, what)


def _instance(kubectl, name):
    return _get(kubectl, "instance", name, "-n", NS)


def _pod(kubectl, name):
    return _get(kubectl, "pod", name, "-n", NS)


def _setting(kubectl, name):
    return _get(kubectl, "setting", name, "-n", SYSTEM)


def _secret_values(kubectl) -> dict[str, str]:
    data = _get(kubectl, "secret", "-n", SYSTEM, POLICY.settings.secretName).get("data") or {}
    return {k: base64.b64decode(v).decode() for k, v in data.items()}


def _with_resources(doc: dict, cpu: str, ram: str, local_storage: str) -> dict:
    """The seed Instance as the defaulting webhook leaves it (docs/concepts/instances.md "Defaulting")."""
    doc = copy.deepcopy(doc)
    doc["spec"]["resources"].update({"cpu": cpu, "ram": ram, "localStorage": local_storage})
    return doc


def _apply(kubectl, doc: dict) -> None:
    kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))


def _clean_instances(kubectl) -> None:
    for name in kubectl.stdout("get", "instances", "-n", NS, "-o", "name").split():
        kubectl("patch", name, "-n", NS, "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
    kubectl("delete", "instances", "--all", "-n", NS, "--wait=true")
    kubectl("delete", "pods", "--all", "-n", NS, "--wait=true")
    kubectl("delete", "settings", "--all", "-n", SYSTEM, "--wait=true")
    kubectl("delete", "instancetypes", "a10g-12c128g", "--ignore-not-found", "--wait=true")


@pytest.fixture(scope="module")
def live(control_plane):
    """The seed cluster, one reconcile done, then the controller loop running."""
    cluster, kubectl = control_plane
    _clean(kubectl)
    _clean_instances(kubectl)
    _apply_seed_cluster(kubectl)
    controller = Controller(connect(cluster.kubeconfig), POLICY, coalesce_seconds=0.1, env={},
                            fit_coalesce_seconds=0)
    controller.start()
    assert controller.reconcile().errors == []
    with loop_running(controller):
        yield controller
    controller.stop()
    _clean_instances(kubectl)
    _clean(kubectl)
    for key, values in FIGURES.items():
        print(f"\n[instances figure] {key}: {', '.join(f'{v:.3f}' for v in values)}")


def test_sliced_demo_gets_its_pod(live, kubectl):
    doc = _with_resources(seed_object("step3-instance-sliced-demo.yaml"), "1", "12Gi", "15Gi")
    t0 = time.monotonic()
    _apply(kubectl, doc)
    _, pod = _wait(lambda: _pod(kubectl, "sliced-demo"), bool, what="Pod sliced-demo")
    FIGURES.setdefault("kubectl apply Instance -> Pod exists, seconds", []).append(time.monotonic() - t0)
    inst = _instance(kubectl, "sliced-demo")
    uid = inst["metadata"]["uid"]
    assert pod["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": A10G_ENTRANCE, "app.kubernetes.io/part-of": uid}
    assert pod["metadata"]["ownerReferences"] == [{"apiVersion": "worker.gpustack.ai/v1", "kind": "Instance",
                                                   "name": "sliced-demo", "uid": uid, "controller": True,
                                                   "blockOwnerDeletion": True}]
    assert "nodeName" not in pod["spec"] and "nodeSelector" not in pod["spec"]
    assert [c["name"] for c in pod["spec"]["containers"]] == ["main"]
    main = pod["spec"]["containers"][0]
    assert main["resources"] == {   # overcommit on (the default): docs/concepts/instances.md "The Instance's Pod" request vectors
        "limits": {"cpu": "1", "memory": "12Gi", "ephemeral-storage": "15Gi", "nvidia.com/gpu.sliced": "1",
                   "nvidia.com/gpu.sliced.memory-percentage": "20", "nvidia.com/gpu.sliced.cores-percentage": "100"},
        "requests": {"cpu": "100m", "memory": "1536Mi", "ephemeral-storage": "1920Mi", "nvidia.com/gpu.sliced": "1",
                     "nvidia.com/gpu.sliced.memory-percentage": "20",
                     "nvidia.com/gpu.sliced.cores-percentage": "100"}}
    assert pod["spec"]["volumes"] == [{"name": "workspace", "emptyDir": {"sizeLimit": "1Gi"}}]
    assert pod["spec"]["hostIPC"] is True and pod["spec"]["automountServiceAccountToken"] is False
    # no scheduler/kubelet: the Pod has no conditions, PodScheduled reads Unknown -> Scheduling (docs/concepts/instances.md "Life cycle")
    _, inst = _wait(lambda: _instance(kubectl, "sliced-demo"),
                    lambda i: (i.get("status") or {}).get("phase") == "Scheduling", what="phase Scheduling")
    assert inst["status"] == {"phase": "Scheduling"}
    assert inst["metadata"]["finalizers"] == [FINALIZER]
    assert live.wait_idle(10)


def test_pod_conditions_and_allocation_show_in_the_instance(live, kubectl):
    # what the scheduler would write when it cannot place the Pod
    kubectl("patch", "pod", "sliced-demo", "-n", NS, "--subresource=status", "--type=merge", "-p", json.dumps(
        {"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                    "message": "0/4 nodes are available"}]}}))
    _, inst = _wait(lambda: _instance(kubectl, "sliced-demo"),
                    lambda i: (i.get("status") or {}).get("phase") == "Pending", what="phase Pending")
    assert inst["status"] == {"phase": "Pending", "phaseMessage": "0/4 nodes are available"}
    groups = [{"id": "a10g", "manufacturer": "nvidia", "accelerators": [
        {"id": "GPU-e0587d2e-127c-4fb8-e2c1-6e517529f575", "index": 0, "mode": 3, "allocated": 320000}]}]
    sidecar = [{"id": "a10g", "manufacturer": "nvidia", "accelerators": [
        {"id": "GPU-e0587d2e-127c-4fb8-e2c1-6e517529f575", "index": 0, "mode": 3, "allocated": 1}]}]
    kubectl("annotate", "pod", "sliced-demo", "-n", NS,
            f"{ALLOCATION}={json.dumps({'main': groups, 'sshd': sidecar})}")
    _, inst = _wait(lambda: _instance(kubectl, "sliced-demo"),
                    lambda i: (i.get("status") or {}).get("allocations"), what="status.allocations")
    # both containers' groups merged into one group per (id, manufacturer)
    assert inst["status"]["allocations"] == [{"id": "a10g", "manufacturer": "nvidia",
                                              "accelerators": groups[0]["accelerators"] + sidecar[0]["accelerators"]}]
    assert inst["status"]["phase"] == "Pending"
    assert live.wait_idle(10)


def test_pinned_demo_waits_for_its_claim_then_pins_by_node_selector(live, kubectl):
    doc = _with_resources(seed_object("step6-instance-pinned-demo.yaml"), "8", "32Gi", "15Gi")
    _apply(kubectl, doc)
    _, inst = _wait(lambda: _instance(kubectl, "pinned-demo"),
                    lambda i: (i.get("status") or {}).get("phase") == "Starting", what="phase Starting")
    assert inst["status"] == {"phase": "Starting",
                              "phaseMessage": 'PersistentVolumeClaim "datasets" does not exist in this namespace'}
    assert live.wait_idle(10)
    assert _pod(kubectl, "pinned-demo") == {}
    # the escape: placement off (through the Setting view) -> the Pod uses the claim name only
    kubectl("-n", SYSTEM, "patch", "setting", "instance-persistent-volume-placement", "--type", "merge",
            "-p", '{"spec":{"value":"false"}}')
    _, pod = _wait(lambda: _pod(kubectl, "pinned-demo"), bool, what="Pod pinned-demo")
    node = _get(kubectl, "node", "node-t4-b")
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "node-t4-b"
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "node-t4-b"}
    assert "nodeName" not in pod["spec"]
    # the pin picks its flavor: node-t4-b's values of the T4 pool flavors' label keys (docs/concepts/instances.md)
    assert pod["spec"]["affinity"] == PINNED_AFFINITY
    assert pod["spec"]["volumes"] == [
        {"name": "workspace", "emptyDir": {"sizeLimit": "1Gi"}},
        {"name": "additional-0", "persistentVolumeClaim": {"claimName": "datasets"}},
        {"name": "additional-1", "configMap": {"name": "model-config", "defaultMode": 420}},
        {"name": "additional-2", "hostPath": {"path": "/var/lib/gpustack-cache", "type": "DirectoryOrCreate"}}]
    assert [c["name"] for c in pod["spec"]["containers"]] == ["main"]
    main = pod["spec"]["containers"][0]
    assert main["volumeMounts"] == [
        {"name": "workspace", "mountPath": "/workspace"},
        {"name": "additional-0", "mountPath": "/mnt/datasets"},
        {"name": "additional-1", "mountPath": "/etc/model/config.json", "subPath": "config.json", "readOnly": True},
        {"name": "additional-2", "mountPath": "/mnt/host-cache", "readOnly": True}]
    assert main["resources"]["limits"] == {"cpu": "8", "memory": "32Gi", "ephemeral-storage": "15Gi",
                                           "nvidia.com/gpu": "1"}
    assert main["resources"]["requests"] == {"cpu": "800m", "memory": "4Gi", "ephemeral-storage": "1920Mi",
                                             "nvidia.com/gpu": "1"}
    _, inst = _wait(lambda: _instance(kubectl, "pinned-demo"),
                    lambda i: (i.get("status") or {}).get("phase") == "Scheduling", what="phase Scheduling")
    assert inst["status"] == {"phase": "Scheduling"}
    assert live.wait_idle(10)


def test_deleting_the_type_drains_its_instance(live, kubectl):
    kubectl("apply", "-f", "-", input=yaml.safe_dump(seed_object("step4-instancetype-a10g-12c128g.yaml")))
    _wait(lambda: _get(kubectl, "instancetype", "a10g-12c128g"),
          lambda t: (t.get("status") or {}).get("entrance"), what="a10g-12c128g entrance")
    _apply(kubectl, _with_resources(seed_object("step4-instance-custom-demo.yaml"), "12", "128Gi", "15Gi"))
    _, pod = _wait(lambda: _pod(kubectl, "custom-demo"), bool, what="Pod custom-demo")
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpustack-fnv64-d4c0e6cd72686015"
    kubectl("delete", "instancetypes", "a10g-12c128g", "--wait=true")
    _, inst = _wait(lambda: _instance(kubectl, "custom-demo"),
                    lambda i: (i.get("status") or {}).get("phase") == "Stopped", what="phase Stopped")
    assert inst["spec"]["stop"] is True
    assert inst["status"] == {"phase": "Stopped"}
    assert _pod(kubectl, "custom-demo") == {}
    assert live.wait_idle(10)
    # spec.stop keeps it stopped (docs/concepts/instances.md "Life cycle"): no Pod comes back
    assert _pod(kubectl, "custom-demo") == {}


def test_deleted_instance_loses_pod_then_finalizer(live, kubectl):
    kubectl("delete", "instance", "sliced-demo", "-n", NS, "--wait=false")
    _wait(lambda: _instance(kubectl, "sliced-demo"), lambda i: i == {}, what="sliced-demo gone")
    assert _pod(kubectl, "sliced-demo") == {}
    assert live.wait_idle(10)


def test_a_pod_not_owned_by_the_instance_is_never_touched(live, kubectl):
    foreign = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "foreign-demo", "namespace": NS},
               "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    _apply(kubectl, foreign)
    uid = _pod(kubectl, "foreign-demo")["metadata"]["uid"]
    doc = _with_resources(seed_object("step3-instance-sliced-demo.yaml"), "1", "12Gi", "15Gi")
    doc["metadata"]["name"] = "foreign-demo"
    _apply(kubectl, doc)
    _wait(lambda: _instance(kubectl, "foreign-demo"),
          lambda i: FINALIZER in (i.get("metadata") or {}).get("finalizers", []), what="finalizer")
    assert live.wait_idle(10)
    pod = _pod(kubectl, "foreign-demo")
    assert pod["metadata"]["uid"] == uid and "ownerReferences" not in pod["metadata"]
    kubectl("delete", "instance", "foreign-demo", "-n", NS, "--wait=true")   # finalizer dropped, Pod left
    assert live.wait_idle(10)
    assert _pod(kubectl, "foreign-demo")["metadata"]["uid"] == uid
    kubectl("delete", "pod", "foreign-demo", "-n", NS, "--wait=true")


def _generic_cpu(kubectl) -> str:
    return ((_get(kubectl, "instancetype", "gpustack--generic-linux-amd64").get("status") or {})
            .get("summary") or {}).get("cpu", "")


def test_cpu_only_instance_pod_carries_its_pool_flavors_and_moves_the_cpu_view(live, kubectl):
    """docs/concepts/pools-and-flavors.md "Kueue's resource charging" fallback (cpu excluded from Kueue, rules/pools/kueue.yaml): the controller gives a
    CPU-only Instance Pod one node-affinity term per flavor of the generic pool, and once that Pod
    runs on a node its 4 cores leave the CPU view (docs/concepts/pools-and-flavors.md "InstanceType status"): 48/72 -> 48/68."""
    doc = _with_resources(seed_object("step3-instance-sliced-demo.yaml"), "4", "8Gi", "15Gi")
    doc["metadata"]["name"] = "cpu-demo"
    doc["spec"]["type"] = "gpustack--generic-linux-amd64"
    for key in ("accelerator", "acceleratorSlicedMemoryPercentage", "acceleratorSlicedCoresPercentage"):
        doc["spec"]["resources"].pop(key)
    assert _generic_cpu(kubectl) == "48/72"
    _apply(kubectl, doc)
    _, pod = _wait(lambda: _pod(kubectl, "cpu-demo"), bool, what="Pod cpu-demo")
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert [[e["key"] for e in t["matchExpressions"]][3:] for t in terms] == [
        [f"general.feature.gpustack.ai/{g}", f"general.feature.gpustack.ai/{g}.count"]
        for g in ("amd-epyc-7r32", "intel-xeon-platinum-8259cl", "amd-epyc-7r13", "intel-xeon-platinum-8259cl")]
    assert [t["matchExpressions"][4]["values"] for t in terms] == [["4"], ["4"], ["16"], ["48"]]
    assert pod["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "4"
    assert live.wait_idle(10)
    assert _generic_cpu(kubectl) == "48/72"        # not bound yet: nothing counted
    # what kube-scheduler and the kubelet would do: bind the Pod, then report it Running
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "cpu-demo", "namespace": NS},
               "target": {"apiVersion": "v1", "kind": "Node", "name": "node-t4-b"}}
    kubectl("create", "-f", "-", input=yaml.safe_dump(binding))
    kubectl("patch", "pod", "cpu-demo", "-n", NS, "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": {"phase": "Running"}}))
    _wait(lambda: _generic_cpu(kubectl), lambda v: v == "48/68", what="CPU view 48/68")
    # deleting the Instance deletes its Pod (gracefully: a bound Pod waits for its kubelet); while it
    # terminates it still holds its cores and the Instance keeps its finalizer (docs/concepts/instances.md "Life cycle")
    kubectl("delete", "instance", "cpu-demo", "-n", NS, "--wait=false")
    _wait(lambda: _pod(kubectl, "cpu-demo"), lambda p: (p.get("metadata") or {}).get("deletionTimestamp"),
          what="Pod cpu-demo terminating")
    assert live.wait_idle(10)
    assert _generic_cpu(kubectl) == "48/68"
    assert _instance(kubectl, "cpu-demo")["status"]["phase"] == "Deleting"
    # no kubelet confirms the bound Pod's graceful deletion: finish it by hand; the cores come back
    kubectl("delete", "pod", "cpu-demo", "-n", NS, "--grace-period=0", "--force", "--wait=true")
    _wait(lambda: _generic_cpu(kubectl), lambda v: v == "48/72", what="CPU view back to 48/72")
    _wait(lambda: _instance(kubectl, "cpu-demo"), lambda i: not i, what="Instance cpu-demo gone")
    assert live.wait_idle(10)


def test_setting_view_objects_mirror_the_secret(live, kubectl):
    catalog = POLICY.settings
    stored = _secret_values(kubectl)
    items = json.loads(kubectl.stdout("get", "settings", "-n", SYSTEM, "-o", "json"))["items"]
    assert sorted(s["metadata"]["name"] for s in items) == sorted(s.name for s in catalog.settings)
    assert len(items) == 11
    for item in items:
        name = item["metadata"]["name"]
        setting = next(s for s in catalog.settings if s.name == name)
        assert "value" not in (item.get("spec") or {}) or name == "instance-persistent-volume-placement"
        assert item["status"] == {"description": setting.description, "editable": True, "sensitive": False,
                                  "value": stored[name],
                                  "observedGeneration": item["metadata"]["generation"]}, name
    assert stored["instance-persistent-volume-placement"] == "false"   # the pinned-demo test's write
    assert stored["instance-type-derived-from-node"] == "true"


def test_setting_spec_value_is_written_to_the_secret(live, kubectl):
    name = "instance-privileged-allowed"
    before = _setting(kubectl, name)
    assert before["status"]["value"] == "false"   # missing from the seed Secret: seeded with the default
    t0 = time.monotonic()
    kubectl("-n", SYSTEM, "patch", "setting", name, "--type", "merge", "-p", '{"spec":{"value":"true"}}')
    _, got = _wait(lambda: _setting(kubectl, name),
                   lambda s: s["status"].get("observedGeneration") == s["metadata"]["generation"]
                   and s["metadata"]["generation"] > before["metadata"]["generation"], what="observedGeneration")
    FIGURES.setdefault("Setting patch -> observedGeneration, seconds", []).append(time.monotonic() - t0)
    assert got["status"]["value"] == "true"
    assert _secret_values(kubectl)[name] == "true"
    # a direct Secret write shows in status.value; spec.value stays and is not re-applied
    set_setting(kubectl, POLICY.settings, name, "false")
    _, got = _wait(lambda: _setting(kubectl, name), lambda s: s["status"]["value"] == "false", what="status.value")
    assert got["spec"] == {"value": "true"}
    assert got["status"]["observedGeneration"] == got["metadata"]["generation"]
    assert live.wait_idle(10)
    assert _secret_values(kubectl)[name] == "false"


def test_deleted_setting_is_recreated(live, kubectl):
    name = "workload-fit-affinity"
    uid = _setting(kubectl, name)["metadata"]["uid"]
    kubectl("-n", SYSTEM, "delete", "setting", name, "--wait=true")
    _, got = _wait(lambda: _setting(kubectl, name),
                   lambda s: s and s["metadata"]["uid"] != uid and s.get("status"), what="Setting recreated")
    assert "spec" not in got or "value" not in got["spec"]
    assert got["status"]["value"] == "true" and got["status"]["observedGeneration"] == 1


def test_an_instance_with_ports_gets_its_node_port_service_and_status(live, kubectl):
    """docs/concepts/instances.md "The Instance's Pod" and "Instances": a NodePort Service of the Instance's name; ``status.ports`` once the API server
    allocated every NodePort; ``hostIPs`` from the bound Node (ExternalIP first). The binding and the
    Node addresses are written by hand, as kube-scheduler and the kubelet would."""
    doc = _with_resources(seed_object("step3-instance-sliced-demo.yaml"), "1", "12Gi", "15Gi")
    doc["metadata"]["name"] = "ports-demo"
    doc["spec"]["ports"] = [{"port": 8080}, {"port": 5353, "protocol": "UDP"}]
    _apply(kubectl, doc)
    _, pod = _wait(lambda: _pod(kubectl, "ports-demo"), bool, what="Pod ports-demo")
    _, service = _wait(lambda: _get(kubectl, "service", "ports-demo", "-n", NS), bool, what="Service ports-demo")
    uid = _instance(kubectl, "ports-demo")["metadata"]["uid"]
    assert service["spec"]["type"] == "NodePort"
    assert service["spec"]["selector"] == pod["metadata"]["labels"]
    assert service["metadata"]["ownerReferences"][0]["uid"] == uid
    ports = service["spec"]["ports"]
    assert [(p["name"], p["protocol"], p["port"], p["targetPort"]) for p in ports] == [
        ("tcp-8080", "TCP", 8080, 8080), ("udp-5353", "UDP", 5353, 5353)]
    assert all(30000 <= p["nodePort"] <= 32767 for p in ports)
    kubectl("patch", "node", "node-t4-b", "--subresource=status", "--type=merge", "-p", json.dumps(
        {"status": {"addresses": [{"type": "InternalIP", "address": "172.31.9.4"},
                                  {"type": "ExternalIP", "address": "54.9.9.4"}]}}))
    kubectl("create", "-f", "-", input=yaml.safe_dump(
        {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "ports-demo", "namespace": NS},
         "target": {"apiVersion": "v1", "kind": "Node", "name": "node-t4-b"}}))
    _, inst = _wait(lambda: _instance(kubectl, "ports-demo"),
                    lambda i: (i.get("status") or {}).get("hostIPs"), what="status.hostIPs")
    assert inst["status"]["nodeName"] == "node-t4-b"
    assert inst["status"]["hostIPs"] == [{"ip": "54.9.9.4"}, {"ip": "172.31.9.4"}]
    assert inst["status"]["ports"] == [
        {"port": 8080, "protocol": "TCP", "name": "tcp-8080", "nodePort": ports[0]["nodePort"]},
        {"port": 5353, "protocol": "UDP", "name": "udp-5353", "nodePort": ports[1]["nodePort"]}]
    assert live.wait_idle(10)
    kubectl("delete", "instance", "ports-demo", "-n", NS, "--wait=false")
    # a bound Pod waits for its kubelet to confirm the deletion; none runs here: force it
    kubectl("delete", "pod", "ports-demo", "-n", NS, "--grace-period=0", "--force")
    _wait(lambda: _instance(kubectl, "ports-demo"), lambda i: i == {}, what="ports-demo gone")
    # no garbage collector runs locally (no kube-controller-manager): the owner reference would
    # remove the Service in a real cluster; here the test does
    kubectl("delete", "service", "ports-demo", "-n", NS, "--wait=true")


def test_an_instance_persistent_volume_gets_its_claim_and_mirrors_its_phase(live, kubectl):
    """docs/concepts/instances.md "Persistent volumes": the controller creates the PersistentVolumeClaim of an InstancePersistentVolume and mirrors
    its phase. No StorageClass ``missing-class`` exists and no PV controller runs here: it stays Pending."""
    _apply(kubectl, {"apiVersion": "worker.gpustack.ai/v1", "kind": "InstancePersistentVolume",
                     "metadata": {"name": "ipv-demo", "namespace": NS},
                     "spec": {"type": "missing-class", "capacity": "5Gi", "accessMode": "ReadWriteOnce"}})
    uid = _get(kubectl, "instancepersistentvolume", "ipv-demo", "-n", NS)["metadata"]["uid"]
    _, pvc = _wait(lambda: _get(kubectl, "pvc", "ipv-demo", "-n", NS), bool, what="PVC ipv-demo")
    assert pvc["spec"]["storageClassName"] == "missing-class"
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert pvc["spec"]["resources"] == {"requests": {"storage": "5Gi"}}
    assert pvc["metadata"]["ownerReferences"] == [{"apiVersion": "worker.gpustack.ai/v1",
                                                   "kind": "InstancePersistentVolume", "name": "ipv-demo",
                                                   "uid": uid, "controller": True, "blockOwnerDeletion": True}]
    _, ipv = _wait(lambda: _get(kubectl, "instancepersistentvolume", "ipv-demo", "-n", NS),
                   lambda i: (i.get("status") or {}).get("phase"), what="status.phase")
    assert ipv["status"] == {"phase": "Pending"}
    assert live.wait_idle(10)
    kubectl("delete", "instancepersistentvolume", "ipv-demo", "-n", NS, "--wait=true")
    # no garbage collector or pvc-protection controller runs here: remove the claim by hand
    kubectl("delete", "pvc", "ipv-demo", "-n", NS, "--wait=false")
    kubectl("patch", "pvc", "ipv-demo", "-n", NS, "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
