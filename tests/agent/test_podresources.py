"""Allocations from kubelet's PodResources v1 API (spec/node-facts.md §7.4-§7.5).

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

from probes.fake import RecordedBackend, load_document, recorded
from runtime.agent.runner import NodeAgent
from runtime.engine.devices.podresources import pod_allocations
from runtime.kube.podresources import PodResourcesError, api_pb2, api_pb2_grpc, list_pod_resources
from tests.agent.conftest import seed_node
from tests.agent.fakeclient import FakeClient
from tests.agent.helpers import A10G, ALLOCATED, H100, entry, group, pod

GID = "h100-80gb-hbm3"
MIG = "MIG-5c1a3a36-0d6a-5d8f-9b1e-3f0c2d1e4a10"   # a MIG device on H100 index 0 (probe facts below)
DEVICES = ("devices", None)


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
    meta = {"name": name, "namespace": "demo", "creationTimestamp": created}
    if annotation is not None:
        meta["annotations"] = {ALLOCATED: annotation if isinstance(annotation, str) else json.dumps(annotation)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": container, "resources": {"requests": dict(requests or {})}}]},
            "status": {"phase": "Running"}}


def h100_facts_with_mig_device() -> dict:
    """node-h100-mig-on with one existing 3g.40gb MIG device at memory slices 0-3 on accelerator 0."""
    doc = copy.deepcopy(load_document(recorded("node-h100-mig-on")))
    doc["accelerators"][0]["migDevices"] = [{"uuid": MIG, "profile": "MIG 3g.40gb", "placement": {"start": 0, "length": 4}}]
    return doc


def run_agent(policy, socket, pods, *, stem="node-a10g", document=None, source="podresources"):
    backend = RecordedBackend(document=document) if document is not None else RecordedBackend(recorded(stem))
    client = FakeClient(seed_node(backend.node), pods=pods)
    agent = NodeAgent(policy, backend, backend.node, client=client, allocation_source=source,
                      podresources_socket=socket)
    plan = agent.reconcile()
    assert plan is not None
    return agent, client, plan


def annotation_of(client, name):
    for p in client.pods:
        if p["metadata"]["name"] == name:
            return json.loads(p["metadata"]["annotations"][ALLOCATED])
    raise LookupError(name)


def ledger(client, node):
    return client.objects[(*DEVICES, node)]["status"]["groups"][0]["accelerators"]


# §7.3 examples, one accelerator each, each allocation reaching the agent through the socket
@pytest.mark.parametrize("resource, device, requests, annotation_entry, ledger_entry", [
    ("nvidia.com/gpu", A10G, {"nvidia.com/gpu": "1"},
     {"mode": 1, "allocated": 1600000}, {"mode": 1, "allocated": 1600000}),
    ("nvidia.com/gpu.shared", f"{A10G}::3", {"nvidia.com/gpu.shared": "1"},
     {"mode": 2, "allocated": 160000}, {"mode": 2, "allocated": 160000, "remaining": 1440000}),
    ("nvidia.com/gpu.sliced", f"{A10G}::0", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": "320k",
                                             "nvidia.com/gpu.sliced.memory-percentage": "20"},
     {"mode": 3, "allocated": 320000}, {"mode": 3, "allocated": 320000, "remaining": 1280000, "allocatedSlices": 1}),
], ids=["exclusive-whole", "shared-with-suffix", "sliced-20pct"])
def test_a10g_allocation_modes(policy, kubelet, resource, device, requests, annotation_entry, ledger_entry):
    socket, servicer = kubelet([("demo", "p", {"main": [(resource, [device])]})])
    agent, client, plan = run_agent(policy, socket, [api_pod("p", requests)])
    assert servicer.calls == 1
    assert annotation_of(client, "p") == {"main": [{"id": "a10g", "manufacturer": "nvidia", "accelerators": [
        {"id": A10G, "index": 0, **annotation_entry}]}]}
    assert ledger(client, "node-a10g") == [{"id": A10G, "index": 0, **ledger_entry}]
    assert plan.events == []


def test_h100_mig_device_maps_to_parent_profile_and_placement(policy, kubelet):
    socket, _ = kubelet([("demo", "mig", {"main": [("nvidia.com/gpu.partitioned", [MIG])]})])
    requests = {"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.units": "800k",
                "nvidia.com/gpu.partitioned.mig-3g.40gb": "1"}
    _, client, plan = run_agent(policy, socket, [api_pod("mig", requests)], document=h100_facts_with_mig_device())
    assert annotation_of(client, "mig") == {"main": [{"id": GID, "manufacturer": "nvidia", "accelerators": [
        {"id": H100.format(0), "index": 0, "mode": 4, "allocated": 800000, "allocatedPhysicalProfile": "3g.40gb",
         "allocatedPhysicalPlacements": [{"start": 0, "length": 4}]}]}]}
    assert ledger(client, "node-h100")[0] == {
        "id": H100.format(0), "index": 0, "mode": 4, "allocated": 800000, "remaining": 800000,
        "allocatedProfiles": [{"name": "3g.40gb", "count": 1}],
        "remainingProfiles": [{"name": "1g.10gb", "count": 3}, {"name": "1g.20gb", "count": 2},
                              {"name": "2g.20gb", "count": 1}, {"name": "3g.40gb", "count": 1},
                              {"name": "4g.40gb", "count": 0}, {"name": "7g.80gb", "count": 0}]}
    assert ledger(client, "node-h100")[1]["mode"] == 0
    assert plan.events == []


def test_partition_without_a_known_mig_device_takes_the_profile_from_the_request(policy, kubelet):
    # the device ID names the parent accelerator; no MIG device in the facts: profile from the
    # container's per-profile key, no placement (the ledger takes the lowest free one, §7.6 step 3)
    socket, _ = kubelet([("demo", "mig", {"main": [("nvidia.com/gpu.partitioned", [f"{H100.format(2)}::1"])]})])
    requests = {"nvidia.com/gpu.partitioned.units": "200k", "nvidia.com/gpu.partitioned.mig-1g.10gb": "1"}
    _, client, _ = run_agent(policy, socket, [api_pod("mig", requests)], stem="node-h100-mig-on")
    assert annotation_of(client, "mig")["main"][0]["accelerators"] == [
        {"id": H100.format(2), "index": 2, "mode": 4, "allocated": 200000, "allocatedPhysicalProfile": "1g.10gb"}]
    acc = ledger(client, "node-h100")[2]
    assert (acc["mode"], acc["allocated"], acc["remaining"]) == (4, 200000, 1400000)
    assert acc["allocatedProfiles"] == [{"name": "1g.10gb", "count": 1}]


def test_unknown_device_id_is_ignored_with_an_invalid_allocation_event(policy, kubelet):
    socket, _ = kubelet([("demo", "p", {"main": [("nvidia.com/gpu", ["GPU-not-on-this-node", A10G])]})])
    _, client, plan = run_agent(policy, socket, [api_pod("p", {"nvidia.com/gpu": "2"})])
    assert annotation_of(client, "p")["main"][0]["accelerators"] == [
        {"id": A10G, "index": 0, "mode": 1, "allocated": 1600000}]
    assert [(e.kind, e.namespace, e.name, e.reason) for e in plan.events] == [("Pod", "demo", "p", "InvalidAllocation")]
    assert plan.events[0].message == ("PodResources: container main: nvidia.com/gpu device GPU-not-on-this-node is "
                                      "no accelerator of nvidia on node node-a10g; ignored")
    assert client.events == [("Pod", "p", "InvalidAllocation", plan.events[0].message)]


def test_sliced_device_without_a_units_request_is_ignored(policy, kubelet):
    socket, _ = kubelet([("demo", "p", {"main": [("nvidia.com/gpu.sliced", [A10G])]})])
    _, client, plan = run_agent(policy, socket, [api_pod("p", {"nvidia.com/gpu.sliced": "1"})])
    assert ALLOCATED not in (client.pods[0]["metadata"].get("annotations") or {})
    assert ledger(client, "node-a10g") == [{"id": A10G, "index": 0, "mode": 0, "remaining": 1600000}]
    assert plan.events[0].message == (
        "PodResources: container main: nvidia.com/gpu.sliced device " + A10G + " needs the container's "
        "nvidia.com/gpu.sliced.units request as an integer in 1..1600000, got None; ignored")


def test_agent_patches_only_pods_whose_annotation_differs(policy, kubelet):
    # node-t4-b: four T4s; three Pods on three of them
    facts = load_document(recorded("node-t4-b"))
    ids = [a["uuid"] for a in facts["accelerators"]]
    gid = "tesla-t4"
    same = {"main": [group(gid, entry(ids[0], 0, 1, 1600000))]}
    pods = [api_pod("p-same", {"nvidia.com/gpu": "1"}, annotation=same, created="2026-01-01T00:00:00Z"),
            api_pod("p-missing", {"nvidia.com/gpu.shared": "1"}, created="2026-01-01T00:00:01Z"),
            api_pod("p-stale", {"nvidia.com/gpu": "1"}, annotation={"main": [group(gid, entry(ids[3], 3, 1))]},
                    created="2026-01-01T00:00:02Z"),
            api_pod("no-devices", {"cpu": "1"})]
    socket, servicer = kubelet([
        ("demo", "p-same", {"main": [("nvidia.com/gpu", [ids[0]])]}),
        ("demo", "p-missing", {"main": [("nvidia.com/gpu.shared", [f"{ids[1]}::7"]), ("cpu", [])]}),
        ("demo", "p-stale", {"main": [("nvidia.com/gpu", [ids[2]])]}),
        ("demo", "no-devices", {"main": []}),
        ("kube-system", "not-listed-by-the-api", {"main": [("nvidia.com/gpu", [ids[3]])]}),
    ])
    agent, client, plan = run_agent(policy, socket, pods, stem="node-t4-b")
    assert [(o["metadata"]["name"], o["metadata"]["annotations"][ALLOCATED]) for o in plan.objects()
            if o["kind"] == "Pod"] == [
        ("p-missing", '{"main":[{"id":"tesla-t4","manufacturer":"nvidia","accelerators":[{"id":"%s","index":1,'
                      '"mode":2,"allocated":160000}]}]}' % ids[1]),
        ("p-stale", '{"main":[{"id":"tesla-t4","manufacturer":"nvidia","accelerators":[{"id":"%s","index":2,'
                    '"mode":1,"allocated":1600000}]}]}' % ids[2])]
    assert [c for c in client.calls if c.startswith("annotate pod")] == ["annotate pod demo/p-missing",
                                                                         "annotate pod demo/p-stale"]
    assert annotation_of(client, "p-same") == same
    assert annotation_of(client, "p-missing") == {"main": [group(gid, entry(ids[1], 1, 2, 160000))]}
    assert annotation_of(client, "p-stale") == {"main": [group(gid, entry(ids[2], 2, 1, 1600000))]}
    assert ALLOCATED not in (client.pods[3]["metadata"].get("annotations") or {})
    assert [(a["index"], a["mode"], a.get("allocated"), a.get("remaining")) for a in ledger(client, "node-t4-b")] == [
        (0, 1, 1600000, None), (1, 2, 160000, 1440000), (2, 1, 1600000, None), (3, 0, None, 1600000)]
    client.calls.clear()
    agent.reconcile()
    assert servicer.calls == 2
    assert client.calls == []


def test_podresources_socket_missing_logs_once_and_keeps_the_annotations(policy, tmp_path, logs):
    missing = str(tmp_path / "absent.sock")
    pods = [api_pod("p", annotation={"main": [group("a10g", entry(A10G, 0, 3, 320000))]})]
    agent, client, _ = run_agent(policy, missing, pods)
    agent.reconcile()
    errors = [m for level, m in logs if level == "ERROR"]
    assert errors == [f"allocations: --allocation-source podresources: the kubelet PodResources socket {missing} "
                      "does not exist; the ledger is rebuilt from the Pods' allocation annotations until it appears"]
    assert ledger(client, "node-a10g")[0]["allocated"] == 320000


def test_auto_without_socket_falls_back_at_info_then_uses_it_when_it_appears(policy, tmp_path, kubelet, logs):
    sock = tmp_path / "kubelet.sock"
    pods = [api_pod("p", {"nvidia.com/gpu": "1"})]
    agent, client, _ = run_agent(policy, str(sock), pods, source="auto")
    assert agent.allocation_source == "annotation"
    assert [lv for lv, m in logs if m.startswith("allocations:")] == ["INFO"]
    assert ledger(client, "node-a10g")[0]["mode"] == 0
    kubelet([("demo", "p", {"main": [("nvidia.com/gpu", [A10G])]})])
    assert agent.allocation_source == "podresources"
    agent.reconcile()
    assert ledger(client, "node-a10g")[0] == {"id": A10G, "index": 0, "mode": 1, "allocated": 1600000}
    assert ("INFO", "allocations: recovered") in logs


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
