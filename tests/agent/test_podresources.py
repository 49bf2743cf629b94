"""Allocations from kubelet's PodResources v1 API (docs/agent.md "The Devices object and its ledger").

The kubelet here is a stand-in: a real grpcio server bound to a unix socket under ``tmp_path`` that
implements ``v1.PodResourcesLister`` (the generated servicer of runtime/kube/podresources) and answers
``List`` with recorded responses built below. The agent talks to it through the same client code it
uses against a real kubelet socket.
"""
from __future__ import annotations

import copy
import json
from concurrent import futures

import grpc
import pytest
from loguru import logger

from probes.fake import load_document, recorded
from runtime.engine.devices.podresources import pod_allocations
from runtime.kube.podresources import PodResourcesError, api_pb2, api_pb2_grpc, list_pod_resources
from tests import builders
from tests.agent.helpers import A10G, ALLOCATED, H100

GID = "h100-80gb-hbm3"
MIG = "MIG-5c1a3a36-0d6a-5d8f-9b1e-3f0c2d1e4a10"   # a MIG device on H100 index 0 (probe facts below)


class StandInKubelet(api_pb2_grpc.PodResourcesListerServicer):
    """Answers ``List`` with ``self.pods``: ``[(namespace, name, {container: [(resource, [ids])]})]``."""

    def __init__(self, pods):
        self.pods = pods
        self.calls = 0

    def List(self, request, context):  # noqa: N802 - gRPC method name
        self.calls += 1
        reply = api_pb2.ListPodResourcesResponse()
        for ns, name, containers in self.pods:
            pr = reply.pod_resources.add(name=name, namespace=ns)
            for cname, devices in containers.items():
                ctr = pr.containers.add(name=cname)
                for resource, ids in devices:
                    ctr.devices.add(resource_name=resource, device_ids=ids)
        return reply


@pytest.fixture
def kubelet(tmp_path):
    """start(pods) -> (socket path, servicer): a stand-in kubelet serving PodResources on a unix socket."""
    servers = []

    def start(pods):
        sock = tmp_path / "kubelet.sock"
        servicer = StandInKubelet(pods)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(servicer, server)
        server.add_insecure_port(f"unix://{sock}")
        server.start()
        servers.append(server)
        return str(sock), servicer

    yield start
    for server in servers:
        server.stop(None)


@pytest.fixture
def logs():
    lines: list[tuple[str, str]] = []
    sink = logger.add(lambda m: lines.append((m.record["level"].name, m.record["message"])), level="INFO")
    yield lines
    logger.remove(sink)


def api_pod(name, requests=None, *, annotation=None, container="main", created="2026-01-01T00:00:00Z"):
    """A Running Pod as the API lists it, with the container's resource requests and an optional annotation."""
    annotations = None
    if annotation is not None:
        annotations = {ALLOCATED: annotation if isinstance(annotation, str) else json.dumps(annotation)}
    return builders.pod(name, "demo", created=created, annotations=annotations, phase="Running",
                        containers=[builders.container(container, requests=dict(requests or {}))])


def h100_facts_with_mig_device() -> dict:
    """node-h100-mig-on with one existing 3g.40gb MIG device at memory slices 0-3 on accelerator 0."""
    doc = copy.deepcopy(load_document(recorded("node-h100-mig-on")))
    doc["accelerators"][0]["migDevices"] = [{"uuid": MIG, "profile": "MIG 3g.40gb", "placement": {"start": 0, "length": 4}}]
    return doc
























def test_list_on_a_socket_nobody_serves_raises_podresources_error(tmp_path):
    with pytest.raises(PodResourcesError, match=r"PodResources List on unix://.*nobody\.sock failed: StatusCode\.UNAVAILABLE"):
        list_pod_resources(str(tmp_path / "nobody.sock"), timeout=2)


def test_list_returns_camel_case_dicts(kubelet):
    socket, _ = kubelet([("demo", "p", {"main": [("nvidia.com/gpu", [A10G])]})])
    assert list_pod_resources(socket) == [{"name": "p", "namespace": "demo", "containers": [
        {"name": "main", "devices": [{"resourceName": "nvidia.com/gpu", "deviceIds": [A10G]}]}]}]


@pytest.mark.parametrize("requests, message", [
    ({"nvidia.com/gpu.partitioned.units": "200k"},
     "has no known partition profile (no MIG device in the probe facts, and not exactly one "
     "nvidia.com/gpu.partitioned.mig-* request); ignored"),
    ({"nvidia.com/gpu.partitioned.units": "200k", "nvidia.com/gpu.partitioned.mig-1g.10gb": "1",
      "nvidia.com/gpu.partitioned.mig-3g.40gb": "1"},
     "has no known partition profile (no MIG device in the probe facts, and not exactly one "
     "nvidia.com/gpu.partitioned.mig-* request); ignored"),
    ({"nvidia.com/gpu.partitioned.units": "1500m", "nvidia.com/gpu.partitioned.mig-1g.10gb": "1"},
     "needs the container's nvidia.com/gpu.partitioned.units request as an integer in 1..1600000, got '1500m'; ignored"),
    ({"nvidia.com/gpu.partitioned.units": "2M", "nvidia.com/gpu.partitioned.mig-1g.10gb": "1"},
     "needs the container's nvidia.com/gpu.partitioned.units request as an integer in 1..1600000, got '2M'; ignored"),
], ids=["no-profile", "two-profiles", "fractional-units", "units-above-D"])
def test_partition_devices_that_cannot_be_charged_are_reported(policy, plan, requests, message):
    spec = plan("node-h100-mig-on").devices["spec"]
    prs = [{"name": "p", "namespace": "demo",
            "containers": [{"name": "main", "devices": [{"resourceName": "nvidia.com/gpu.partitioned",
                                                         "deviceIds": [H100.format(0)]}]}]}]
    docs, events = pod_allocations(policy, "node-h100", spec, prs, [api_pod("p", requests)])
    assert docs == {}
    assert [(e.reason, e.name) for e in events] == [("InvalidAllocation", "p")]
    assert events[0].message == (f"PodResources: container main: nvidia.com/gpu.partitioned device {H100.format(0)} "
                                 + message)


def test_visibility_and_unknown_keys_are_not_allocations(policy, plan):
    spec = plan("node-a10g").devices["spec"]
    prs = [{"name": "p", "namespace": "demo", "containers": [{"name": "ssh", "devices": [
        {"resourceName": "device.gpustack.ai/nvidia.visibility", "deviceIds": [A10G]},
        {"resourceName": "device.gpustack.ai/rdma", "deviceIds": ["mlx5_0"]}]}]}]
    assert pod_allocations(policy, "node-a10g", spec, prs, [api_pod("p", container="ssh")]) == ({}, [])
