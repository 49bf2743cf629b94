"""The DRA driver rows' rule tests (kind DraDriverTests, runtime/ruletests.py): NVIDIA's row as shipped
(rules/tests/dra/), and AMD's as docs/reference/dra-rules.md shows adding it (a rules edit, no Python)."""
from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from runtime.cli import main
from runtime.engine.policy import Policy
from runtime.engine.pools.deviceclasses import device_classes
from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules
from runtime.ruletests import load_dra_cases, run_dra_case
from tests.seedfiles import FIXTURES

CASES = load_dra_cases(DEFAULT_RULES_DIR)
AMD = FIXTURES / "dra" / "amd"


def test_the_nvidia_suite_is_present():
    assert [c.id for c in CASES if c.suite == "nvidia"] == [
        "nvidia::the seed's A10G reads as NVML's facts and labels, .cores aside",
        "nvidia::four T4s with an XID-tainted one give node-t4-b's labels, the count of all four (decision 26); "
        "rules/health.yaml takes the XID 79 one out",
        "nvidia::a MIG-on H100 offers nothing, a device that does not parse costs only itself"]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_dra_rule_case(policy, case):
    result = run_dra_case(policy, case)
    assert result.passed, "\n".join(result.problems)


def test_a_failing_case_says_what_differs(policy):
    case = CASES[0]
    case = type(case)(**{**case.__dict__, "expect": {**case.expect, "warnings": ["something"]}})
    assert run_dra_case(policy, case).problems == ['warnings:\n  want ["something"]\n  got  []']


def test_adding_amds_driver_is_a_rules_edit_with_its_rule_test(tmp_path):
    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules)
    shutil.copy(AMD / "driver.yaml", rules / "dra-amd.yaml")
    shutil.copy(AMD / "tests.yaml", rules / "tests" / "dra" / "amd.yaml")
    result = CliRunner().invoke(main, ["test", str(rules), "-k", "amd", "-v"])
    assert result.output == ("ok   amd::a whole MI300X is read and labelled; a partitioned one offers nothing\n"
                             "ok   amd::a GPU without its PCI address is not read\n"
                             "2 passed, 0 failed, 2 cases\n")
    assert result.exit_code == 0
    classes = {c["metadata"]["name"]: c["spec"] for c in device_classes(Policy(load_rules(rules)))}
    assert classes["gpustack-amd-gpu.amd.com"] == {
        "selectors": [{"cel": {"expression": 'device.driver == "gpu.amd.com" && '
                                             'device.attributes["gpu.amd.com"].type == "amdgpu"'}}],
        "extendedResourceName": "amd.com/gpu"}


# the line of the NVIDIA DraDriver row's `driver:` in rules/dra.yaml (messages above it move it)
_NVIDIA_ROW = 1 + (DEFAULT_RULES_DIR / "dra.yaml").read_text().splitlines().index("  driver: gpu.nvidia.com")


@pytest.mark.parametrize("old, new, problem", [
    ("uuid: {attribute: resource.kubernetes.io/pciBusID}", "uuid: {attribute: x, capacity: y}",
     "rules/dra-amd.yaml:16:11 spec.facts.uuid: give exactly one of attribute, capacity, deviceName: true"),
    ("manufacturer: amd", "manufacturer: ati",
     "rules/dra-amd.yaml:10:17 spec.manufacturer: no manufacturer 'ati' in rules/manufacturers.yaml (known: amd, "
     "ascend, cambricon, habana, hygon, iluvatar, intel, metax, mthreads, nvidia, thead)"),
    ("driver: gpu.amd.com", "driver: gpu.nvidia.com",
     f"rules/dra.yaml:{_NVIDIA_ROW}:11 spec.driver: driver 'gpu.nvidia.com' already has a DraDriver row "
     "(rules/dra-amd.yaml:4)"),
])
def test_a_broken_row_is_refused_naming_file_and_field(tmp_path, old, new, problem):
    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules)
    text = (AMD / "driver.yaml").read_text()
    assert old in text
    (rules / "dra-amd.yaml").write_text(text.replace(old, new))
    result = CliRunner().invoke(main, ["lint", str(rules)])
    assert result.exit_code == 1
    assert result.stdout.splitlines()[0] == problem
