"""The device-plugin stand-in's gRPC side without a cluster: a Registration server standing in for the
kubelet's ``kubelet.sock`` records what the stand-in registers; the test then calls the stand-in the
way the kubelet does (ListAndWatch, Allocate) over its unix socket."""
from __future__ import annotations

import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from kind_deviceplugin import api_pb2, api_pb2_grpc
from kind_deviceplugin.plugin import DevicePluginStandIn, env_name

pytestmark = pytest.mark.kind

DEVICES = {"nvidia.com/gpu": ["GPU-a", "GPU-b"], "nvidia.com/gpu.shared": [f"GPU-a::{n}" for n in range(3)]}


class Kubelet(api_pb2_grpc.RegistrationServicer):
    def __init__(self):
        self.requests: list[api_pb2.RegisterRequest] = []
        self.lock = threading.Lock()

    def Register(self, request, context):
        with self.lock:
            self.requests.append(request)
        return api_pb2.Empty()


@pytest.fixture
def plugin_dir():
    with tempfile.TemporaryDirectory(prefix="kdp", dir="/tmp") as d:
        yield Path(d)


@pytest.fixture
def kubelet(plugin_dir):
    servicer = Kubelet()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    api_pb2_grpc.add_RegistrationServicer_to_server(servicer, server)
    server.add_insecure_port(f"unix://{plugin_dir / 'kubelet.sock'}")
    server.start()
    yield servicer
    server.stop(grace=None)


def test_registers_each_resource_and_serves_kubelet_calls(plugin_dir, kubelet):
    standin = DevicePluginStandIn(plugin_dir, DEVICES)
    standin.start()
    try:
        assert sorted((r.version, r.endpoint, r.resource_name) for r in kubelet.requests) == [
            ("v1beta1", "nvidia.com_gpu.shared.sock", "nvidia.com/gpu.shared"),
            ("v1beta1", "nvidia.com_gpu.sock", "nvidia.com/gpu")]
        with grpc.insecure_channel(f"unix://{plugin_dir / 'nvidia.com_gpu.sock'}") as channel:
            stub = api_pb2_grpc.DevicePluginStub(channel)
            stream = stub.ListAndWatch(api_pb2.Empty(), timeout=5)
            first = next(stream)
            assert [(d.ID, d.health) for d in first.devices] == [("GPU-a", "Healthy"), ("GPU-b", "Healthy")]
            stream.cancel()
            reply = stub.Allocate(api_pb2.AllocateRequest(container_requests=[
                api_pb2.ContainerAllocateRequest(devices_ids=["GPU-b"])]), timeout=5)
            assert [dict(r.envs) for r in reply.container_responses] == [{env_name("nvidia.com/gpu"): "GPU-b"}]
            with pytest.raises(grpc.RpcError) as refused:
                stub.Allocate(api_pb2.AllocateRequest(container_requests=[
                    api_pb2.ContainerAllocateRequest(devices_ids=["GPU-z"])]), timeout=5)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert refused.value.details() == "nvidia.com/gpu: Allocate asked for unknown device IDs ['GPU-z']"
        assert standin.allocations == {"nvidia.com/gpu": [["GPU-b"]]}
        assert env_name("nvidia.com/gpu.shared") == "ACCELPOLICY_DEVICES_NVIDIA_COM_GPU_SHARED"
    finally:
        standin.stop()
    assert not (plugin_dir / "nvidia.com_gpu.sock").exists()


def test_registers_again_when_the_kubelet_removes_its_socket(plugin_dir, kubelet):
    standin = DevicePluginStandIn(plugin_dir, {"nvidia.com/gpu": ["GPU-a"]})
    standin.start(watch_interval=0.1)
    try:
        (plugin_dir / "nvidia.com_gpu.sock").unlink()      # what a restarting kubelet does
        for _ in range(100):
            if standin.reregistrations >= 1:
                break
            time.sleep(0.1)
        assert standin.reregistrations >= 1
        assert [r.resource_name for r in kubelet.requests] == ["nvidia.com/gpu", "nvidia.com/gpu"]
        assert (plugin_dir / "nvidia.com_gpu.sock").exists()
    finally:
        standin.stop()


def test_a_long_plugin_dir_is_refused(tmp_path):
    long_dir = tmp_path / ("x" * 90)
    long_dir.mkdir()
    standin = DevicePluginStandIn(long_dir, {"nvidia.com/gpu": ["GPU-a"]})
    with pytest.raises(ValueError, match="longer than the 107 bytes of a unix socket path"):
        standin.start()
