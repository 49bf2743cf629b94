"""`accelpolicy diff --rules NEW --snapshot ...`: the reload gate's trial of an edited rules copy on the
seed fixtures, printed exactly (what it does to the pools, verdicts, costs keyed by policy and rule,
held or refused, and the verdict); exit codes as `kubectl diff`'s (0 none, 1 differences, held and refused
included, 2 an error, never a traceback)."""
from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from runtime.cli import main
from runtime.rules.loader import DEFAULT_RULES_DIR
from tests.controller.test_reload_gate import EVAL_ERROR, EVAL_TEXT, RULE_1A, _edit

SEED = ["--snapshot", "tests/fixtures/seed/common"]
AUDIT = SEED + ["--snapshot", "tests/fixtures/audit/seed-cluster"]
PRESET = ("      - {prefixes: [a10, a10g], tier: medium}\n", "      - {prefixes: [a10, a10g], tier: large}\n")


@pytest.fixture
def new(tmp_path):
    target = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, target)
    shutil.rmtree(target / "tests")
    return target


def _diff(*args):
    return CliRunner().invoke(main, ["diff", "--current", str(DEFAULT_RULES_DIR), *map(str, args)])


def test_the_same_rules_differ_in_nothing(new):
    result = _diff("--rules", new, *AUDIT)
    assert (result.exit_code, result.output) == (0, "")


def test_a_threshold_and_a_rule_edit_change_pool_status_and_a_verdict(new):
    _edit(new / "constants.yaml", "sharesPerAccelerator: 10 ", "sharesPerAccelerator: 20 ")
    _edit(new / "admission" / "pods.yaml", RULE_1A, "      expression: size(variables.families) <= 2\n")
    result = _diff("--rules", new, *AUDIT)
    shared = ('status.acceleratorShared.capacity: "{0}" -> "{1}", status.acceleratorShared.onceMaxRequest: "{2}" -> '
              '"{3}", status.acceleratorShared.remaining: "{0}" -> "{1}", status.summary.accelerator: "{4}" -> "{5}"')
    a10g = shared.format(10, 20, 10, 20, "1/1 10/10 100/100 0/0", "1/1 20/20 100/100 0/0")
    assert result.output.splitlines() == [
        "pool objects (3):",
        f"  changed InstanceType gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64: {a10g}",
        f"  changed InstanceType gpustack--nvidia-a10g-linux-amd64: {a10g}",
        "  changed InstanceType gpustack--nvidia-tesla-t4-linux-amd64: "
        + shared.format(50, 100, 40, 80, "4/5 40/50 100/500 0/0", "4/5 80/100 100/500 0/0"),
        "verdicts (1):",
        "  pods-validation/one-accelerator-family Pod default/two-families: denied -> allowed",
        "verdict: serves"]
    assert result.exit_code == 1


def test_a_name_pattern_edit_creates_and_deletes_the_local_queues(new):
    _edit(new / "pools" / "derivation.yaml", "entrancePrefix: gpustack-fnv64-", "entrancePrefix: pool-")
    result = _diff("--rules", new, *SEED)
    entrances = {"generic-linux-amd64": "3b93966fd73eb9ec", "nvidia-a10g-linux-amd64": "c4680bb149644f1c",
                 "nvidia-tesla-t4-linux-amd64": "6b371caa2da0b799"}
    assert result.output.splitlines() == (
        ["pool objects (9):"]
        + [f"  created LocalQueue default/pool-{h}" for h in ("3b93966fd73eb9ec", "c4680bb149644f1c",
                                                             "6b371caa2da0b799")]
        + [f"  deleted LocalQueue default/gpustack-fnv64-{h}" for h in sorted(entrances.values())]
        + [f'  changed InstanceType gpustack--{t}: status.entrance: "gpustack-fnv64-{h}" -> "pool-{h}"'
           for t, h in entrances.items()] + ["verdict: serves"])
    assert result.exit_code == 1


def test_an_edit_the_gate_would_refuse_exits_1_and_says_why(new):
    _edit(new / "admission" / "pods.yaml", RULE_1A, EVAL_ERROR)
    result = _diff("--rules", new, *AUDIT)
    assert result.output.splitlines() == [
        "costs (1):",
        "  AdmissionPolicy/pods-validation spec.validations[one-accelerator-family].expression: 4 -> 11",
        "refused (replay-object) (1):",
        f"  Pod default/two-families: {EVAL_TEXT}",
        "verdict: refused (replay-object)"]
    assert result.exit_code == 1


