"""The agent's allocations from kubelet's PodResources v1 API (docs/agent.md "The Devices object and its ledger"), on a
real kube-apiserver: the Pods exist there, the agent's annotation patches and Devices ledger land
there, its Events too. The kubelet is tests/agent/test_podresources.py's stand-in gRPC server."""
from __future__ import annotations

import json

import pytest

from probes.fake import load_document, recorded
from tests.agent.helpers import A10G, ALLOCATED, H100, entry, group
from tests.agent.test_podresources import GID, MIG, api_pod, h100_facts_with_mig_device, kubelet, logs  # noqa: F401
from tests.controlplane.agentlive import PODS_NS, events_on, ledger, live, make_agent, pod_annotations  # noqa: F401


def run_agent(make_agent, socket, pods, *, stem="node-a10g", document=None, source="podresources"):
    """One pass of a fresh agent on the seed node of ``stem`` (or ``document``) with ``pods`` bound to it."""
    agent, _ = make_agent(stem, pods=pods, document=document, allocation_source=source, podresources_socket=socket)
    plan = agent.reconcile()
    assert plan is not None
    return agent, plan


def annotation_of(live, name):
    """The Pod's allocation annotation as the server holds it, parsed."""
    return json.loads(pod_annotations(live[0], name)[ALLOCATED])


# docs/agent.md "The Devices object and its ledger" examples, one accelerator each, each allocation reaching the agent through the socket
@pytest.mark.parametrize("resource, device, requests, annotation_entry, ledger_entry", [
    ("nvidia.com/gpu", A10G, {"nvidia.com/gpu": "1"},
     {"mode": 1, "allocated": 1600000}, {"mode": 1, "allocated": 1600000}),
    ("nvidia.com/gpu.shared", f"{A10G}::3", {"nvidia.com/gpu.shared": "1"},
     {"mode": 2, "allocated": 160000}, {"mode": 2, "allocated": 160000, "remaining": 1440000}),
    ("nvidia.com/gpu.sliced", f"{A10G}::0", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": "320k",
                                             "nvidia.com/gpu.sliced.memory-percentage": "20"},
     {"mode": 3, "allocated": 320000}, {"mode": 3, "allocated": 320000, "remaining": 1280000, "allocatedSlices": 1}),
], ids=["exclusive-whole", "shared-with-suffix", "sliced-20pct"])
def test_a10g_allocation_modes(make_agent, live, kubelet, resource, device, requests, annotation_entry, ledger_entry):
    socket, servicer = kubelet([("demo", "p", {"main": [(resource, [device])]})])
    agent, plan = run_agent(make_agent, socket, [api_pod("p", requests)])
    assert servicer.calls == 1
    assert annotation_of(live, "p") == {"main": [{"id": "a10g", "manufacturer": "nvidia", "accelerators": [
        {"id": A10G, "index": 0, **annotation_entry}]}]}
    assert ledger(live[0], "node-a10g") == [{"id": A10G, "index": 0, **ledger_entry}]
    assert plan.events == []


def test_h100_mig_device_maps_to_parent_profile_and_placement(make_agent, live, kubelet):
    socket, _ = kubelet([("demo", "mig", {"main": [("nvidia.com/gpu.partitioned", [MIG])]})])
    requests = {"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.units": "800k",
                "nvidia.com/gpu.partitioned.mig-3g.40gb": "1"}
    _, plan = run_agent(make_agent, socket, [api_pod("mig", requests)], document=h100_facts_with_mig_device())
    assert annotation_of(live, "mig") == {"main": [{"id": GID, "manufacturer": "nvidia", "accelerators": [
        {"id": H100.format(0), "index": 0, "mode": 4, "allocated": 800000, "allocatedPhysicalProfile": "3g.40gb",
         "allocatedPhysicalPlacements": [{"start": 0, "length": 4}]}]}]}
    assert ledger(live[0], "node-h100")[0] == {
        "id": H100.format(0), "index": 0, "mode": 4, "allocated": 800000, "remaining": 800000,
        "allocatedProfiles": [{"name": "3g.40gb", "count": 1}],
        "remainingProfiles": [{"name": "1g.10gb", "count": 3}, {"name": "1g.20gb", "count": 2},
                              {"name": "2g.20gb", "count": 1}, {"name": "3g.40gb", "count": 1},
                              {"name": "4g.40gb", "count": 0}, {"name": "7g.80gb", "count": 0}]}
    assert ledger(live[0], "node-h100")[1]["mode"] == 0
    assert plan.events == []


def test_partition_without_a_known_mig_device_takes_the_profile_from_the_request(make_agent, live, kubelet):
    # the device ID names the parent accelerator; no MIG device in the facts: profile from the
    # container's per-profile key, no placement (the ledger takes the lowest free one, docs/agent.md "The Devices object and its ledger")
    socket, _ = kubelet([("demo", "mig", {"main": [("nvidia.com/gpu.partitioned", [f"{H100.format(2)}::1"])]})])
    requests = {"nvidia.com/gpu.partitioned.units": "200k", "nvidia.com/gpu.partitioned.mig-1g.10gb": "1"}
    run_agent(make_agent, socket, [api_pod("mig", requests)], stem="node-h100-mig-on")
    assert annotation_of(live, "mig")["main"][0]["accelerators"] == [
        {"id": H100.format(2), "index": 2, "mode": 4, "allocated": 200000, "allocatedPhysicalProfile": "1g.10gb"}]
    acc = ledger(live[0], "node-h100")[2]
    assert (acc["mode"], acc["allocated"], acc["remaining"]) == (4, 200000, 1400000)
    assert acc["allocatedProfiles"] == [{"name": "1g.10gb", "count": 1}]


