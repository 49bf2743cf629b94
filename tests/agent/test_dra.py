"""Accelerators from ResourceSlices (docs/concepts/dra.md "Accelerators from DRA drivers"): the reader of rules/dra.yaml's NVIDIA row,
the agent's `dra` backend and its cluster-less dry run, and the ledger from ResourceClaims (docs/concepts/dra.md "The ledger from claims")."""
from __future__ import annotations

import copy
import json

import pytest
import yaml
from click.testing import CliRunner

from probes.fake import recorded
from runtime.agent.dra import AutoBackend, DraBackend, auto_fallback, publishes_for, slices_from_file
from runtime.cli import main
from runtime.engine.devices.agentplan import plan_node
from runtime.engine.devices.draclaims import claim_pod_resources
from runtime.engine.devices.draslices import read_node
from runtime.model.facts import parse_facts
from tests.agent.conftest import facts, fixture_object, seed_node
from tests.builders import container, pod
from tests.seedfiles import FIXTURES

DRA = FIXTURES / "dra"
SLICE_FILE = DRA / "node-a10g-resourceslice.yaml"
CPUINFO = DRA / "node-a10g-cpuinfo.txt"
A10G = "GPU-e0587d2e-127c-4fb8-e2c1-6e517529f575"
ALLOCATED = "device.gpustack.ai/accelerator.allocated"


def a10g_slice() -> dict:
    return yaml.safe_load(SLICE_FILE.read_text())


def gpu(name: str, uuid: str, product: str = "NVIDIA A10G", memory: str = "23028Mi", **attrs) -> dict:
    """One gpu.nvidia.com whole-GPU device as the driver publishes it."""
    attributes = {"type": {"string": "gpu"}, "uuid": {"string": uuid}, "productName": {"string": product},
                  "cudaComputeCapability": {"version": "8.6.0"}, "driverVersion": {"version": "580.159.3"},
                  "cudaDriverVersion": {"version": "13.0.0"}}
    attributes.update(attrs)
    return {"name": name, "attributes": attributes, "capacity": {"memory": {"value": memory}}}


def mig(name: str, parent: str, profile: str, memory: str = "9856Mi") -> dict:
    return {"name": name, "attributes": {"type": {"string": "mig"}, "parentUUID": {"string": parent},
                                         "profile": {"string": profile}, "uuid": {"string": f"MIG-{name}"},
                                         "productName": {"string": "NVIDIA H100 80GB HBM3"}},
            "capacity": {"memory": {"value": memory}}}


def slice_of(node: str, devices: list[dict], driver: str = "gpu.nvidia.com", generation: int = 1,
             name: str | None = None) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": name or f"{node}-{driver}-x"},
            "spec": {"driver": driver, "nodeName": node, "pool": {"name": node, "generation": generation,
                                                                  "resourceSliceCount": 1},
                     "devices": devices}}


# --- the NVIDIA row (docs/concepts/dra.md "Two kinds of accelerator node" and "The same GPUs give the same labels") ---
def test_the_a10g_slice_reads_as_nvmls_facts(policy):
    reading = read_node(policy, "node-a10g", [a10g_slice()])
    assert reading.accelerators == [{
        "manufacturer": "nvidia", "uuid": A10G, "name": "NVIDIA A10G", "memoryMib": 23028, "eccReserved": True,
        "healthy": True, "computeCapability": [8, 6], "driverVersion": "580.159.03", "cudaDriverVersion": 13000,
        "dra": {"driver": "gpu.nvidia.com", "pool": "node-a10g", "device": "gpu-0"}, "index": 0, "minor": 0}]
    assert reading.devices == {("gpu.nvidia.com", "node-a10g", "gpu-0"): A10G}
    assert (reading.warnings, reading.notes, reading.partitioned) == ([], [], {})
    assert reading.slices == ["node-a10g-gpu.nvidia.com-lk9xq"] and reading.drivers == ["gpu.nvidia.com"]


