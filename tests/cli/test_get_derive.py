"""The `accelpolicy get` / `derive` / `demo` commands as an operator runs them."""
from __future__ import annotations

import shutil

import yaml
from click.testing import CliRunner

from runtime.cli import main
from runtime.rules.loader import DEFAULT_RULES_DIR
from tests.seedfiles import FIXTURES, seed_table

STEP1 = str(FIXTURES / "seed" / "step1")


def edited_rules(tmp_path, relative: str, old: str, new: str):
    """A copy of rules/ with one replacement in one file; returns (rules dir, edited file)."""
    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules)
    path = rules / relative
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new))
    return rules, path


def run(*args, input=None):
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


def test_get_instancetypes_prints_the_seed_table():
    result = run("get", "instancetypes", "--snapshot", STEP1)
    assert result.exit_code == 0
    assert result.output.rstrip("\n") == seed_table("step1-instancetype.txt")


def test_kubectl_spellings_resolve_to_the_same_kind():
    outputs = {run("get", name, "--snapshot", STEP1).output for name in ("instancetype", "instancetypes", "instype", "InstanceType.worker.gpustack.ai")}
    assert len(outputs) == 1


def test_wide_adds_the_partitions_column():
    header = run("get", "instancetypes", "-o", "wide", "--snapshot", STEP1).output.splitlines()[0]
    assert header.split()[-2:] == ["PHASE", "PARTITIONS"]
    assert header.endswith("PHASE    PARTITIONS")  # PHASE is as wide as "Active", then three spaces


def test_snapshot_from_stdin_and_json_list():
    text = "---\n".join(p.read_text() for p in sorted((FIXTURES / "seed" / "common").glob("*.yaml")))
    result = run("get", "cq", "-o", "json", "--snapshot", "-", input=text)
    assert result.exit_code == 0
    names = [item["metadata"]["name"] for item in yaml.safe_load(result.output)["items"]]
    assert names == ["gpustack--generic-linux-amd64", "gpustack--nvidia-a10g-linux-amd64",
                     "gpustack--nvidia-tesla-t4-linux-amd64"]


def test_derive_prints_an_apply_stream():
    result = run("derive", "--snapshot", STEP1)
    docs = list(yaml.safe_load_all(result.output))
    kinds = [d["kind"] for d in docs]
    assert kinds.count("ResourceFlavor") == 7 and kinds.count("ClusterQueue") == 3
    assert kinds.count("InstanceType") == 3 and kinds.count("LocalQueue") == 3
    assert kinds.count("AdmissionCheck") == 1 and kinds.count("InstanceTypeFlavor") == 3


def test_unknown_kind_is_exit_2_with_a_message():
    result = CliRunner().invoke(main, ["get", "pods", "--snapshot", STEP1])
    assert result.exit_code == 2
    assert 'doesn\'t have a resource type "pods"' in result.stderr


