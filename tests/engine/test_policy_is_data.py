"""Changing a preset, a message, a name pattern or the SH reading is an edit in rules/ only.

Each test edits a copy of rules/ and derives the seed with it; no Python changes.
"""
from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest

from runtime.engine.pools.derive import derive
from runtime.engine.policy import Policy
from runtime.rules.loader import DEFAULT_RULES_DIR, RuleLoadError, load_rules
from runtime.snapshots import load_snapshot
from tests.seedfiles import FIXTURES


@pytest.fixture
def rules_copy(tmp_path: Path) -> Path:
    target = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, target)
    return target


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new))


def summaries(rules: Path, step: str = "step1") -> dict[str, str]:
    state = derive(Policy(load_rules(rules)), load_snapshot([FIXTURES / "seed" / step]))
    return {it["metadata"]["name"]: it["status"]["summary"] for it in state.instance_types}


def test_editing_a_preset_changes_the_derived_unit(rules_copy):
    edit(rules_copy / "pools" / "presets.yaml", "- {prefixes: [t4], tier: small}", "- {prefixes: [t4], tier: large}")
    assert summaries(rules_copy)["gpustack--nvidia-tesla-t4-linux-amd64"]["unit"] == "12/128Gi/100Gi"


def test_editing_a_name_pattern_renames_pools_and_entrances(rules_copy):
    edit(rules_copy / "pools" / "derivation.yaml",   # the device pools' names (not the CPU pools')
         """device: 'namePrefix + (aware ?""", """device: '"accel--" + (aware ?""")
    edit(rules_copy / "pools" / "derivation.yaml", "entrancePrefix: gpustack-fnv64-", "entrancePrefix: lq-")
    state = derive(Policy(load_rules(rules_copy)), load_snapshot([FIXTURES / "seed" / "step1"]))
    names = [it["metadata"]["name"] for it in state.instance_types]
    assert names == ["accel--nvidia-a10g-linux-amd64", "accel--nvidia-tesla-t4-linux-amd64",
                     "gpustack--generic-linux-amd64"]
    assert state.instance_types[0]["status"]["entrance"].startswith("lq-")
    assert state.instance_types[0]["metadata"]["labels"]["schedule.gpustack.ai/queue-entrance"].startswith("lq-")


def test_editing_a_message_changes_the_phase_message(rules_copy):
    edit(rules_copy / "pools" / "phase.yaml", "phaseMessage: instance type is terminating",
         "phaseMessage: being retired by an administrator")
    policy = Policy(load_rules(rules_copy))
    snapshot = load_snapshot([FIXTURES / "seed" / "step1"])
    state = derive(policy, snapshot)
    it = copy.deepcopy(next(i for i in state.instance_types if i["metadata"]["name"].endswith("a10g-linux-amd64")))
    it["metadata"]["deletionTimestamp"] = "2026-11-29T00:00:00Z"
    it.pop("status")
    from runtime.engine.snapshot import Snapshot
    deleting = Snapshot.from_objects(list(snapshot) + [it])
    got = next(i for i in derive(policy, deleting).instance_types if i["metadata"]["name"] == it["metadata"]["name"])
    assert got["status"]["phase"] == "Inactive"
    assert got["status"]["phaseMessage"] == "being retired by an administrator"


def test_the_sh_once_max_reading_is_a_rule_option(rules_copy):
    edit(rules_copy / "pools" / "fourview.yaml", "sharedOnceMaxReading: shareSum", "sharedOnceMaxReading: acceleratorCount")
    got = summaries(rules_copy)
    assert got["gpustack--nvidia-a10g-linux-amd64"]["accelerator"] == "1/1 1/10 100/100 0/0"
    assert got["gpustack--nvidia-tesla-t4-linux-amd64"]["accelerator"] == "4/5 4/50 100/500 0/0"


def test_the_default_rules_are_the_seeds(policy):
    assert summaries(DEFAULT_RULES_DIR)["gpustack--nvidia-tesla-t4-linux-amd64"]["accelerator"] == "4/5 40/50 100/500 0/0"


@pytest.mark.parametrize("field, home", [
    ("admissionCheck", "admissionCheck: moved to rules/pools/queues.yaml (kind PoolQueues): delete it here"),
    ("startGuard", "startGuard: moved to rules/controller.yaml (kind ControllerPolicy): delete it here"),
    ("systemNamespace", "systemNamespace: moved to rules/controller.yaml (kind ControllerPolicy): delete it here"),
])
def test_a_derivation_still_holding_a_moved_field_is_refused_naming_its_home(rules_copy, field, home):
    """PoolDerivation was split by concern (docs/changelog.md): an older derivation is never half-read."""
    path = rules_copy / "pools" / "derivation.yaml"
    text = path.read_text()
    path.write_text(text + f"  {field}: {{}}\n")
    with pytest.raises(RuleLoadError) as refused:
        load_rules(rules_copy)
    line, column = text.count("\n") + 1, len(f"  {field}: ") + 1
    assert [str(p) for p in refused.value.problems] == [
        f"rules/pools/derivation.yaml:{line}:{column} spec.{field}: {home.split(': ', 1)[1]}"]
