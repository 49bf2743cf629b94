"""The offline commands over ResourceSlices (docs/concepts/dra.md "Accelerators from DRA drivers"): `get`, `derive`, `explain instancetype` and
`audit --snapshot` plan a node whose accelerators a DRA driver publishes as its agent would (docs/concepts/dra.md "Accelerators from DRA drivers")."""
from __future__ import annotations

import json

from click.testing import CliRunner

from runtime.cli import main
from runtime.engine.devices.draoffline import with_dra_nodes
from runtime.engine.pools import derive
from runtime.snapshots import load_snapshot
from tests.seedfiles import FIXTURES, parse_table, seed_table

STEP1 = str(FIXTURES / "seed" / "step1")
A10G_DRA = str(FIXTURES / "dra" / "seed-a10g-dra")       # the seed, node-a10g's A10G from gpu.nvidia.com's slice
NEW_NODE = str(FIXTURES / "dra" / "new-node")            # a fifth node, DRA-only, before accelpolicy runs on it
H100_MIG = str(FIXTURES / "dra" / "h100-mig")            # a DRA node with one MIG-on and one whole H100
MIG_LINE = ("gpu.nvidia.com publishes 3 partition device(s) of GPU-c1000000-0000-4000-8000-000000000000 "
            "(1g.10gb x2, 3g.40gb x1): partitions are not offered through DRA in this release, "
            "and a GPU with partitions on is not allocatable whole, so it offers nothing (see docs/concepts/dra.md)")


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def rows(text: str) -> dict[str, dict[str, str]]:
    return {row["NAME"]: row for row in parse_table(text)}


def test_the_seed_with_node_a10g_on_dra_keeps_its_pools_and_offers_only_the_exclusive_view():
    got, want = rows(run("get", "instancetypes", "--snapshot", A10G_DRA).stdout), rows(seed_table("step1-instancetype.txt"))
    assert got.keys() == want.keys()
    a10g = "gpustack--nvidia-a10g-linux-amd64"
    assert got[a10g]["ACCELERATOR(EX/SH/SL/PT)"] == "1/1 0/0 0/0 0/0"   # seed: 1/1 10/10 100/100 0/0
    assert {k: v for k, v in got.items() if k != a10g} == {k: v for k, v in want.items() if k != a10g}
    assert {k: {c: v for c, v in r.items() if c != "ACCELERATOR(EX/SH/SL/PT)"} for k, r in got.items()} == \
        {k: {c: v for c, v in r.items() if c != "ACCELERATOR(EX/SH/SL/PT)"} for k, r in want.items()}
    flavors = run("get", "resourceflavors", "--snapshot", A10G_DRA, "--no-headers").stdout.split()
    assert sorted(flavors[0::2]) == sorted(r["NAME"] for r in parse_table(seed_table("step1-resourceflavor.txt")))


def test_the_same_a10g_from_nvml_or_slices_derives_the_same_flavors_queues_and_types(policy):
    """docs/concepts/dra.md "Accelerators from DRA drivers": same GPUs -> same labels, flavors and InstanceTypes either way; `.cores` aside, and the
    slicing a DRA accelerator does not offer (docs/concepts/dra.md "Views per manufacturer")."""
    nvml = derive(policy, load_snapshot([STEP1]))
    dra = derive(policy, with_dra_nodes(policy, load_snapshot([A10G_DRA]))[0])
    assert nvml.cluster_queues == dra.cluster_queues
    assert [(f["metadata"]["name"], f["metadata"]["labels"], f["spec"]) for f in nvml.resource_flavors] == \
        [(f["metadata"]["name"], f["metadata"]["labels"], f["spec"]) for f in dra.resource_flavors]
    notes_nvml = {f["metadata"]["name"]: f["metadata"]["annotations"] for f in nvml.resource_flavors}
    notes_dra = {f["metadata"]["name"]: f["metadata"]["annotations"] for f in dra.resource_flavors}
    flavor = "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d"
    a, b = notes_nvml.pop(flavor), notes_dra.pop(flavor)
    assert notes_nvml == notes_dra
    assert (a.pop("note.gpustack.ai/cores"), "note.gpustack.ai/cores" in b) == ("10240", False)
    assert (a.pop("note.gpustack.ai/sliceable"), b.pop("note.gpustack.ai/sliceable")) == ("true", "false")
    assert '"maxSize":128' in a.pop("note.gpustack.ai/feature") and '"maxSize":0' in b.pop("note.gpustack.ai/feature")
    assert a == b
    types_nvml = {t["metadata"]["name"]: t for t in nvml.instance_types}
    types_dra = {t["metadata"]["name"]: t for t in dra.instance_types}
    assert types_nvml.keys() == types_dra.keys()
    for name in types_nvml:
        ta, tb = types_nvml[name], types_dra[name]
        assert ta["metadata"] == tb["metadata"]
        spec_a, spec_b = dict(ta["spec"]), dict(tb["spec"])
        if name == "gpustack--nvidia-a10g-linux-amd64":
            assert (spec_a.pop("cores"), "cores" in spec_b) == ("10240", False)
            assert (spec_a.pop("feature")["logicalSliced"]["maxSize"], spec_b.pop("feature")["logicalSliced"]["maxSize"]) == (128, 0)
        assert spec_a == spec_b


