"""`accelpolicy explain` (docs/audit.md "Explaining a pool or a decision"): pool membership with the reason each node is left out, the
view numbers, and every rule evaluated for one object with its file:line."""
from __future__ import annotations

import json

from click.testing import CliRunner

from runtime.cli import main
from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules
from tests.admission.test_admission_cli import TWO_FAMILIES as TWO


def _managed_line() -> int:
    doc = load_rules().all("PoolDerivation")[0]
    return doc.source.line_of(("spec", "managed"))


def test_explain_instancetype_names_the_rule_that_left_an_unmanaged_node_out():
    result = CliRunner().invoke(main, ["explain", "instancetype", "gpustack--nvidia-tesla-t4-linux-amd64",
                                       "--snapshot", "tests/fixtures/seed/step2-unmanaged"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[:8] == [
        "InstanceType gpustack--nvidia-tesla-t4-linux-amd64",
        "pool selector: acceleratable.feature.gpustack.ai/nvidia-tesla-t4=true, feature.gpustack.ai/acceleratable=true, "
        "kubernetes.io/arch=amd64, kubernetes.io/os=linux, resource.gpustack.ai/type=nodes",
        "flavors:",
        "  gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-1d: nodes node-t4-a",
        "  gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-4d: nodes node-t4-b",
        "left out:",
        f"  node-a10g: not managed: rules/pools/derivation.yaml:{_managed_line()} spec.managed is false for its labels "
        "(gpustack.ai/managed='false')",
        "  node-cpu: its flavor gpustack--amd-epyc-7r13-linux-amd64-16c has acceleratable.feature.gpustack.ai/"
        "nvidia-tesla-t4=<absent>, the pool selects acceleratable.feature.gpustack.ai/nvidia-tesla-t4=true",
    ]
    assert "  accelerator: 5/5/4" in lines


def test_explain_instancetype_json_has_the_views_and_the_ledger():
    result = CliRunner().invoke(main, ["explain", "instancetype", "gpustack--nvidia-a10g-linux-amd64",
                                       "--snapshot", "tests/fixtures/seed/common", "-o", "json"])
    info = json.loads(result.output)
    assert info["nodes"] == ["node-a10g"]
    assert info["views"]["acceleratorShared"] == {"capacity": "10", "remaining": "10", "onceMaxRequest": "10"}
    assert info["accelerators"] == {"node-a10g": [{"id": "GPU-e0587d2e-127c-4fb8-e2c1-6e517529f575", "group": "a10g",
                                                   "mode": 0, "remaining": 1600000, "allocatedSlices": 0}]}
    assert info["credits"] == {"perAccelerator": 1600000, "perShare": 160000}


def test_explain_instancetype_unknown_name_exits_2():
    result = CliRunner().invoke(main, ["explain", "instancetype", "nope", "--snapshot", "tests/fixtures/seed/common"])
    assert result.exit_code == 2
    assert result.output.startswith("error: no InstanceType 'nope' in the snapshot or the derivation (known: ")


def test_explain_admit_lists_each_rule_with_file_line_inputs_and_result(tmp_path):
    pod = tmp_path / "p.yaml"
    pod.write_text(TWO)
    result = CliRunner().invoke(main, ["explain", "admit", "-f", str(pod), "--snapshot", "tests/fixtures/seed/common",
                                       "-o", "json"])
    assert result.exit_code == 1
    info = json.loads(result.output)
    assert [(p["policy"], p["verdict"]) for p in info["policies"]] == [("pods-mutation", "patched"),
                                                                     ("pods-validation", "invalid")]
    validation = info["policies"][1]
    assert validation["message"] == ('Pod "two-families" is invalid: spec: Forbidden: a Pod may request only one '
                                     "accelerator family, found [exclusive shared]")
    text = (DEFAULT_RULES_DIR / "admission" / "pods.yaml").read_text().splitlines()
    families = next(e for e in validation["evaluations"] if e["result"] == ["exclusive", "shared"])
    line = int(families["where"].split(":")[1].split()[0])
    assert families["where"] == f"rules/admission/pods.yaml:{line} spec.variables[2].expression"
    assert text[line - 1].strip().startswith("expression:")
    assert list(families["inputs"]) == ["variables.claimers"]


def test_explain_names_a_missing_count_label_not_the_accelerator_key(tmp_path):
    """docs/node-facts-robustness.md "`get` shows what the cluster holds": node-t4-a's NodeFeature keeps ``nvidia-tesla-t4: "true"`` but lost its ``.count``;
    explain blamed the accelerator key (``its flavor ...-4c has ...nvidia-tesla-t4=<absent>``)."""
    import yaml

    docs = [d for d in yaml.safe_load_all(open("tests/fixtures/seed/common/nodefeatures.yaml")) if d]
    for nf in docs:
        if nf["metadata"]["name"] == "node-t4-a-gpustack-device-manager":
            del nf["spec"]["labels"]["acceleratable.feature.gpustack.ai/nvidia-tesla-t4.count"]
    (tmp_path / "nodefeatures.yaml").write_text(yaml.safe_dump_all(docs))
    result = CliRunner().invoke(main, ["explain", "instancetype", "gpustack--nvidia-tesla-t4-linux-amd64",
                                       "--snapshot", "tests/fixtures/seed/common", "--snapshot", str(tmp_path)])
    assert result.exit_code == 0, result.output
    key = "acceleratable.feature.gpustack.ai/nvidia-tesla-t4"
    assert (f"  node-t4-a: it carries {key}=true but no {key}.count label: a node contributes a device flavor for "
            "nvidia-tesla-t4 only with that count (the agent writes it beside the group key)") in result.output.splitlines()


def test_explain_names_a_refused_count_label(tmp_path):
    import yaml

    docs = [d for d in yaml.safe_load_all(open("tests/fixtures/seed/common/nodefeatures.yaml")) if d]
    for nf in docs:
        if nf["metadata"]["name"] == "node-t4-a-gpustack-device-manager":
            nf["spec"]["labels"]["acceleratable.feature.gpustack.ai/nvidia-tesla-t4.count"] = "four"
    (tmp_path / "nodefeatures.yaml").write_text(yaml.safe_dump_all(docs))
    result = CliRunner().invoke(main, ["explain", "instancetype", "gpustack--nvidia-tesla-t4-linux-amd64",
                                       "--snapshot", "tests/fixtures/seed/common", "--snapshot", str(tmp_path)])
    line = next(l for l in result.output.splitlines() if l.startswith("  node-t4-a: "))
    assert line == ("  node-t4-a: Node node-t4-a: label acceleratable.feature.gpustack.ai/nvidia-tesla-t4.count='four' "
                    "is not an integer; the node contributes no device flavor for nvidia-tesla-t4")


def test_explain_names_the_fallback_unit_of_a_product_without_a_preset():
    """The NVIDIA A2 of tests/fixtures/presets/node-a2 matches no preset: explain said nothing while its
    pool's unit was the fallback tier's 4/16Gi."""
    from tests.cli.test_audit import A2, A2_POOL, _presets_line

    result = CliRunner().invoke(main, ["explain", "instancetype", A2_POOL, *A2])
    assert result.exit_code == 0, result.output
    message = ("no preset matches nvidia product NVIDIA-A2 (no prefix of manufacturers.nvidia starts its normalized "
               f"name a2): pool {A2_POOL} takes the fallback unit cpu 4, ram 16Gi (tier fallback); give the product "
               f"its tier under manufacturers.nvidia at rules/pools/presets.yaml:{_presets_line()}")
    assert result.output.splitlines()[2] == f"unit: {message}"
    info = json.loads(CliRunner().invoke(main, ["explain", "instancetype", A2_POOL, *A2, "-o", "json"]).output)
    assert info["unitFallback"] == message
    seed = json.loads(CliRunner().invoke(main, ["explain", "instancetype", "gpustack--nvidia-tesla-t4-linux-amd64",
                                                "--snapshot", "tests/fixtures/seed/common", "-o", "json"]).output)
    assert seed["unitFallback"] == ""

