"""The agent loop on a real kube-apiserver: its writes, its watch cache, failure handling (log once,
keep CPU facts, recover), and the shared applier's agent calls (update with conflict retry,
owned-only delete, key-only merge patches)."""
from __future__ import annotations

import json
import threading

import pytest
from loguru import logger

from runtime.kube.applier import NotOwnedError
from tests.agent.helpers import A10G, ALLOCATED, entry, group, pod
from tests.controlplane.agentlive import NS, PODS_NS, device_manager, devices, events_on, live, make_agent, \
    pod_annotations, server, wait_cached, worker  # noqa: F401 - fixtures

MANAGED = "gpustack.ai/managed"


@pytest.fixture
def logs():
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(m.record["message"]), level="INFO")
    yield lines
    logger.remove(sink)


def _writes(agent) -> list[tuple[str, str, str]]:
    return [(w.verb, w.kind, w.name) for w in agent.cluster.applier.writes]


def test_first_pass_creates_everything_then_nothing_changes(make_agent, live):
    kubectl, _ = live
    agent, _ = make_agent()
    assert agent.reconcile() is not None
    assert worker(kubectl, "node-a10g")["spec"]["labels"]["general.feature.gpustack.ai/amd-epyc-7r32.count"] == "4"
    dm = device_manager(kubectl, "node-a10g")
    assert dm["spec"]["labels"]["acceleratable.feature.gpustack.ai/nvidia-a10g.family"] == "Ampere"
    assert dm["metadata"]["ownerReferences"][0]["name"] == "node-a10g"
    assert devices(kubectl, "node-a10g")["status"]["groups"][0]["accelerators"][0]["remaining"] == 1600000
    node = server(kubectl, "node", "node-a10g")
    assert node["metadata"]["annotations"]["feature.gpustack.ai/cpu-name"] == "AMD EPYC 7R32"
    assert node["status"]["capacity"]["nvidia.com/gpu.sliced.units"] == "1600k"
    assert sorted(_writes(agent)) == sorted([
        ("create", "NodeFeature", "node-a10g-gpustack-worker"),
        ("create", "NodeFeature", "node-a10g-gpustack-device-manager"),
        ("patch", "Node", "node-a10g"), ("patch", "Node", "node-a10g"),
        ("create", "Devices", "node-a10g"), ("update-status", "Devices", "node-a10g")])
    before = len(agent.cluster.applier.writes)
    agent.reconcile()   # the write-through cache already holds every answer: nothing to write
    assert len(agent.cluster.applier.writes) == before


def _label_worker(agent, kubectl, key: str, value: str) -> str:
    """Another writer merge-patches a spec label onto the worker NodeFeature; returns once the agent's
    cache holds the edit (the NodeFeature's name)."""
    name = "node-a10g-gpustack-worker"
    kubectl("patch", "nodefeatures.nfd.k8s-sigs.io", name, "-n", NS, "--type=merge",
            "-p", json.dumps({"spec": {"labels": {key: value}}}))
    wait_cached(agent, lambda: agent.cluster.node_feature(name), lambda o: o["spec"]["labels"].get(key) == value,
                "the edited NodeFeature in the agent's cache")
    return name


def test_managed_false_on_the_nodefeature_survives(make_agent, live):
    kubectl, _ = live
    agent, _ = make_agent()
    agent.reconcile()
    _label_worker(agent, kubectl, MANAGED, "false")   # seed step 2
    agent.reconcile()
    assert worker(kubectl, "node-a10g")["spec"]["labels"][MANAGED] == "false"


def test_a_managed_flip_landing_between_plan_and_write_is_kept(make_agent, live):
    """Seed step 2 racing a pass: the plan read managed "true"; the administrator's "false" reaches the
    agent's cache before the write. The write is judged against the version the plan read (nothing to
    change), never against the newer one, so "true" is not written back over the flip."""
    kubectl, _ = live
    agent, _ = make_agent()
    agent.reconcile()
    plan = agent.plan()
    _label_worker(agent, kubectl, MANAGED, "false")
    assert not [line for line in agent.apply(plan) if "NodeFeature node-a10g-gpustack-worker" in line]
    assert worker(kubectl, "node-a10g")["spec"]["labels"][MANAGED] == "false"
    agent.reconcile()
    assert worker(kubectl, "node-a10g")["spec"]["labels"][MANAGED] == "false"