def test_index_is_the_uuid_order_unless_published_and_minor_follows_it(policy):
    devices = [gpu("gpu-7", "GPU-c"), gpu("gpu-3", "GPU-a"), gpu("gpu-5", "GPU-b", index={"int": 0}, minor={"int": 5})]
    reading = read_node(policy, "n", [slice_of("n", devices)])
    assert [(a["uuid"], a["index"], a["minor"]) for a in reading.accelerators] == [
        ("GPU-b", 0, 5), ("GPU-a", 1, 1), ("GPU-c", 2, 2)]


@pytest.mark.parametrize("product, published, mib", [
    ("NVIDIA A10G", "23028Mi", 23028),      # GDDR: the ECC rule as if on -> 24563 MiB -> 24Gi (docs/concepts/dra.md "The same GPUs give the same labels")
    ("Tesla T4", "15360Mi", 15360),         # -> 16384 -> 16Gi
    ("NVIDIA H100 80GB HBM3", "81559Mi", 81559),   # HBM: as published -> 80Gi
    ("NVIDIA A100-SXM4-40GB", "40960Mi", 40960),   # "NVIDIA A10" does not match "NVIDIA A100..."
])
def test_memory_groups_as_nvml_would(policy, defaults, product, published, mib):
    reading = read_node(policy, "n", [slice_of("n", [gpu("gpu-0", "GPU-x", product, published)])])
    (acc,) = reading.accelerators
    assert acc["memoryMib"] == mib
    plan = plan_node(policy, parse_facts({"node": "n", "accelerators": reading.accelerators}), seed_node("n", cpu="4"),
                     defaults)
    memory = {k: v for k, v in plan.device_manager["spec"]["labels"].items() if k.endswith(".memory")}
    want = {"NVIDIA A10G": "24Gi", "Tesla T4": "16Gi", "NVIDIA H100 80GB HBM3": "80Gi",
            "NVIDIA A100-SXM4-40GB": "40Gi"}[product]
    assert list(memory.values()) == [want]
    assert plan.devices["spec"]["groups"][0]["memory"] == {"NVIDIA A10G": 24563, "Tesla T4": 16384}.get(product, mib)


def test_only_the_newest_pool_generation_of_the_nodes_configured_drivers_is_read(policy):
    old = slice_of("node-a10g", [gpu("gpu-9", "GPU-old")], generation=1, name="old")
    new = copy.deepcopy(a10g_slice())
    new["spec"]["pool"]["generation"] = 2
    other_node = slice_of("node-t4-a", [gpu("gpu-0", "GPU-t4", "Tesla T4", "15360Mi")])
    foreign = slice_of("node-a10g", [gpu("gpu-1", "GPU-foreign")], driver="gpu.example.com")
    reading = read_node(policy, "node-a10g", [old, new, other_node, foreign])
    assert [a["uuid"] for a in reading.accelerators] == [A10G]
    assert reading.notes == ["ResourceSlice old: pool gpu.nvidia.com/node-a10g generation 1 is older than 2; ignored"]
    assert read_node(policy, "node-x", [new]).drivers == []


def test_an_unreadable_device_costs_only_that_device(policy):
    bad = gpu("gpu-1", "GPU-bad", cudaComputeCapability={"string": "eight"})
    no_memory = gpu("gpu-2", "GPU-nomem")
    del no_memory["capacity"]
    reading = read_node(policy, "node-a10g", [slice_of("node-a10g", [a10g_slice()["spec"]["devices"][0], bad, no_memory])])
    assert [a["uuid"] for a in reading.accelerators] == [A10G]
    assert reading.warnings == [
        "Node node-a10g: gpu.nvidia.com device node-a10g/gpu-1: attribute cudaComputeCapability: 'eight' is not a "
        "version; the device is not read",
        "Node node-a10g: gpu.nvidia.com device node-a10g/gpu-2: capacity memory: not published; the device is not read"]


