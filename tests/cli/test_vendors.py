"""Another vendor is a rules edit: the views each manufacturer offers (rules/manufacturers.yaml), DRA rows
that fit real drivers (product tables, a constant or CEL device kind, a boolean health attribute), and
the rows shipped for Intel's Gaudi and GPU drivers and AMD's (rules/dra-intel.yaml, rules/dra-amd.yaml;
docs/tasks/add-manufacturer-or-preset.md)."""
from __future__ import annotations

import shutil

import yaml
from click.testing import CliRunner

from runtime.cli import main
from runtime.engine.devices.devicesobject import node_capacity
from runtime.engine.policy import Policy
from runtime.engine.pools.deviceclasses import device_classes
from runtime.engine.resourcekeys import classifier_manufacturers
from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules
from tests.builders import pod
from tests.rulelines import shipped_line
from tests.seedfiles import FIXTURES, parse_table

GAUDI = FIXTURES / "dra" / "gaudi"                               # node-gaudi and gaudi.intel.com's slice
GAUDI_FACTS = FIXTURES / "dra" / "gaudi-facts" / "node-gaudi.yaml"   # the same node as recorded facts
POOL = "gpustack--habana-gaudi2-linux-amd64"
QUEUE = "gpustack-fnv64-924290871bee5fc1"
EXCLUSIVE_ONLY = "manufacturer habana offers only the exclusive view of its devices, not the {} view"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def pools(*snapshots) -> dict[str, dict[str, str]]:
    result = run("get", "instancetypes", *[a for s in snapshots for a in ("--snapshot", s)])
    assert result.exit_code == 0, result.output
    return {row["NAME"]: row for row in parse_table(result.stdout)}


def agent_objects(tmp_path) -> str:
    """The agent's dry run over the recorded facts, as a snapshot file."""
    result = run("agent", "--node", "node-gaudi", "--once", "--dry-run", "--backend", "fake", "--facts", GAUDI_FACTS,
                 "--node-capacity-cpu", "8")
    assert result.exit_code == 0, result.output
    out = tmp_path / "agent.yaml"
    out.write_text(result.stdout)
    return str(out)


def test_a_gaudi_node_from_intels_dra_driver_joins_a_gaudi_pool_with_the_exclusive_view_only():
    got = pools(GAUDI)
    assert got[POOL]["ACCELERATOR(EX/SH/SL/PT)"] == "2/2 0/0 0/0 0/0"
    assert (got[POOL]["ENTRANCE"], got[POOL]["UNIT(CPU/RAM)/STORAGE"]) == (QUEUE, "8/64Gi/100Gi")


def test_the_same_node_through_recorded_facts_gives_the_same_pool(tmp_path):
    got = pools(agent_objects(tmp_path), GAUDI / "node.yaml")
    assert got == pools(GAUDI)
    assert got[POOL]["ACCELERATOR(EX/SH/SL/PT)"] == "2/2 0/0 0/0 0/0"


def test_a_view_not_offered_has_no_capability_entry_and_no_capacity_key(tmp_path, policy):
    docs = list(yaml.safe_load_all(open(agent_objects(tmp_path))))
    (devices,) = [d for d in docs if d["kind"] == "Devices"]
    (group,) = devices["spec"]["groups"]
    assert [(a["id"], a["views"], a["status"]["logicalSliced"]["count"], a["status"]["physicalSliced"])
            for a in group["accelerators"]] == [
        ("0000-0f-00-0-0x1020", ["exclusive"], 0, {"count": 0}), ("0000-10-00-0-0x1020", ["exclusive"], 0, {"count": 0})]
    (node,) = [d for d in docs if d["kind"] == "Node"]
    assert "status" not in node   # no capacity key at all (amd, offering every view, gets its .sliced keys at 0)
    amd = {"groups": [{**group, "manufacturer": "amd",
                       "accelerators": [{k: v for k, v in a.items() if k != "views"} for a in group["accelerators"]]}]}
    assert node_capacity(policy, devices["spec"], None) == {}
    assert sorted(node_capacity(policy, amd, None)) == ["amd.com/gpu.sliced.cores-percentage",
                                                       "amd.com/gpu.sliced.memory-mib",
                                                       "amd.com/gpu.sliced.memory-percentage", "amd.com/gpu.sliced.units"]


