"""The agent loop: apply through a client, failure handling (log once, keep CPU facts, recover)."""
from __future__ import annotations

import base64

import pytest
from loguru import logger

from tests.agent.conftest import seed_node
from tests.agent.fakeclient import FakeClient
from tests.agent.helpers import A10G, entry, group, pod
from probes.fake import RecordedBackend, recorded
from runtime.agent.runner import NodeAgent, resolve_allocation_source

WORKER = ("nodefeatures", "gpustack-system", "node-a10g-gpustack-worker")
DM = ("nodefeatures", "gpustack-system", "node-a10g-gpustack-device-manager")
DEVICES = ("devices", None, "node-a10g")


@pytest.fixture
def logs():
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(m.record["message"]), level="INFO")
    yield lines
    logger.remove(sink)


def _agent(policy, client, stem="node-a10g", **kw):
    backend = RecordedBackend(recorded(stem))
    return NodeAgent(policy, backend, backend.node, client=client, allocation_source="annotation", **kw), backend


def test_first_pass_creates_everything_then_nothing_changes(policy):
    client = FakeClient(seed_node("node-a10g"))
    agent, _ = _agent(policy, client)
    assert agent.reconcile() is not None
    assert set(client.objects) == {WORKER, DM, DEVICES}
    assert client.objects[DEVICES]["status"]["groups"][0]["accelerators"][0]["remaining"] == 1600000
    assert client.node["metadata"]["annotations"]["feature.gpustack.ai/cpu-name"] == "AMD EPYC 7R32"
    assert client.node["status"]["capacity"]["nvidia.com/gpu.sliced.units"] == "1600k"
    client.calls.clear()
    agent.reconcile()
    assert client.calls == []


def test_managed_false_on_the_nodefeature_survives(policy):
    client = FakeClient(seed_node("node-a10g"))
    agent, _ = _agent(policy, client)
    agent.reconcile()
    client.objects[WORKER]["spec"]["labels"]["gpustack.ai/managed"] = "false"   # seed step 2
    agent.reconcile()
    assert client.objects[WORKER]["spec"]["labels"]["gpustack.ai/managed"] == "false"


def test_settings_are_read_from_the_secret(policy):
    secret = {"data": {"node-management-manual": base64.b64encode(b"true").decode()}}
    client = FakeClient(seed_node("node-a10g"), secret=secret)
    agent, _ = _agent(policy, client)
    agent.reconcile()
    assert "gpustack.ai/managed" not in client.objects[WORKER]["spec"]["labels"]


def test_ledger_from_pod_annotations_and_events_recorded_once(policy):
    pods = [pod("whole", [group("a10g", entry(A10G, 0, 1))], created="1"),
            pod("slice", [group("a10g", entry(A10G, 0, 3, 320000))], created="2"),
            pod("bad", raw="{", created="3")]
    client = FakeClient(seed_node("node-a10g"), pods=pods)
    agent, _ = _agent(policy, client)
    agent.reconcile()
    agent.reconcile()
    assert client.objects[DEVICES]["status"]["groups"][0]["accelerators"][0] == {
        "id": A10G, "index": 0, "mode": 1, "allocated": 1600000}
    assert sorted((k, n, r) for k, n, r, _ in client.events) == [
        ("Devices", "node-a10g", "AllocationConflict"), ("Pod", "bad", "InvalidAllocation")]


def test_driver_failure_keeps_cpu_facts_logs_once_and_recovers(policy, logs):
    client = FakeClient(seed_node("node-a10g"))
    agent, backend = _agent(policy, client)
    agent.reconcile()
    backend.fail("driver", "NVML_ERROR_DRIVER_NOT_LOADED")
    for _ in range(3):
        plan = agent.reconcile()
        assert plan is not None and not plan.accelerators_known
    errors = [line for line in logs if "NVML_ERROR_DRIVER_NOT_LOADED" in line]
    assert len(errors) == 1 and "cause: RuntimeError" in errors[0]
    # CPU facts still published; accelerator objects left as they were
    assert client.objects[WORKER]["spec"]["labels"]["general.feature.gpustack.ai/amd-epyc-7r32"] == "true"
    assert DM in client.objects and DEVICES in client.objects
    backend.recover()
    assert agent.reconcile().accelerators_known
    assert sum("accelerator probe: recovered" in line for line in logs) == 1


def test_gpu_off_the_bus_is_unhealthy_then_returns(policy):
    client = FakeClient(seed_node("node-a10g"))
    agent, backend = _agent(policy, client)
    agent.reconcile()
    backend.lose(A10G)
    agent.reconcile()
    acc = client.objects[DEVICES]["spec"]["groups"][0]["accelerators"][0]
    assert acc["status"]["unhealthy"] is True
    assert client.objects[DEVICES]["status"]["groups"][0]["accelerators"] == []
    assert DM not in client.objects            # no healthy accelerator: no device-manager labels
    assert client.node["status"]["capacity"]["nvidia.com/gpu.sliced.units"] == "0"
    backend.recover()
    agent.reconcile()
    assert client.objects[DEVICES]["spec"]["groups"][0]["accelerators"][0]["status"]["unhealthy"] is False
    assert DM in client.objects


def test_missing_library_on_a_cpu_node_means_no_accelerators(policy, logs):
    client = FakeClient(seed_node("node-cpu"))
    agent, backend = _agent(policy, client, stem="node-cpu")
    backend.fail("library", "NVML Shared Library Not Found")
    agent.reconcile()
    agent.reconcile()
    assert set(client.objects) == {("nodefeatures", "gpustack-system", "node-cpu-gpustack-worker")}
    assert sum("publishing CPU facts only" in line for line in logs) == 1


def test_library_lost_on_a_gpu_node_does_not_delete_devices(policy):
    client = FakeClient(seed_node("node-a10g"))
    agent, backend = _agent(policy, client)
    agent.reconcile()
    backend.fail("library", "NVML Shared Library Not Found")
    agent.reconcile()
    assert DEVICES in client.objects and DM in client.objects


def test_devices_removed_when_no_accelerator_remains_only_if_owned(policy):
    client = FakeClient(seed_node("node-a10g"))
    agent, backend = _agent(policy, client)
    agent.reconcile()
    client.objects[DEVICES]["metadata"]["ownerReferences"] = []      # not ours any more
    backend.document["accelerators"] = []
    agent.reconcile()
    assert DEVICES in client.objects and DM not in client.objects


def test_api_errors_never_escape_the_loop(policy, logs):
    client = FakeClient(seed_node("node-a10g"))
    agent, _ = _agent(policy, client)
    client.fail_with = RuntimeError("apiserver down")
    assert agent.reconcile() is None
    assert agent.reconcile() is None
    assert sum("apiserver down" in line for line in logs) == 1
    client.fail_with = None
    assert agent.reconcile() is not None


def test_allocation_source_resolution(tmp_path):
    sock = tmp_path / "kubelet.sock"
    assert resolve_allocation_source("auto", str(sock)) == "annotation"
    sock.write_text("")
    assert resolve_allocation_source("auto", str(sock)) == "podresources"
    assert resolve_allocation_source("annotation", str(sock)) == "annotation"
    with pytest.raises(ValueError, match="unknown allocation source 'kubelet'"):
        resolve_allocation_source("kubelet", str(sock))


def test_run_loop_reconciles_until_stopped(policy):
    import threading
    client = FakeClient(seed_node("node-a10g"))
    agent, _ = _agent(policy, client)
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
    assert len(passes) == 2 and WORKER in client.objects
