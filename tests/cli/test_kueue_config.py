"""`accelpolicy kueue-config` (docs/concepts/pools-and-flavors.md "Kueue's resource charging") as an operator runs it."""
from __future__ import annotations

import json

import yaml

from tests.cli.test_get_derive import edited_rules, run
from tests.engine.test_kueue_charging import EXPECTED
from tests.rulelines import shipped_line


# docs/concepts/dra.md "The ledger from claims": the DeviceClasses accelpolicy derives for the shipped DRA drivers (NVIDIA's, AMD's,
# Intel's Gaudi and GPU), for claims made directly
WITH_DRA = {**EXPECTED, "resources": {**EXPECTED["resources"], "deviceClassMappings": [
    {"name": "amd.com/gpu", "deviceClassNames": ["gpustack-amd-gpu.amd.com"]},
    {"name": "gpu.intel.com/i915", "deviceClassNames": ["gpustack-intel-gpu.intel.com"]},
    {"name": "habana.ai/gaudi", "deviceClassNames": ["gpustack-habana-gaudi.intel.com"]},
    {"name": "nvidia.com/gpu", "deviceClassNames": ["gpustack-nvidia-gpu.nvidia.com"]}]}}


def test_prints_the_configuration_as_yaml_and_json():
    as_yaml = run("kueue-config")
    assert as_yaml.exit_code == 0
    assert yaml.safe_load(as_yaml.output) == WITH_DRA
    assert as_yaml.output.startswith("apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nresources:\n"
                                     "  excludeResourcePrefixes:\n  - cpu\n")
    as_json = run("kueue-config", "-o", "json")
    assert as_json.exit_code == 0 and json.loads(as_json.output) == WITH_DRA


def test_without_dra_drivers_no_device_class_mappings(tmp_path):
    rules, path = edited_rules(tmp_path, "dra.yaml", "kind: DraDriver", "kind: DraDriver")
    text = path.read_text()
    path.write_text(text[:text.index("# NVIDIA's driver")])   # the DraPolicy alone
    for other in ("dra-amd.yaml", "dra-intel.yaml"):
        (rules / other).unlink()
    result = run("kueue-config", "-o", "json", "--rules", str(rules))
    assert result.exit_code == 0 and json.loads(result.output) == EXPECTED


def test_a_broken_rule_file_exits_2_naming_file_and_field(tmp_path):
    rules, _ = edited_rules(tmp_path, "pools/kueue.yaml", "strategy: Replace, credits: constants.creditsPerAccelerator}",
                            "strategy: Swap, credits: constants.creditsPerAccelerator}")
    result = run("kueue-config", "--rules", str(rules))
    assert result.exit_code == 2
    line = shipped_line("rules/pools/kueue.yaml", "strategy: Replace, credits: constants.creditsPerAccelerator}")
    assert (f"rules/pools/kueue.yaml:{line}:54 spec.transformations[0].strategy: Input should be 'Replace' or "
            "'Retain'") in result.output


def test_a_row_that_no_longer_fits_the_key_classifier_exits_2(tmp_path):
    rules, _ = edited_rules(tmp_path, "pools/kueue.yaml", 'input: "{base}.sliced.units"\n      family: sliced',
                            'input: "{base}.sliced.units"\n      family: shared')
    result = run("kueue-config", "--rules", str(rules))
    assert result.exit_code == 2
    assert result.output == ("error: KueueConfiguration: transformations[2].input '{base}.sliced.units' gives "
                             "'amd.com/gpu.sliced.units' for manufacturer amd, which classifies as sliced, not shared\n")


def test_an_excluded_input_exits_2(tmp_path):
    rules, _ = edited_rules(tmp_path, "pools/kueue.yaml", 'prefix: "{base}.sliced.cores-"', 'prefix: "{base}.sliced"')
    result = run("kueue-config", "--rules", str(rules))
    assert result.exit_code == 2
    assert result.output == ("error: KueueConfiguration: transformations[2].input 'amd.com/gpu.sliced.units' is "
                             "excluded by prefix 'amd.com/gpu.sliced' (Kueue drops excluded keys before transforming)\n")