def test_an_nvidia_device_plugin_node_keeps_every_view_and_writes_no_views(policy):
    nvidia = {m["id"]: m for m in classifier_manufacturers(policy)}
    assert (nvidia["nvidia"]["views"], nvidia["nvidia"]["refusals"]) == (
        ["exclusive", "shared", "sliced", "partitioned"], {})
    assert (nvidia["habana"]["views"], nvidia["habana"]["refusals"]) == (["exclusive"], {
        "shared": EXCLUSIVE_ONLY.format("shared"), "sliced": EXCLUSIVE_ONLY.format("sliced"),
        "partitioned": EXCLUSIVE_ONLY.format("partitioned")})


def _pod(tmp_path, limits: dict) -> str:
    path = tmp_path / "pod.yaml"
    trainer = pod("trainer", "team-a", queue=QUEUE, image="habana/pytorch", limits=limits)
    path.write_text(yaml.safe_dump(trainer))
    return str(path)


def test_a_pod_asking_gaudis_shared_view_is_denied_naming_the_views_gaudi_offers(tmp_path):
    result = run("admit", "-f", _pod(tmp_path, {"habana.ai/gaudi.shared": "3"}), "--snapshot", GAUDI, "-o", "text")
    assert result.exit_code == 1
    assert result.stdout.splitlines()[1:] == [
        "verdict:  denied (422 Invalid)",
        'message:  Pod "trainer" is invalid: spec.containers[0].resources.limits: Forbidden: container "main": '
        f"habana.ai/gaudi (shared): {EXCLUSIVE_ONLY.format('shared')}"]
    whole = run("admit", "-f", _pod(tmp_path, {"habana.ai/gaudi": "2"}), "--snapshot", GAUDI, "-o", "text")
    assert (whole.exit_code, whole.stdout.splitlines()[1]) == (0, "verdict:  allowed")


def test_an_instance_asking_a_gaudi_slice_is_denied_naming_the_views(tmp_path):
    instance = {"apiVersion": "worker.gpustack.ai/v1", "kind": "Instance",
                "metadata": {"name": "sliced", "namespace": "default"},
                "spec": {"type": POOL, "image": "ubuntu:24.04", "volume": {"ephemeral": {"capacity": "1Gi"}},
                         "resources": {"accelerator": "1", "acceleratorSlicedMemoryPercentage": 20}}}
    path = tmp_path / "instance.yaml"
    path.write_text(yaml.safe_dump(instance))
    result = run("admit", "-f", path, "--snapshot", GAUDI, "-o", "text")
    assert result.exit_code == 1
    assert (f"spec.resources.acceleratorSlicedMemoryPercentage: Forbidden: instance type {POOL}: "
            f"{EXCLUSIVE_ONLY.format('sliced')}") in result.stdout


def test_a_derived_device_class_per_shipped_driver(policy):
    classes = {c["metadata"]["name"]: c["spec"] for c in device_classes(policy)}
    assert classes["gpustack-habana-gaudi.intel.com"] == {
        "selectors": [{"cel": {"expression": 'device.driver == "gaudi.intel.com"'}}],
        "extendedResourceName": "habana.ai/gaudi"}
    assert classes["gpustack-intel-gpu.intel.com"] == {
        "selectors": [{"cel": {"expression": 'device.driver == "gpu.intel.com" && '
                                             'device.attributes["gpu.intel.com"].type == "gpu"'}}],
        "extendedResourceName": "gpu.intel.com/i915"}
    assert classes["gpustack-amd-gpu.amd.com"]["extendedResourceName"] == "amd.com/gpu"


def _rules(tmp_path, file: str, old: str, new: str):
    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules)
    text = (rules / file).read_text()
    assert old in text
    (rules / file).write_text(text.replace(old, new))
    return rules


def _lint(rules) -> tuple[int, str]:
    result = run("lint", rules)
    first, *findings = result.output.splitlines()
    assert first == f"reading rules from {rules}"
    return result.exit_code, findings[0]