def test_a_uuid_or_an_index_published_twice_costs_only_the_second_device(policy):
    """As a facts file with two accelerators at one index is refused (runtime/model/facts.py): a device
    publishing an index another device took is not read, so the node's facts still parse."""
    devices = [gpu("gpu-0", "GPU-a", index={"int": 0}), gpu("gpu-1", "GPU-b", index={"int": 0}), gpu("gpu-2", "GPU-a"),
               gpu("gpu-3", "GPU-c")]
    reading = read_node(policy, "n", [slice_of("n", devices)])
    assert [(a["uuid"], a["index"]) for a in reading.accelerators] == [("GPU-a", 0), ("GPU-c", 1)]
    assert reading.warnings == [
        "Node n: gpu.nvidia.com device n/gpu-1: index: 0 is published twice; the device is not read",
        "Node n: gpu.nvidia.com device n/gpu-2: uuid: GPU-a is published twice; the device is not read"]
    assert [a.index for a in parse_facts({"node": "n", "accelerators": reading.accelerators}).accelerators] == [0, 1]


@pytest.mark.parametrize("effect, healthy", [("NoSchedule", False), ("NoExecute", False), ("None", True)])
def test_a_taint_that_keeps_pods_away_marks_the_device_unhealthy(policy, effect, healthy):
    device = gpu("gpu-0", "GPU-x", taints=None)
    device["attributes"].pop("taints")
    device["taints"] = [{"key": "example.com/fan-failure", "value": "1", "effect": effect}]
    (acc,) = read_node(policy, "n", [slice_of("n", [device])]).accelerators
    assert acc["healthy"] is healthy


@pytest.mark.parametrize("taint, healthy, health", [
    ({"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoExecute"}, True, {"xids": [79]}),
    ({"key": "gpu.nvidia.com/xid", "value": "13", "effect": "NoSchedule"}, True, {"xids": [13]}),
    ({"key": "gpu.nvidia.com/gpu-lost", "effect": "NoExecute"}, False, None),
])
def test_health_taints_are_facts_the_health_rules_judge(policy, taint, healthy, health):
    """rules/dra.yaml healthTaints (docs/concepts/out-of-service.md "Health"): the XID taint is read as the
    XID (rules/health.yaml decides: 79 is fatal, 13 an application's), gpu-lost as a lost device."""
    device = gpu("gpu-0", "GPU-x", taints=None)
    device["attributes"].pop("taints")
    device["taints"] = [taint]
    (acc,) = read_node(policy, "n", [slice_of("n", [device])]).accelerators
    assert (acc["healthy"], acc.get("health")) == (healthy, health)


def test_a_mig_on_gpu_offers_nothing_and_says_why(policy, defaults):
    parent = "GPU-h100-0"
    devices = [mig("gpu-0-mig-9-0-1", parent, "1g.10gb"), mig("gpu-0-mig-9-1-1", parent, "1g.10gb"),
               mig("gpu-0-mig-14-4-2", parent, "3g.40gb", "40192Mi"),
               gpu("gpu-1", "GPU-h100-1", "NVIDIA H100 80GB HBM3", "81559Mi")]
    reading = read_node(policy, "node-h100", [slice_of("node-h100", devices)])
    assert [a["uuid"] for a in reading.accelerators] == ["GPU-h100-1"]
    assert reading.partitioned[parent].profiles == {"1g.10gb": 2, "3g.40gb": 1}
    assert reading.partitioned[parent].product == "NVIDIA H100 80GB HBM3"
    assert reading.offers_nothing(policy) == [
        "gpu.nvidia.com publishes 3 partition device(s) of GPU-h100-0 (1g.10gb x2, 3g.40gb x1): partitions are not "
        "offered through DRA in this release, and a GPU with partitions on is not allocatable whole, so it "
        "offers nothing (see docs/concepts/dra.md)"]
    plan = plan_node(policy, parse_facts({"node": "node-h100", "accelerators": reading.accelerators}),
                     seed_node("node-h100"), defaults)
    (group,) = plan.devices["spec"]["groups"]
    assert [a["id"] for a in group["accelerators"]] == ["GPU-h100-1"]
    assert group["accelerators"][0]["status"]["physicalSliced"] == {"count": 0}
    assert "status" not in plan.node_patch   # no sliced/partitioned capacity key on a DRA node (docs/concepts/dra.md "Views per manufacturer")