def test_unknown_device_id_is_ignored_with_an_invalid_allocation_event(make_agent, live, kubelet):
    socket, _ = kubelet([("demo", "p", {"main": [("nvidia.com/gpu", ["GPU-not-on-this-node", A10G])]})])
    _, plan = run_agent(make_agent, socket, [api_pod("p", {"nvidia.com/gpu": "2"})])
    assert annotation_of(live, "p")["main"][0]["accelerators"] == [
        {"id": A10G, "index": 0, "mode": 1, "allocated": 1600000}]
    assert [(e.kind, e.namespace, e.name, e.reason) for e in plan.events] == [("Pod", "demo", "p", "InvalidAllocation")]
    assert plan.events[0].message == ("PodResources: container main: nvidia.com/gpu device GPU-not-on-this-node is "
                                      "no accelerator of nvidia on node node-a10g; ignored")
    assert events_on(live[0], PODS_NS, "p") == [("Pod", "p", "InvalidAllocation", plan.events[0].message, 1)]


def test_sliced_device_without_a_units_request_is_ignored(make_agent, live, kubelet):
    socket, _ = kubelet([("demo", "p", {"main": [("nvidia.com/gpu.sliced", [A10G])]})])
    _, plan = run_agent(make_agent, socket, [api_pod("p", {"nvidia.com/gpu.sliced": "1"})])
    assert ALLOCATED not in pod_annotations(live[0], "p")
    assert ledger(live[0], "node-a10g") == [{"id": A10G, "index": 0, "mode": 0, "remaining": 1600000}]
    assert plan.events[0].message == (
        "PodResources: container main: nvidia.com/gpu.sliced device " + A10G + " needs the container's "
        "nvidia.com/gpu.sliced.units request as an integer in 1..1600000, got None; ignored")


def test_agent_patches_only_pods_whose_annotation_differs(make_agent, live, kubelet):
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
    agent, plan = run_agent(make_agent, socket, pods, stem="node-t4-b")
    assert [(o["metadata"]["name"], o["metadata"]["annotations"][ALLOCATED]) for o in plan.objects()
            if o["kind"] == "Pod"] == [
        ("p-missing", '{"main":[{"id":"tesla-t4","manufacturer":"nvidia","accelerators":[{"id":"%s","index":1,'
                      '"mode":2,"allocated":160000}]}]}' % ids[1]),
        ("p-stale", '{"main":[{"id":"tesla-t4","manufacturer":"nvidia","accelerators":[{"id":"%s","index":2,'
                    '"mode":1,"allocated":1600000}]}]}' % ids[2])]
    assert [(w.verb, w.namespace, w.name) for w in agent.cluster.applier.writes if w.kind == "Pod"] == [
        ("patch", "demo", "p-missing"), ("patch", "demo", "p-stale")]
    assert annotation_of(live, "p-same") == same
    assert annotation_of(live, "p-missing") == {"main": [group(gid, entry(ids[1], 1, 2, 160000))]}
    assert annotation_of(live, "p-stale") == {"main": [group(gid, entry(ids[2], 2, 1, 1600000))]}
    assert ALLOCATED not in pod_annotations(live[0], "no-devices")
    assert [(a["index"], a["mode"], a.get("allocated"), a.get("remaining")) for a in ledger(live[0], "node-t4-b")] == [
        (0, 1, 1600000, None), (1, 2, 160000, 1440000), (2, 1, 1600000, None), (3, 0, None, 1600000)]
    before = len(agent.cluster.applier.writes)
    agent.reconcile()
    assert servicer.calls == 2
    assert len(agent.cluster.applier.writes) == before


def test_podresources_socket_missing_logs_once_and_keeps_the_annotations(make_agent, live, tmp_path, logs):
    missing = str(tmp_path / "absent.sock")
    pods = [api_pod("p", annotation={"main": [group("a10g", entry(A10G, 0, 3, 320000))]})]
    agent, _ = run_agent(make_agent, missing, pods)
    agent.reconcile()
    errors = [m for level, m in logs if level == "ERROR"]
    assert errors == [f"allocations: --allocation-source podresources: the kubelet PodResources socket {missing} "
                      "does not exist; the ledger is rebuilt from the Pods' allocation annotations until it appears"]
    assert ledger(live[0], "node-a10g")[0]["allocated"] == 320000


def test_auto_without_socket_falls_back_at_info_then_uses_it_when_it_appears(make_agent, live, tmp_path, kubelet, logs):
    sock = tmp_path / "kubelet.sock"
    pods = [api_pod("p", {"nvidia.com/gpu": "1"})]
    agent, _ = run_agent(make_agent, str(sock), pods, source="auto")
    assert agent.allocation_source == "annotation"
    assert [lv for lv, m in logs if m.startswith("allocations:")] == ["INFO"]
    assert ledger(live[0], "node-a10g")[0]["mode"] == 0
    kubelet([("demo", "p", {"main": [("nvidia.com/gpu", [A10G])]})])
    assert agent.allocation_source == "podresources"
    agent.reconcile()
    assert ledger(live[0], "node-a10g")[0] == {"id": A10G, "index": 0, "mode": 1, "allocated": 1600000}
    assert ("INFO", "allocations: recovered") in logs
