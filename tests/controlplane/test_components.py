"""kwok, nfd-master and Kueue's controller on the local control plane (testing/localcluster/components.py).

One "full" cluster (``full_cluster()``: kube-scheduler + the three components + every CRD) serves
this module; the bare ``session_cluster()`` of the other tests is not touched. The tests run in
order and build on each other: a kwok Node goes Ready and runs a Pod; the seed's NodeFeatures of
``node-a10g`` label that Node as seed step 1 shows and step 2's flip of ``gpustack.ai/managed``
reaches it; our controller's objects (seed step 1) give ClusterQueues that Kueue marks Active, so
``kubectl get instancetypes``/``clusterqueue`` print the seed's tables exactly (PHASE ``Active``,
PENDING WORKLOADS ``0``); a Pod labelled with a LocalQueue gets Kueue's scheduling gate and a
Workload through Kueue's own webhook.
"""
from __future__ import annotations

import json
import threading
import time

import pytest
import yaml

from testing.hooks import ObservedController as Controller
from runtime.engine.policy import Policy
from runtime.kube.session import connect
from testing.localcluster import MissingBinariesError, fake_node
from testing.localcluster.testing import full_cluster, parse_table
from runtime.rules.loader import load_rules
from tests.controlplane.test_controller import COMMON, _apply_seed_cluster
from tests.seedfiles import seed_object, seed_table

FIGURES: dict[str, float] = {}
NODE = "node-a10g"
A10G_ENTRANCE = "gpustack-fnv64-c4680bb149644f1c"  # LocalQueue of gpustack--nvidia-a10g-linux-amd64
KUEUE_GATE = "kueue.x-k8s.io/admission"