def test_a_whole_gpu_device_with_partitions_of_its_own_is_mig_on_too(policy):
    devices = [gpu("gpu-0", "GPU-p", "NVIDIA H100 80GB HBM3", "81559Mi"), mig("gpu-0-mig-19-0-1", "GPU-p", "1g.10gb")]
    reading = read_node(policy, "n", [slice_of("n", devices)])
    assert reading.accelerators == [] and list(reading.partitioned) == ["GPU-p"]


# --- the backend and the dry run ---------------------------------------------------------------------
def _dry_run(*args):
    return CliRunner().invoke(main, ["agent", "--node", "node-a10g", "--once", "--dry-run", *args])


def test_dry_run_from_a_slice_file_prints_the_seed_objects_but_cores_and_slicing():
    result = _dry_run("--backend", "dra", "--resourceslices", str(SLICE_FILE), "--cpuinfo", str(CPUINFO),
                      "--node-capacity-cpu", "4", "--node-label", "gpustack.ai/managed=true",
                      "--node-label", "kubernetes.io/os=linux", "--node-label", "kubernetes.io/arch=amd64")
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.stdout))
    assert [d["kind"] for d in docs] == ["NodeFeature", "NodeFeature", "Node", "Devices"]
    worker = fixture_object("nodefeatures.yaml", "node-a10g-gpustack-worker")
    assert docs[0]["spec"] == worker["spec"]
    manager = fixture_object("nodefeatures.yaml", "node-a10g-gpustack-device-manager")["spec"]["labels"]
    assert docs[1]["spec"]["labels"] == {k: v for k, v in manager.items() if not k.endswith(".cores")}
    assert docs[2] == {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a10g", "annotations": {
        "feature.gpustack.ai/cpu-name": "AMD EPYC 7R32", "feature.gpustack.ai/cpu-family": "23"}}}  # no capacity keys
    want = fixture_object("devices.yaml", "node-a10g")
    assert docs[3]["metadata"]["labels"] == want["metadata"]["labels"]
    assert docs[3]["status"] == want["status"]
    (acc,) = docs[3]["spec"]["groups"][0]["accelerators"]
    assert acc["dra"] == {"driver": "gpu.nvidia.com", "pool": "node-a10g", "device": "gpu-0"}
    assert acc["status"] == {"unhealthy": False, "logicalSliced": {"count": 0, "coresPercentageOvercommit": True},
                             "physicalSliced": {"count": 0}}


@pytest.mark.parametrize("args, message", [
    (["--backend", "dra", "--node-capacity-cpu", "4"], "--backend dra without a cluster needs --resourceslices FILE"),
    (["--backend", "fake", "--facts", str(recorded("node-a10g")), "--resourceslices", str(SLICE_FILE),
      "--node-capacity-cpu", "4"], "--resourceslices is for --backend dra or auto"),
    (["--backend", "dra", "--resourceslices", str(CPUINFO), "--node-capacity-cpu", "4"],
     f"{CPUINFO}: no ResourceSlice in the file"),
])
def test_dry_run_usage_errors(args, message):
    result = _dry_run(*args)
    assert result.exit_code == 2 and message in result.output, result.output