def test_a_dra_node_beside_the_seed_joins_the_a10g_pool_with_one_whole_gpu_more():
    result = run("get", "instancetypes", "--snapshot", STEP1, "--snapshot", NEW_NODE)
    assert result.exit_code == 0 and result.stderr == ""
    got = rows(result.stdout)
    assert got["gpustack--nvidia-a10g-linux-amd64"]["ACCELERATOR(EX/SH/SL/PT)"] == "1/2 10/10 100/100 0/0"
    assert got["gpustack--generic-linux-amd64"]["CPU"] == "48/76"
    assert got["gpustack--nvidia-tesla-t4-linux-amd64"]["ACCELERATOR(EX/SH/SL/PT)"] == "4/5 40/50 100/500 0/0"
    flavors = run("get", "rf", "--no-headers", "--snapshot", STEP1, "--snapshot", NEW_NODE).stdout.split()[0::2]
    assert {"gpustack--amd-23-49--nvidia-a10g-linux-amd64-1d", "gpustack--amd-23-49-linux-amd64-4c"} <= set(flavors)
    devices = run("get", "devices", "--no-headers", "--snapshot", STEP1, "--snapshot", NEW_NODE).stdout.split()
    assert devices == ["node-a10g", "node-a10g-dra", "node-t4-a", "node-t4-b"]


def test_explain_says_where_each_nodes_accelerators_come_from():
    text = run("explain", "instancetype", "gpustack--nvidia-a10g-linux-amd64", "--snapshot", STEP1,
               "--snapshot", NEW_NODE).stdout
    assert text.split("accelerators from:\n", 1)[1].splitlines() == [
        "  node-a10g: NVML through the agent (NodeFeature node-a10g-gpustack-device-manager): a device-plugin node, "
        "every view offered",
        "  node-a10g-dra: ResourceSlices of gpu.nvidia.com (node-a10g-dra-gpu.nvidia.com-9qv2t): 1 whole "
        "accelerator(s), offering the exclusive view only (see docs/concepts/dra.md)",
        "  node-cpu: no accelerator (no ResourceSlice of a configured driver, no NodeFeature "
        "node-cpu-gpustack-device-manager)",
        "  node-t4-a: NVML through the agent (NodeFeature node-t4-a-gpustack-device-manager): a device-plugin node, "
        "every view offered",
        "  node-t4-b: NVML through the agent (NodeFeature node-t4-b-gpustack-device-manager): a device-plugin node, "
        "every view offered"]
    assert "  gpustack--amd-23-49--nvidia-a10g-linux-amd64-1d: nodes node-a10g-dra\n" in text


def test_explain_says_why_a_mig_on_gpu_offers_nothing():
    result = run("explain", "instancetype", "gpustack--nvidia-h100-80gb-hbm3-linux-amd64", "--snapshot", H100_MIG)
    assert result.exit_code == 0
    assert "  accelerator: 1/1/1\n  acceleratorShared: 0/0/0\n  acceleratorSliced: 0/0/0\n" \
           "  acceleratorPartitioned: 0/0/0\n" in result.stdout
    assert result.stdout.rstrip("\n").endswith(
        "accelerators from:\n  node-h100-dra: ResourceSlices of gpu.nvidia.com (node-h100-dra-gpu.nvidia.com-mq4rz): "
        "1 whole accelerator(s), offering the exclusive view only (see docs/concepts/dra.md)\n    " + MIG_LINE)
    get = run("get", "instancetypes", "--snapshot", H100_MIG)
    assert get.stderr == f"warning: {MIG_LINE}\n"
    assert rows(get.stdout)["gpustack--nvidia-h100-80gb-hbm3-linux-amd64"]["ACCELERATOR(EX/SH/SL/PT)"] == "1/1 0/0 0/0 0/0"