def test_a_write_planned_from_an_older_version_is_a_conflict_then_planned_again(make_agent, live):
    """The plan would remove a forged label (from the version it read); the managed flip lands first:
    the PUT carries the read resourceVersion and gets 409, the agent wakes for another pass, which
    removes the label and keeps the flip."""
    kubectl, _ = live
    agent, _ = make_agent()
    agent.reconcile()
    _label_worker(agent, kubectl, "example.com/forged", "true")
    plan = agent.plan()
    _label_worker(agent, kubectl, MANAGED, "false")
    agent.wake.clear()
    assert not [line for line in agent.apply(plan) if "NodeFeature node-a10g-gpustack-worker" in line]
    assert agent.wake.is_set()
    assert worker(kubectl, "node-a10g")["spec"]["labels"][MANAGED] == "false"
    agent.reconcile()
    labels = worker(kubectl, "node-a10g")["spec"]["labels"]
    assert labels[MANAGED] == "false" and "example.com/forged" not in labels


def test_a_label_another_writer_adds_to_the_spec_is_removed(make_agent, live):
    kubectl, _ = live
    agent, _ = make_agent()
    agent.reconcile()
    name = _label_worker(agent, kubectl, "example.com/forged", "true")
    agent.reconcile()
    assert "example.com/forged" not in worker(kubectl, "node-a10g")["spec"]["labels"]
    assert ("update", "NodeFeature", name) in _writes(agent)


def test_settings_are_read_from_the_secret(make_agent, live):
    kubectl, _ = live
    agent, _ = make_agent(secret={"node-management-manual": "true"})
    agent.reconcile()
    assert MANAGED not in worker(kubectl, "node-a10g")["spec"]["labels"]


def test_ledger_from_pod_annotations_and_events_recorded_once(make_agent, live):
    kubectl, _ = live
    pods = [pod("a-whole", [group("a10g", entry(A10G, 0, 1))]),
            pod("b-slice", [group("a10g", entry(A10G, 0, 3, 320000))]),
            pod("bad", raw="{")]
    agent, _ = make_agent(pods=pods)
    agent.reconcile()
    agent.reconcile()
    assert devices(kubectl, "node-a10g")["status"]["groups"][0]["accelerators"][0] == {
        "id": A10G, "index": 0, "mode": 1, "allocated": 1600000}
    on_devices = events_on(kubectl, "default", "node-a10g")
    on_bad = events_on(kubectl, PODS_NS, "bad")
    assert [(k, n, r, c) for k, n, r, _, c in on_devices + on_bad] == [
        ("Devices", "node-a10g", "AllocationConflict", 1), ("Pod", "bad", "InvalidAllocation", 1)]


def test_driver_failure_keeps_cpu_facts_logs_once_and_recovers(make_agent, live, logs):
    kubectl, _ = live
    agent, backend = make_agent()
    agent.reconcile()
    backend.fail("driver", "NVML_ERROR_DRIVER_NOT_LOADED")
    for _ in range(3):
        plan = agent.reconcile()
        assert plan is not None and not plan.accelerators_known
    errors = [line for line in logs if "NVML_ERROR_DRIVER_NOT_LOADED" in line]
    assert len(errors) == 1 and "cause: RuntimeError" in errors[0]
    # CPU facts still published; accelerator objects left as they were
    assert worker(kubectl, "node-a10g")["spec"]["labels"]["general.feature.gpustack.ai/amd-epyc-7r32"] == "true"
    assert device_manager(kubectl, "node-a10g") and devices(kubectl, "node-a10g")
    backend.recover()
    assert agent.reconcile().accelerators_known
    assert sum("accelerator probe: recovered" in line for line in logs) == 1


def test_gpu_off_the_bus_is_unhealthy_then_returns_after_its_clean_period(make_agent, live):
    """docs/concepts/out-of-service.md "Health": a lost GPU leaves the ledger and the capacity keys, never its
    labels (decision 26); back on the bus, it counts again after rules/health.yaml's clean period (the
    agent's clock moved on by the test)."""
    from datetime import datetime, timedelta, timezone
    kubectl, _ = live
    clock = {"now": datetime(2026, 11, 29, 21, 0, 0, tzinfo=timezone.utc)}
    agent, backend = make_agent(clock=lambda: clock["now"])
    agent.reconcile()
    backend.lose(A10G)
    agent.reconcile()
    now = devices(kubectl, "node-a10g")
    assert now["spec"]["groups"][0]["accelerators"][0]["status"]["unhealthy"] is True
    assert now["spec"]["groups"][0]["accelerators"][0]["status"]["health"]["rule"] == "lost"
    assert now["status"]["groups"][0]["accelerators"] == []
    labels = device_manager(kubectl, "node-a10g")["spec"]["labels"]
    assert labels["acceleratable.feature.gpustack.ai/nvidia-a10g.count"] == "1"    # installed, not healthy
    assert server(kubectl, "node", "node-a10g")["status"]["capacity"]["nvidia.com/gpu.sliced.units"] == "0"
    backend.recover()
    clock["now"] += timedelta(seconds=1)
    agent.reconcile()                       # the clean period starts
    assert devices(kubectl, "node-a10g")["spec"]["groups"][0]["accelerators"][0]["status"]["unhealthy"] is True
    clock["now"] += timedelta(seconds=agent.policy.ruleset.get("AcceleratorHealth").cleanSeconds)
    agent.reconcile()
    assert devices(kubectl, "node-a10g")["spec"]["groups"][0]["accelerators"][0]["status"]["unhealthy"] is False
    assert server(kubectl, "node", "node-a10g")["status"]["capacity"]["nvidia.com/gpu.sliced.units"] == "1600k"