def test_auto_reads_slices_only_when_a_configured_driver_publishes_for_the_node(policy):
    slices = slices_from_file(SLICE_FILE)
    assert publishes_for(policy, slices, "node-a10g") == ["gpu.nvidia.com"]
    assert publishes_for(policy, slices, "node-t4-a") == []
    dra = _dry_run("--backend", "auto", "--resourceslices", str(SLICE_FILE), "--cpuinfo", str(CPUINFO),
                   "--node-capacity-cpu", "4")
    assert dra.exit_code == 0 and "dra:\n" in dra.stdout
    other = CliRunner().invoke(main, ["agent", "--node", "node-t4-a", "--dry-run", "--backend", "auto",
                                      "--resourceslices", str(SLICE_FILE), "--cpuinfo", str(CPUINFO),
                                      "--node-capacity-cpu", "4"])
    assert other.exit_code == 0 and [d["kind"] for d in yaml.safe_load_all(other.stdout)] == ["NodeFeature", "Node"]


def test_auto_dry_run_falls_back_to_the_recorded_facts_where_no_slice_names_the_node():
    facts = str(recorded("node-t4-a"))
    only_facts = CliRunner().invoke(main, ["agent", "--node", "node-t4-a", "--dry-run", "--backend", "auto",
                                           "--facts", facts, "--node-capacity-cpu", "8"])
    assert only_facts.exit_code == 0, only_facts.output
    fake = CliRunner().invoke(main, ["agent", "--node", "node-t4-a", "--dry-run", "--backend", "fake",
                                     "--facts", facts, "--node-capacity-cpu", "8"])
    assert only_facts.stdout == fake.stdout
    other_node = CliRunner().invoke(main, ["agent", "--node", "node-t4-a", "--dry-run", "--backend", "auto",
                                           "--resourceslices", str(SLICE_FILE), "--facts", facts,
                                           "--node-capacity-cpu", "8"])
    assert other_node.exit_code == 0 and other_node.stdout == fake.stdout
    # the slices win over the recorded accelerators where they name the node (one source per node)
    dra = _dry_run("--backend", "auto", "--resourceslices", str(SLICE_FILE), "--facts", str(recorded("node-a10g")),
                   "--node-capacity-cpu", "4")
    assert dra.exit_code == 0 and "dra:\n" in dra.stdout
    bare = _dry_run("--backend", "auto", "--node-capacity-cpu", "4")
    assert bare.exit_code == 2 and "--backend auto without a cluster needs --resourceslices FILE (or --facts FILE)" \
        in bare.output


def test_auto_fallback_is_the_nodes_recorded_document_when_the_file_exists_else_nvml(tmp_path):
    fallback = auto_fallback(str(recorded("node-a10g")), "node-a10g")
    assert fallback.name == "fake" and fallback.cpu()["modelName"] == "AMD EPYC 7R32"
    assert auto_fallback(str(tmp_path / "node-x.yaml"), "node-x").name == "real"   # the chart mounts no file for it
    assert auto_fallback(None, "node-x").name == "real"
    with pytest.raises(ValueError, match="describe node 'node-a10g', not --node 'node-t4-a'"):
        auto_fallback(str(recorded("node-a10g")), "node-t4-a")


def test_auto_reads_the_recorded_facts_until_a_slice_names_the_node_then_the_slices_for_good(policy, tmp_path):
    host = tmp_path / "node-a10g.yaml"    # a DRA node's document: its CPU, no NVML accelerator
    doc = yaml.safe_load(recorded("node-a10g").read_text())
    host.write_text(yaml.safe_dump({**doc, "accelerators": []}))
    slices: list[dict] = []
    auto = AutoBackend(policy, "node-a10g", auto_fallback(str(host), "node-a10g"))
    auto.bind(lambda: slices)
    assert (auto.name, auto.accelerators(), auto.source) == ("fake", [], str(host))
    slices.append(slice_of("node-t4-a", [gpu("gpu-0", "GPU-t4")]))     # another node's slice: not ours
    assert auto.accelerators() == [] and auto.name == "fake"
    slices.append(a10g_slice())
    assert [a["uuid"] for a in auto.accelerators()] == [A10G]
    assert (auto.name, auto.source) == ("dra", "the cluster's ResourceSlices")
    assert auto.cpu() == doc["cpu"]                     # the recorded document stands for the host's CPU
    assert auto.reading.accelerators and auto.problems() == []
    slices.clear()                                      # the driver restarting: no going back to the recorded facts
    assert auto.accelerators() == [] and auto.name == "dra"