def test_missing_snapshot_is_exit_2_naming_the_path(tmp_path):
    result = CliRunner().invoke(main, ["get", "rf", "--snapshot", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert f"{tmp_path / 'nope'}: no such file or directory" in result.stderr


def test_broken_rules_are_exit_2_with_file_line_and_field(tmp_path):
    rules, path = edited_rules(tmp_path, "pools/derivation.yaml",
                               "generalGroup: 'aware ? gKey : \"generic\"'", "generalGroup: 'aware ? gKey :'")
    result = CliRunner().invoke(main, ["get", "rf", "--snapshot", STEP1, "--rules", str(rules)])
    assert result.exit_code == 2
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if text.startswith("  generalGroup:"))
    assert (f"rules/pools/derivation.yaml:{line}:31 spec.generalGroup: CEL syntax error: unexpected end of expression"
            in result.stderr)


def test_demo_prints_every_step():
    result = run("demo", "--snapshot")
    assert result.exit_code == 0
    assert result.output.count("$ kubectl get instancetypes") == 9
    assert seed_table("step5-after-aware.txt") in result.output


def test_get_exits_1_when_any_named_object_is_missing():
    result = run_raw("get", "instancetypes", "nosuch", "gpustack--generic-linux-amd64", "--snapshot", STEP1)
    assert result.exit_code == 1
    assert "gpustack--generic-linux-amd64" in result.stdout
    assert 'instancetypes.worker.gpustack.ai "nosuch" not found' in result.stderr


def test_an_unknown_cel_function_is_refused_at_load_naming_file_field_and_cause(tmp_path):
    # found statically (docs/rule-authoring.md "What lint checks"): before, it failed only when evaluated ("unbound function: fnv64")
    rules, path = edited_rules(tmp_path, "pools/derivation.yaml", "fnv64a(name)", "fnv64(name)")
    result = run_raw("get", "instancetypes", "--snapshot", STEP1, "--rules", str(rules))
    assert result.exit_code == 2
    text = path.read_text()
    at = text.index("fnv64(name)")
    line, col = text.count("\n", 0, at) + 1, at - text.rfind("\n", 0, at)
    assert (f"rules/pools/derivation.yaml:{line}:{col} spec.entrance: unknown function 'fnv64'"
            in result.stderr)
    assert "Traceback" not in result.output


def test_an_unknown_preset_tier_is_refused_at_load(tmp_path):
    rules, _ = edited_rules(tmp_path, "pools/presets.yaml", "- {prefixes: [t4], tier: small}",
                            "- {prefixes: [t4], tier: huge}")
    result = run_raw("get", "instancetypes", "--snapshot", STEP1, "--rules", str(rules))
    assert result.exit_code == 2
    assert "unknown tier 'huge'" in result.stderr


def test_a_snapshot_with_a_duplicate_key_is_refused(tmp_path):
    path = tmp_path / "ns.yaml"
    path.write_text("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n  name: b\n")
    result = run_raw("get", "rf", "--snapshot", str(path))
    assert result.exit_code == 2
    assert f"{path}:5: not valid YAML or JSON: duplicate key 'name' (first at line 4)" in result.stderr


def run_raw(*args):
    return CliRunner().invoke(main, list(args))


def test_an_instancetype_without_spec_reads_inactive_and_selects_nothing(tmp_path):
    """docs/node-facts-robustness.md "`get` shows what the cluster holds": a type with no spec (written while the webhook was bypassed) showed `Active`, unit `//`
    and the generic CPU pool's numbers (its labels selected every CPU flavor). An acceleratable one
    without acceleratorGroup selected every device flavor the same way."""
    (tmp_path / "types.yaml").write_text(yaml.safe_dump_all([
        {"apiVersion": "worker.gpustack.ai/v1", "kind": "InstanceType", "metadata": {"name": "no-spec"}},
        {"apiVersion": "worker.gpustack.ai/v1", "kind": "InstanceType", "metadata": {"name": "no-group"},
         "spec": {"acceleratable": True, "os": "linux", "arch": "amd64", "unitResources": {"cpu": "8", "ram": "64Gi"},
                  "localStorage": "100Gi"}}]))
    result = run("get", "instancetypes", "--snapshot", STEP1, "--snapshot", str(tmp_path))
    rows = {line.split()[0]: line.split()[2:] for line in result.output.splitlines()[1:]}
    assert rows["no-spec"] == ["-/-/-", "0/0", "0/0", "0/0", "0/0", "0/0", "Inactive"]
    assert rows["no-group"] == ["8/64Gi/100Gi", "0/0", "0/0", "0/0", "0/0", "0/0", "Inactive"]
    assert rows["gpustack--generic-linux-amd64"][-2:] == ["48/72", "Active"]  # the real pool is unchanged
    types = {t["metadata"]["name"]: t for t in yaml.safe_load(
        run("get", "instancetypes", "-o", "yaml", "--snapshot", STEP1, "--snapshot", str(tmp_path)).output)["items"]}
    assert types["no-spec"]["status"]["phaseMessage"] == (
        "spec.os, spec.arch not set: the type selects no node (the InstanceType webhook requires them)")
    assert types["no-group"]["status"]["phaseMessage"] == (
        "spec.acceleratorGroup not set: the type selects no node (the InstanceType webhook requires them)")
    queues = {q["metadata"]["name"]: q for q in yaml.safe_load(
        run("get", "clusterqueues", "-o", "yaml", "--snapshot", STEP1, "--snapshot", str(tmp_path)).output)["items"]}
    assert queues["no-spec"]["spec"]["resourceGroups"] == [] and queues["no-group"]["spec"]["resourceGroups"] == []