def test_missing_library_on_a_cpu_node_means_no_accelerators(make_agent, live, logs):
    kubectl, _ = live
    agent, backend = make_agent("node-cpu")
    backend.fail("library", "NVML Shared Library Not Found")
    agent.reconcile()
    agent.reconcile()
    assert worker(kubectl, "node-cpu")["spec"]["labels"]
    assert device_manager(kubectl, "node-cpu") == {} and devices(kubectl, "node-cpu") == {}
    assert sum("publishing CPU facts only" in line for line in logs) == 1


def test_library_lost_on_a_gpu_node_does_not_delete_devices(make_agent, live):
    kubectl, _ = live
    agent, backend = make_agent()
    agent.reconcile()
    backend.fail("library", "NVML Shared Library Not Found")
    agent.reconcile()
    assert devices(kubectl, "node-a10g") and device_manager(kubectl, "node-a10g")


def test_devices_removed_when_no_accelerator_remains_only_if_owned(make_agent, live):
    kubectl, _ = live
    agent, backend = make_agent()
    agent.reconcile()
    kubectl("patch", "devices.worker.gpustack.ai", "node-a10g", "--type=merge",
            "-p", json.dumps({"metadata": {"ownerReferences": None}}))          # not ours any more
    wait_cached(agent, agent.cluster.devices, lambda o: not o["metadata"].get("ownerReferences"),
                "the disowned Devices in the agent's cache")
    backend.document["accelerators"] = []
    agent.reconcile()
    assert devices(kubectl, "node-a10g") and device_manager(kubectl, "node-a10g") == {}
    with pytest.raises(NotOwnedError, match="refusing to delete Devices node-a10g: not owned by node-a10g"):
        agent.cluster.applier.delete(agent.cluster.devices(), owner=agent.cluster.node())


def test_api_errors_never_escape_the_loop(make_agent, live, logs):
    kubectl, _ = live
    agent, _ = make_agent()
    node = agent.cluster.node()
    kubectl("delete", "node", "node-a10g", "--wait=true")
    wait_cached(agent, lambda: agent.cluster.cache.get("Node", "node-a10g"), lambda o: o is None,
                "the Node gone from the agent's cache")
    assert agent.reconcile() is None
    assert agent.reconcile() is None
    assert sum("reconcile: NodeMissingError: Node node-a10g not found" == line for line in logs) == 1
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": "node-a10g", "labels": node["metadata"]["labels"]}}))
    wait_cached(agent, lambda: agent.cluster.cache.get("Node", "node-a10g"), lambda o: o is not None,
                "the Node back in the agent's cache")
    assert agent.reconcile() is not None
    assert "reconcile: recovered" in logs


def test_run_loop_reconciles_until_stopped(make_agent, live):
    agent, _ = make_agent()
    stop = threading.Event()
    passes = []
    real = agent.reconcile

    def counted(dry_run=False):
        passes.append(1)
        if len(passes) == 2:
            stop.set()
        return real(dry_run)
    agent.reconcile = counted
    agent.run(0.01, stop=stop, watch=False)
    assert len(passes) == 2 and worker(live[0], "node-a10g")


def test_a_watched_change_wakes_the_loop(make_agent, live):
    """Every watch event of the agent's cache sets the Event its loop waits on (run(): wake.wait)."""
    kubectl, _ = live
    agent, _ = make_agent()          # caches synced, nothing written yet: no event of its own pending
    agent.wake.clear()
    kubectl("annotate", "node", "node-a10g", "example.com/poke=1")
    wait_cached(agent, agent.wake.is_set, bool, "the agent woken by its Node's watch event")
    agent.wake.clear()
    kubectl("create", "secret", "generic", "gpustack-settings", "-n", NS, "--from-literal=node-management-manual=true")
    wait_cached(agent, agent.wake.is_set, bool, "the agent woken by the settings Secret's watch event")


# -- the applier's agent calls, on real objects --------------------------------------------------------
def test_update_retries_a_conflict_with_a_fresh_read(make_agent, live):
    kubectl, _ = live
    agent, _ = make_agent()
    agent.reconcile()
    name = "node-a10g-gpustack-worker"
    stale = agent.cluster.node_feature(name)
    kubectl("annotate", "nodefeatures.nfd.k8s-sigs.io", name, "-n", NS, "example.com/bump=1")   # a newer version
    desired = json.loads(json.dumps(stale))
    desired["spec"]["labels"]["example.com/new"] = "1"
    assert agent.cluster.upsert(desired, stale) == "replaced"      # 409 on the stale resourceVersion, then retried
    now = worker(kubectl, "node-a10g")
    assert now["spec"]["labels"]["example.com/new"] == "1"
    assert now["metadata"]["annotations"]["example.com/bump"] == "1"