def test_the_agents_facts_and_allocations_come_from_dra_once_auto_reads_slices(policy):
    from runtime.agent.runner import NodeAgent
    slices: list[dict] = []
    auto = AutoBackend(policy, "node-a10g", auto_fallback(str(recorded("node-a10g")), "node-a10g"))
    auto.bind(lambda: slices)
    agent = NodeAgent(policy, auto, "node-a10g", node=seed_node("node-a10g"), cpuinfo=str(CPUINFO))
    agent.probe()
    assert not agent.dra                                  # the recorded A10G: PodResources/annotations
    slices.append(a10g_slice())
    facts_, known = agent.probe()
    assert agent.dra and known and [a.uuid for a in facts_.accelerators] == [A10G]


def test_the_backend_reads_its_source_on_every_probe(policy):
    slices = [a10g_slice()]
    backend = DraBackend(policy, "node-a10g", lambda: slices, "test")
    assert [a["uuid"] for a in backend.accelerators()] == [A10G]
    slices[0]["spec"]["devices"][0]["taints"] = [{"key": "k", "effect": "NoExecute"}]
    assert backend.accelerators()[0]["healthy"] is False
    slices.clear()
    assert backend.accelerators() == [] and backend.problems() == []


# --- same GPUs, same labels (docs/concepts/dra.md "Accelerators from DRA drivers": `.cores` aside) ----
def test_nvml_and_slices_give_the_a10g_node_the_same_labels_and_devices_but_cores_and_slicing(policy, defaults):
    nvml = facts("node-a10g")
    dra = parse_facts({"node": "node-a10g", "cpu": nvml.cpu.model_dump(),
                       "accelerators": read_node(policy, "node-a10g", [a10g_slice()]).accelerators})
    node = seed_node("node-a10g", labels={"gpustack.ai/managed": "true"})
    a, b = plan_node(policy, nvml, node, defaults), plan_node(policy, dra, node, defaults)
    assert a.worker == b.worker
    cores = "acceleratable.feature.gpustack.ai/nvidia-a10g.cores"
    assert a.device_manager["spec"]["labels"].pop(cores) == "10240" and cores not in b.device_manager["spec"]["labels"]
    assert a.device_manager == b.device_manager
    assert a.devices["metadata"] == b.devices["metadata"] and a.devices["status"] == b.devices["status"]
    ga, gb = a.devices["spec"]["groups"][0], b.devices["spec"]["groups"][0]
    assert ga.pop("cores") == 10240 and "cores" not in gb
    aa, ab = ga.pop("accelerators")[0], gb.pop("accelerators")[0]
    assert ga == gb
    assert ab.pop("dra") == {"driver": "gpu.nvidia.com", "pool": "node-a10g", "device": "gpu-0"}
    assert aa["status"].pop("logicalSliced") == {"count": 128, "coresPercentageOvercommit": True}
    assert ab["status"].pop("logicalSliced") == {"count": 0, "coresPercentageOvercommit": True}
    assert aa == ab
    assert a.node_patch["status"]["capacity"]["nvidia.com/gpu.sliced.units"] == "1600k" and "status" not in b.node_patch


# --- the ledger from ResourceClaims (docs/concepts/dra.md "The ledger from claims") --------------------
def _pod(name: str, phase: str = "Running", extended_claim: str | None = "demo-gpu-claim", uid: str = "") -> dict:
    """A Pod of node-a10g (containers sidecar and main) whose main container's nvidia.com/gpu is the
    extended resource claim ``extended_claim`` (none when None)."""
    status = {}
    if extended_claim:
        status["extendedResourceClaimStatus"] = {
            "resourceClaimName": extended_claim,
            "requestMappings": [{"containerName": "main", "resourceName": "nvidia.com/gpu",
                                 "requestName": "container-0-request-0"}]}
    return pod(name, "demo", uid=uid or f"uid-{name}", created="2026-01-01T00:00:00Z", node="node-a10g",
               containers=[container("sidecar"), container("main")], phase=phase, status=status)