def test_costs_are_keyed_by_policy_and_rule_so_an_inserted_rule_moves_no_line(new):
    """A rule inserted before another shifts every list position after it; keyed by name only the new
    rule shows."""
    pods = new / "admission" / "pods.yaml"
    text = pods.read_text()
    first = text.index("  validations:\n", text.index("name: pods-validation")) + len("  validations:\n")
    pods.write_text(text[:first] + "    - name: a-new-rule\n      expression: size(object.metadata.name) < 300\n"
                    "      reason: Forbidden\n      message: name too long\n" + text[first:])
    result = _diff("--rules", new, *AUDIT)
    costs = result.output.split("costs (")[1].splitlines()
    assert costs[0] == "1):" and costs[1].startswith(
        "  AdmissionPolicy/pods-validation spec.validations[a-new-rule].expression: 0 -> ")
    assert result.exit_code == 1


def test_expression_false_is_held_against_the_existing_objects(new):
    _edit(new / "admission" / "instancetypes.yaml", "      expression: >-\n        dig(object, ['spec', item], null) == "
          "variables.was\n        || (item in params.fillableDescriptors && isEmpty(variables.was))\n",
          '      expression: "false"\n')      # every InstanceType update denied (the audit judges them as one)
    result = _diff("--rules", new, *AUDIT)
    lines = result.output.splitlines()
    assert lines[-3:] == [
        "held (1):",
        "  it newly denies 4 of 12 existing object(s) (33%, more than hold.maxNewDenialsPercent 5%)",
        "verdict: held (until its hash is approved: accelpolicy approve)"]
    assert result.exit_code == 1


def test_a_pool_emptying_edit_says_what_it_takes_and_is_held(new):
    _edit(new / "labels.yaml", "    managed: gpustack.ai/managed\n", "    managed: gpustack.ai/manged\n")
    result = _diff("--rules", new, *AUDIT)
    out = result.output
    assert "pools left without flavors (kept, not drained) (4):\n  gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64\n" in out
    assert "capacity removed (" in out and "  InstanceType gpustack--nvidia-tesla-t4-linux-amd64 accelerator: capacity 5 -> 0 " \
        "(-100%)\n" in out
    assert "  it removes more than 25% of the capacity of 4 pool(s) (hold.maxCapacityRemovedPercent): " in out
    assert out.endswith("verdict: held (until its hash is approved: accelpolicy approve)\n") and result.exit_code == 1


def test_a_preset_edit_says_the_existing_instance_types_keep_theirs(new):
    _edit(new / "pools" / "presets.yaml", *PRESET)
    result = _diff("--rules", new, *AUDIT)
    assert "presets (" in result.output
    line = next(ln for ln in result.output.splitlines() if "keeps unitResources" in ln)
    assert line == ("  InstanceType gpustack--nvidia-a10g-linux-amd64 keeps unitResources cpu=8 ram=64Gi: a preset is "
                    "written when a type is created; the edited one gives cpu=12 ram=128Gi to those created from now on")
    assert result.exit_code == 1


def test_an_unexpected_failure_is_one_line_and_exit_2(new, monkeypatch):
    import runtime.reload.consequences as consequences

    def broken(*args, **kwargs):
        raise ZeroDivisionError("division by zero")
    monkeypatch.setattr(consequences, "consequences", broken)
    result = _diff("--rules", new, *AUDIT)
    assert (result.exit_code, result.output) == (2, "error: diff failed: ZeroDivisionError: division by zero\n")


def test_bad_input_exits_2(new, tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nope.yaml"))   # no --snapshot: the live cluster, none here
    live = _diff("--rules", new)
    assert live.exit_code == 2
    assert live.output.startswith(f"error: no configuration has been provided ({tmp_path / 'nope.yaml'}: ")
    assert live.output.endswith("give --kubeconfig FILE or set KUBECONFIG, or --snapshot PATH to read files instead\n")
    (new / "constants.yaml").write_text("kind: [\n")
    broken = _diff("--rules", new, *SEED)
    assert broken.exit_code == 2 and "rule files refused" in broken.output