def test_delete_owned_leaves_what_the_node_does_not_own(make_agent, live):
    kubectl, _ = live
    agent, _ = make_agent()
    agent.reconcile()
    foreign = {"apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeature",
               "metadata": {"name": "node-a10g-by-hand", "namespace": NS,
                            "labels": {"nfd.node.kubernetes.io/node-name": "node-a10g"}},
               "spec": {"labels": {"example.com/x": "1"}}}
    kubectl("apply", "-f", "-", input=json.dumps(foreign))
    held = wait_cached(agent, lambda: agent.cluster.node_feature("node-a10g-by-hand"), bool,
                       "the hand-made NodeFeature in the agent's cache (label selector)")
    assert agent.cluster.delete_owned(held, agent.cluster.node()) is False
    assert server(kubectl, "nodefeatures.nfd.k8s-sigs.io", "node-a10g-by-hand", "-n", NS)
    dm = agent.cluster.node_feature("node-a10g-gpustack-device-manager")
    assert agent.cluster.delete_owned(dm, agent.cluster.node()) is True
    assert device_manager(kubectl, "node-a10g") == {}
    kubectl("delete", "nodefeatures.nfd.k8s-sigs.io", "node-a10g-by-hand", "-n", NS)


def test_pod_annotation_patch_merges_only_the_given_key(make_agent, live):
    kubectl, _ = live
    agent, _ = make_agent(pods=[{"apiVersion": "v1", "kind": "Pod",
                                 "metadata": {"name": "p", "annotations": {"example.com/keep": "yes"}}}])
    agent.cluster.patch_pod_annotations(PODS_NS, "p", {"device.gpustack.ai/accelerator.allocated": "{}"})
    assert pod_annotations(kubectl, "p") == {"example.com/keep": "yes", "device.gpustack.ai/accelerator.allocated": "{}"}


# -- the same kube layer from outside the agent's process ----------------------------------------------
def test_the_agent_command_once_publishes_the_node(make_agent, live, tmp_path):
    """`accelpolicy agent --once` connects with the one kubeconfig loader, syncs its caches, writes
    and exits 0."""
    import os
    import subprocess

    from testing.localcluster.walkthrough import accelpolicy_argv

    kubectl, _ = live
    make_agent()                      # the Node as kubelet registers it (this process writes nothing)
    argv = accelpolicy_argv() + ["agent", "--node", "node-a10g", "--kubeconfig", str(kubectl.kubeconfig),
                                 "--backend", "fake", "--facts", "probes/recorded/node-a10g.yaml",
                                 "--allocation-source", "annotation", "--once"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "KUBERNETES_POD_NAMESPACE": NS})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "created Devices node-a10g" in done.stderr
    assert devices(kubectl, "node-a10g")["status"]["groups"][0]["accelerators"][0]["remaining"] == 1600000


def test_the_device_plugin_stand_in_reads_and_writes_through_the_same_layer(make_agent, live, policy):
    """testing/localcluster/deviceplugin.py on the shared cache and applier: it advertises the node's
    tokens and annotates a bound Pod's allocation, which the agent's next pass charges."""
    from testing.localcluster.deviceplugin import DevicePluginStandIn

    kubectl, session = live
    agent, _ = make_agent(pods=[{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "whole"},
                                 "spec": {"containers": [{"name": "main", "resources": {
                                     "requests": {"nvidia.com/gpu": "1"}}}]}}])
    agent.reconcile()
    plugin = DevicePluginStandIn(session, policy, ["node-a10g"]).start()
    try:
        capacity = server(kubectl, "node", "node-a10g")["status"]["capacity"]
        assert (capacity["nvidia.com/gpu"], capacity["nvidia.com/gpu.shared"]) == ("1", "10")
        wait_cached(agent, lambda: pod_annotations(kubectl, "whole"), lambda a: ALLOCATED in a,
                    "the stand-in's allocation annotation on the Pod")
    finally:
        plugin.stop()
    assert json.loads(pod_annotations(kubectl, "whole")[ALLOCATED]) == {"main": [group("a10g", entry(A10G, 0, 1, 1600000))]}
    wait_cached(agent, lambda: agent.cluster.pods()[0]["metadata"].get("annotations") or {}, lambda a: ALLOCATED in a,
                "the annotated Pod in the agent's cache")
    agent.reconcile()
    assert devices(kubectl, "node-a10g")["status"]["groups"][0]["accelerators"][0] == {
        "id": A10G, "index": 0, "mode": 1, "allocated": 1600000}