def _poll(what: str, probe, timeout: float = 90.0, interval: float = 0.2):
    """Return probe()'s first truthy value; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not seen within {timeout:.0f}s (last: {value!r})", pytrace=False)
        time.sleep(interval)


def _get(kubectl, *args) -> dict:
    return json.loads(kubectl.stdout("get", *args, "-o", "json"))


def _condition(obj: dict, kind: str) -> str | None:
    return next((c["status"] for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind), None)


@pytest.fixture(scope="module")
def full():
    try:
        cluster, kubectl = full_cluster()
    except MissingBinariesError as e:
        pytest.fail(str(e), pytrace=False)
    yield cluster, kubectl
    for key, value in {**{f"{k} start-to-healthy s": v for k, v in cluster.component_seconds.items()},
                       **FIGURES}.items():
        print(f"\n[components figure] {key}: {value:.3f}")


@pytest.fixture(scope="module")
def kubectl(full):
    return full[1]


def test_components_run_with_their_logs_in_the_workdir(full):
    cluster, _ = full
    assert cluster.running
    assert set(cluster.component_seconds) == {"kwok", "nfd-master", "kueue"}
    for name in ("kwok", "nfd-master", "kueue"):
        assert (cluster.workdir / f"{name}.log").stat().st_size > 0
    assert set(cluster.logs()) >= {"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager",
                                   "kwok", "nfd-master", "kueue"}


def test_garbage_collector_deletes_a_dependent_of_a_deleted_owner(kubectl):
    """kube-controller-manager's garbage collector runs: a ConfigMap whose ownerReference names a
    deleted ConfigMap is deleted (as Kueue's Workload of a deleted Pod is, README "Known gap")."""
    kubectl("create", "configmap", "gc-owner", "-n", "default")
    owner = _get(kubectl, "configmap", "gc-owner", "-n", "default")
    dependent = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "gc-dependent", "namespace": "default", "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "gc-owner", "uid": owner["metadata"]["uid"]}]}}
    kubectl("create", "-f", "-", input=json.dumps(dependent))
    names = lambda: kubectl.stdout("get", "configmap", "-n", "default", "-o", "name").split()  # noqa: E731
    assert "configmap/gc-dependent" in names()  # the owner exists: the dependent stays
    kubectl("delete", "configmap", "gc-owner", "-n", "default", "--wait=false")
    _poll("gc-dependent garbage-collected", lambda: "configmap/gc-dependent" not in names(), timeout=120)


def test_kueue_webhooks_are_kueues_own_pointed_at_loopback(full, kubectl):
    cluster, _ = full
    mutating = _get(kubectl, "mutatingwebhookconfiguration", "kueue-mutating-webhook-configuration")
    pod_hook = next(h for h in mutating["webhooks"] if h["name"] == "mpod.kb.io")
    assert pod_hook["clientConfig"]["url"] == f"{cluster.kueue_webhook_url}/mutate--v1-pod"
    assert pod_hook["namespaceSelector"]["matchExpressions"] == [{
        "key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "kueue-system"]}]
    validating = _get(kubectl, "validatingwebhookconfiguration", "kueue-validating-webhook-configuration")
    assert "vclusterqueue.kb.io" in {h["name"] for h in validating["webhooks"]}


def test_kwok_node_goes_ready_and_runs_a_bound_pod(kubectl):
    node = fake_node("kwok-probe", {"kubernetes.io/os": "linux"},
                     {"cpu": "4", "memory": "8Gi", "example.com/widget": "2"})
    kubectl("create", "-f", "-", input=json.dumps(node))
    ready = _poll("kwok-probe Ready=True",
                  lambda: (lambda n: n if _condition(n, "Ready") == "True" else None)(_get(kubectl, "node", "kwok-probe")))
    assert ready["status"]["capacity"] == {"cpu": "4", "memory": "8Gi", "example.com/widget": "2", "pods": "110"}
    kubectl("create", "namespace", "kwok-probe")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": "kwok-probe"},
           "spec": {"nodeSelector": {"kubernetes.io/hostname": "kwok-probe"},
                    "containers": [{"name": "c", "image": "example.invalid/none",
                                    "resources": {"requests": {"cpu": "1", "example.com/widget": "1"},
                                                  "limits": {"example.com/widget": "1"}}}]}}
    kubectl("create", "-f", "-", input=json.dumps(pod))
    running = _poll("Pod kwok-probe/probe Running",
                    lambda: (lambda p: p if p.get("status", {}).get("phase") == "Running" else None)(
                        _get(kubectl, "pod", "-n", "kwok-probe", "probe")))
    assert running["spec"]["nodeName"] == "kwok-probe"
    assert "schedulingGates" not in running["spec"]  # no queue-name label: Kueue leaves it alone
    kubectl("delete", "namespace", "kwok-probe", "--wait=false")


def _node_labels(kubectl) -> dict[str, str]:
    return _get(kubectl, "node", NODE)["metadata"]["labels"]


def test_nodefeatures_label_the_node_as_seed_steps_1_and_2_show(kubectl):
    kubectl("apply", "-f", str(COMMON / "namespaces.yaml"))
    kubectl("create", "-f", "-", input=json.dumps(fake_node(
        NODE, {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}, {"cpu": "4", "memory": "16Gi"})))
    kubectl("label", "node", NODE, "example.com/owner=someone-else")  # not NFD's: must survive
    features = [d for d in yaml.safe_load_all((COMMON / "nodefeatures.yaml").read_text())
                if d and d["metadata"]["labels"]["nfd.node.kubernetes.io/node-name"] == NODE]
    assert [d["metadata"]["name"] for d in features] == [f"{NODE}-gpustack-worker", f"{NODE}-gpustack-device-manager"]
    kubectl("apply", "-f", "-", input=yaml.safe_dump_all(features))
    want = seed_object("step1-node-a10g.yaml")["metadata"]["labels"]
    got = _poll("NodeFeature labels on node-a10g",
                lambda: (lambda ls: ls if "acceleratable.feature.gpustack.ai/nvidia.runtime-version" in ls
                         and "gpustack.ai/managed" in ls else None)(_node_labels(kubectl)))
    assert {k: v for k, v in got.items() if k not in ("kubernetes.io/hostname", "example.com/owner")} == want
    assert got["example.com/owner"] == "someone-else"

    for value in ("false", "true"):  # seed step 2: unmanage, then re-admit
        started = time.monotonic()
        kubectl("-n", "gpustack-system", "patch", "nodefeature", f"{NODE}-gpustack-worker", "--type=merge",
                "-p", json.dumps({"spec": {"labels": {"gpustack.ai/managed": value}}}))
        labels = _poll(f"gpustack.ai/managed={value} on node-a10g",
                       lambda: (lambda ls: ls if ls.get("gpustack.ai/managed") == value else None)(_node_labels(kubectl)),
                       interval=0.05)
        FIGURES[f"NodeFeature patch -> Node label ({value}) s"] = time.monotonic() - started
        assert {k: v for k, v in labels.items() if k not in ("kubernetes.io/hostname", "example.com/owner")} == \
            {**want, "gpustack.ai/managed": value}
        assert labels["example.com/owner"] == "someone-else"


@pytest.fixture(scope="module")
def controller(full, kubectl):
    cluster, _ = full
    _apply_seed_cluster(kubectl)  # the other seed Nodes, NodeFeatures, Devices, settings
    ctl = Controller(connect(cluster.kubeconfig), Policy(load_rules()), coalesce_seconds=0.1, env={},
                     fit_coalesce_seconds=0)
    ctl.start()
    stop = threading.Event()
    loop = threading.Thread(target=ctl.run, args=(stop,), name="controller", daemon=True)
    loop.start()
    yield ctl
    stop.set()
    loop.join(30)
    ctl.stop()


def _table(kubectl, kind: str) -> list[dict[str, str]]:
    return parse_table(kubectl.stdout("get", kind))[1]


def test_kueue_marks_our_clusterqueues_active_and_instancetypes_print_the_seed(controller, kubectl):
    want = parse_table(seed_table("step1-instancetype.txt"))[1]
    started = time.monotonic()
    _poll("kubectl get instancetypes == seed step 1 (PHASE Active)",
          lambda: _table(kubectl, "instancetypes") == want, timeout=120, interval=0.5)
    FIGURES["controller start -> InstanceTypes Active s"] = time.monotonic() - started
    queues = _get(kubectl, "clusterqueues.kueue.x-k8s.io")["items"]
    assert sorted(q["metadata"]["name"] for q in queues) == sorted(r["NAME"] for r in want)
    for q in queues:
        active = next(c for c in q["status"]["conditions"] if c["type"] == "Active")
        assert (active["status"], active["reason"]) == ("True", "Ready"), q["metadata"]["name"]
    assert _table(kubectl, "clusterqueues.kueue.x-k8s.io") == parse_table(seed_table("step1-clusterqueue.txt"))[1]


def test_a_queued_pod_is_gated_and_gets_a_workload(controller, kubectl):
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "queued-probe", "namespace": "default",
                        "labels": {"kueue.x-k8s.io/queue-name": A10G_ENTRANCE}},
           "spec": {"containers": [{"name": "c", "image": "example.invalid/none",
                                    "resources": {"requests": {"cpu": "1"}}}]}}
    created = json.loads(kubectl.stdout("create", "-f", "-", "-o", "json", input=json.dumps(pod)))
    try:
        assert {"name": KUEUE_GATE} in created["spec"].get("schedulingGates", [])
        assert created["metadata"]["labels"]["kueue.x-k8s.io/managed"] == "true"
        workload = _poll("a Workload owned by default/queued-probe", lambda: next(
            (w for w in _get(kubectl, "workloads.kueue.x-k8s.io", "-n", "default")["items"]
             if any(o["uid"] == created["metadata"]["uid"] for o in w["metadata"].get("ownerReferences", []))),
            None))
        assert workload["spec"]["queueName"] == A10G_ENTRANCE
        assert [ps["count"] for ps in workload["spec"]["podSets"]] == [1]
    finally:
        kubectl("delete", "pod", "-n", "default", "queued-probe", "--wait=false")