def test_audit_of_a_snapshot_reads_the_slices_too():
    cluster = str(FIXTURES / "audit" / "seed-cluster")
    before = run("audit", "--snapshot", cluster).stdout
    after = run("audit", "--snapshot", cluster, "--snapshot", NEW_NODE).stdout
    missing = "ResourceFlavor gpustack--amd-23-49--nvidia-a10g-linux-amd64-1d is derived from the nodes but missing from the cluster"
    assert missing not in before and missing in after


def test_slices_of_an_unknown_node_or_driver_are_ignored_and_named(tmp_path):
    stray = tmp_path / "stray.yaml"
    stray.write_text((FIXTURES / "dra" / "new-node" / "resourceslice.yaml").read_text())
    result = run("get", "instancetypes", "--snapshot", STEP1, "--snapshot", str(stray))
    assert result.stderr == ("warning: ResourceSlice node-a10g-dra-gpu.nvidia.com-9qv2t: node node-a10g-dra does not "
                             "exist; ignored\n")
    assert result.stdout.rstrip("\n") == seed_table("step1-instancetype.txt")


def test_explain_names_the_devices_of_a_node_whose_nodefeature_the_snapshot_lacks(tmp_path):
    """A snapshot of Nodes and Devices without the NodeFeatures (``kubectl get nodes,devices``): the pool and
    its ledger rows read node-a10g's labels and Devices, and "accelerators from" said "no accelerator (no
    ResourceSlice ..., no NodeFeature node-a10g-gpustack-device-manager)" beside them."""
    common = FIXTURES / "seed" / "common"
    for name in ("nodes.yaml", "devices.yaml", "namespaces.yaml", "settings.yaml"):
        (tmp_path / name).write_text((common / name).read_text())
    result = run("explain", "instancetype", "gpustack--nvidia-a10g-linux-amd64", "--snapshot", str(tmp_path))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "  node-a10g a10g/GPU-e0587d2e-127c-4fb8-e2c1-6e517529f575: mode 0, ledger remaining 1600000, " \
           "allocated slices 0" in lines
    assert result.stdout.split("accelerators from:\n", 1)[1].splitlines() == [
        "  node-a10g: NVML through the agent (Devices node-a10g: 1 accelerator(s); NodeFeature "
        "node-a10g-gpustack-device-manager not in the snapshot): a device-plugin node, every view offered",
        "  node-cpu: no accelerator (no ResourceSlice of a configured driver, no NodeFeature "
        "node-cpu-gpustack-device-manager)",
        "  node-t4-a: NVML through the agent (Devices node-t4-a: 1 accelerator(s); NodeFeature "
        "node-t4-a-gpustack-device-manager not in the snapshot): a device-plugin node, every view offered",
        "  node-t4-b: NVML through the agent (Devices node-t4-b: 4 accelerator(s); NodeFeature "
        "node-t4-b-gpustack-device-manager not in the snapshot): a device-plugin node, every view offered"]
    info = json.loads(run("explain", "instancetype", "gpustack--nvidia-a10g-linux-amd64",
                         "--snapshot", str(tmp_path), "-o", "json").stdout)
    assert {n: s["source"] for n, s in info["sources"].items()} == \
        {"node-a10g": "plugin", "node-cpu": "none", "node-t4-a": "plugin", "node-t4-b": "plugin"}


def test_an_xid_tainted_dra_device_is_judged_by_the_health_rules_offline_too(tmp_path):
    """docs/concepts/out-of-service.md "Health": node-a10g's A10G published with the driver's XID taint (rules/dra.yaml
    healthTaints): an XID of the fatal list takes it out of the views, an application XID does not; its labels
    and flavor stay (decision 26)."""
    import shutil
    import yaml
    for xid, row in (("79", "0/0 0/0 0/0 0/0"), ("13", "1/1 0/0 0/0 0/0")):
        snap = tmp_path / xid
        shutil.copytree(A10G_DRA, snap)
        path = snap / "node-a10g-resourceslice.yaml"
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        docs[0]["spec"]["devices"][0]["taints"] = [{"key": "gpu.nvidia.com/xid", "value": xid, "effect": "NoExecute"}]
        path.write_text(yaml.safe_dump_all(docs))
        got = rows(run("get", "instancetypes", "--snapshot", str(snap)).stdout)
        assert got["gpustack--nvidia-a10g-linux-amd64"]["ACCELERATOR(EX/SH/SL/PT)"] == row, xid
        flavors = run("get", "resourceflavors", "--snapshot", str(snap), "--no-headers").stdout.split()[0::2]
        assert "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d" in flavors