def test_lint_checks_product_tables(tmp_path):
    assert _lint(_rules(tmp_path / "a", "dra-intel.yaml", "Gaudi2: 96Gi", "Gaudi2: 96 gigs")) == (
        1, "rules/dra-intel.yaml:26:13 spec.productMemory.Gaudi2: '96 gigs' is not a quantity (e.g. 96Gi)")
    assert _lint(_rules(tmp_path / "b", "dra-intel.yaml", "Gaudi3: 128Gi", "Gaudi3: 128Ki")) == (
        1, "rules/dra-intel.yaml:27:13 spec.productMemory.Gaudi3: '128Ki' is less than 1Mi")
    no_table = _rules(tmp_path / "c", "dra-intel.yaml", "  productMemory:\n    Gaudi: 32Gi\n    Gaudi2: 96Gi\n"
                                                         "    Gaudi3: 128Gi\n", "")
    assert _lint(no_table) == (1, "rules/dra-intel.yaml:15:3 spec: facts.memoryMib is left out: give "
                                  "productMemory (product name -> memory)")


def test_lint_checks_views(tmp_path):
    old = 'views: {exclusive: "true"}}\n    # Intel data'
    assert _lint(_rules(tmp_path / "a", "manufacturers.yaml", old, 'views: {shared: "true"}}\n    # Intel data')) == (
        1, f"rules/manufacturers.yaml:{shipped_line('rules/manufacturers.yaml', old)}:15 spec.manufacturers[8].views: every "
           "manufacturer's devices offer the exclusive view (a whole device): give exclusive: 'true'")
    old = "sliced: \"accelerator.source == 'devicePlugin'\""
    assert _lint(_rules(tmp_path / "b", "manufacturers.yaml", old, old.replace("accelerator.", "acelerator."))) == (
        1, f"rules/manufacturers.yaml:{shipped_line('rules/manufacturers.yaml', old)}:25 spec.manufacturers[7].views.sliced: "
           "undeclared name 'acelerator' (names here: accelerator)")


def test_a_kind_expression_tells_whole_devices_from_others(tmp_path):
    rules = _rules(tmp_path, "dra-intel.yaml", "  kind: {constant: gaudi}\n",
                   "  kind:\n    expression: \"'model' in attributes && attributes.model != 'Unknown' ? 'gaudi' : 'other'\"\n"
                   "    selector: 'device.driver == \"{driver}\" && device.attributes[\"{driver}\"].model != \"Unknown\"'\n")
    policy = Policy(load_rules(rules))
    from runtime.engine.devices.draslices import read_node

    slices = list(yaml.safe_load_all((GAUDI / "resourceslice.yaml").read_text()))
    slices[0]["spec"]["devices"][1]["attributes"]["model"] = {"string": "Unknown"}
    reading = read_node(policy, "node-gaudi", slices)
    assert ([a["uuid"] for a in reading.accelerators], reading.warnings) == (["0000-0f-00-0-0x1020"], [])
    classes = {c["metadata"]["name"]: c["spec"]["selectors"] for c in device_classes(policy)}
    assert classes["gpustack-habana-gaudi.intel.com"] == [{"cel": {"expression": (
        'device.driver == "gaudi.intel.com" && device.attributes["gaudi.intel.com"].model != "Unknown"')}}]


def test_a_condition_that_fails_to_evaluate_does_not_offer_its_view(tmp_path):
    rules = _rules(tmp_path, "manufacturers.yaml", "shared: \"accelerator.source == 'devicePlugin'\"",
                   "shared: \"accelerator.bus == 'pcie'\"")   # no such field: an evaluation error
    from probes.fake import recorded

    result = run("agent", "--node", "node-a10g", "--once", "--dry-run", "--backend", "fake", "--facts",
                 recorded("node-a10g"), "--node-capacity-cpu", "4", "--rules", rules)
    assert result.exit_code == 0, result.output
    (devices,) = [d for d in yaml.safe_load_all(result.stdout) if d["kind"] == "Devices"]
    (accelerator,) = devices["spec"]["groups"][0]["accelerators"]
    assert (accelerator["views"], accelerator["status"]["logicalSliced"]["count"]) == (["exclusive", "sliced"], 128)
