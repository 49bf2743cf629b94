"""`accelpolicy diff --rules NEW --snapshot ...`: the reload gate's trial of an edited rules copy on the
seed fixtures, printed exactly; exit codes as `kubectl diff`'s (0 none, 1 differences, 2 an error)."""
from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from runtime.cli import main
from runtime.rules.loader import DEFAULT_RULES_DIR
from tests.controller.test_reload_gate import EVAL_ERROR, EVAL_TEXT, RULE_1A, _edit

SEED = ["--snapshot", "tests/fixtures/seed/common"]
AUDIT = SEED + ["--snapshot", "tests/fixtures/audit/seed-cluster"]


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
        "  pods-validation/one-accelerator-family Pod default/two-families: denied -> allowed"]
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
           for t, h in entrances.items()])
    assert result.exit_code == 1


def test_an_edit_the_gate_would_refuse_exits_2_and_says_why(new):
    _edit(new / "admission" / "pods.yaml", RULE_1A, EVAL_ERROR)
    result = _diff("--rules", new, *AUDIT)
    assert result.output.splitlines() == [
        "costs (1):", "  admission/pods.yaml spec.validations[1].expression: 4 -> 11",
        "refused (replay-object) (1):",
        f"  Pod default/two-families: {EVAL_TEXT}"]
    assert result.exit_code == 2


def test_bad_input_exits_2(new, tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nope.yaml"))   # no --snapshot: the live cluster, none here
    live = _diff("--rules", new)
    assert live.exit_code == 2
    assert live.output.startswith(f"error: no configuration has been provided ({tmp_path / 'nope.yaml'}: ")
    assert live.output.endswith("give --kubeconfig FILE or set KUBECONFIG, or --snapshot PATH to read files instead\n")
    (new / "constants.yaml").write_text("kind: [\n")
    broken = _diff("--rules", new, *SEED)
    assert broken.exit_code == 2 and "rule files refused" in broken.output