def _claim(name: str, pod: str, device: str = "gpu-0", pool: str = "node-a10g",
           request: str = "container-0-request-0") -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "demo"},
            "status": {"allocation": {"devices": {"results": [
                {"request": request, "driver": "gpu.nvidia.com", "pool": pool, "device": device}]}},
                "reservedFor": [{"resource": "pods", "name": pod, "uid": f"uid-{pod}"}]}}


def test_a_claim_allocated_to_a_pod_of_the_node_charges_its_gpu_whole(policy, defaults):
    reading = read_node(policy, "node-a10g", [a10g_slice()])
    pods = [_pod("demo")]
    found = claim_pod_resources(policy, reading, [_claim("demo-gpu-claim", "demo")], pods)
    assert found == [{"namespace": "demo", "name": "demo", "containers": [
        {"name": "main", "devices": [{"resourceName": "nvidia.com/gpu", "deviceIds": [A10G]}]}]}]
    f = parse_facts({"node": "node-a10g", "accelerators": reading.accelerators})
    plan = plan_node(policy, f, seed_node("node-a10g"), defaults, pods=pods, pod_resources=found)
    (patch,) = plan.pod_patches
    assert json.loads(patch["metadata"]["annotations"][ALLOCATED]) == {"main": [{"id": "a10g", "manufacturer": "nvidia", "accelerators": [
        {"id": A10G, "index": 0, "mode": 1, "allocated": 1600000}]}]}
    assert plan.devices["status"]["groups"][0]["accelerators"] == [
        {"id": A10G, "index": 0, "mode": 1, "allocated": 1600000}]


@pytest.mark.parametrize("claims, pods", [
    ([_claim("c", "demo")], [_pod("demo", phase="Succeeded", extended_claim=None)]),   # finished Pods hold nothing
    ([_claim("c", "elsewhere")], [_pod("demo")]),                                       # not a Pod of this node
    ([_claim("c", "demo", device="gpu-9")], [_pod("demo")]),                           # not a device of the node
    ([_claim("c", "demo", pool="other-pool")], [_pod("demo")]),
    ([{**_claim("c", "demo"), "status": {"reservedFor": [{"resource": "pods", "name": "demo", "uid": "uid-demo"}]}}],
     [_pod("demo")]),                                                                    # not allocated
])
def test_claims_that_do_not_hold_a_device_of_the_node_charge_nothing(policy, claims, pods):
    reading = read_node(policy, "node-a10g", [a10g_slice()])
    assert claim_pod_resources(policy, reading, claims, pods) == []


def test_a_claim_reserved_for_a_pod_of_another_uid_charges_nothing(policy):
    reading = read_node(policy, "node-a10g", [a10g_slice()])
    assert claim_pod_resources(policy, reading, [_claim("c", "demo")], [_pod("demo", uid="uid-new")]) == []


def test_a_direct_claim_charges_the_container_that_names_it(policy):
    reading = read_node(policy, "node-a10g", [a10g_slice()])
    pod = _pod("demo", extended_claim=None)
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    pod["spec"]["containers"][1]["resources"] = {"claims": [{"name": "gpu"}]}
    pod["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": "demo-gpu-x7"}]
    found = claim_pod_resources(policy, reading, [_claim("demo-gpu-x7", "demo", request="gpu")], [pod])
    assert found[0]["containers"] == [{"name": "main", "devices": [{"resourceName": "nvidia.com/gpu", "deviceIds": [A10G]}]}]
    pod["spec"]["containers"][1]["resources"] = {}
    found = claim_pod_resources(policy, reading, [_claim("demo-gpu-x7", "demo", request="gpu")], [pod])
    assert found[0]["containers"][0]["name"] == "sidecar"   # no container names it: the first app container
