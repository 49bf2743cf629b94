"""docs/node-facts-robustness.md "Device group IDs are unique per node": Devices group IDs are unique per node. Two groups whose memory rounds to the same
GiB, or whose long names are cut to the same slug, used to share an ID (4 accelerators, ``count: 2``,
nothing said). Now each gets ``-<8 hex of fnv64a("<name>/<MiB>")>``; a collision that survives even
that is refused with a message naming both groups."""
from __future__ import annotations

import shutil

import pytest

from runtime.engine.devices.agentlabels import device_manager_labels
from runtime.engine.devices.nodefacts import accelerator_groups
from runtime.engine.policy import Policy
from runtime.model.facts import AcceleratorFacts
from runtime.model.normalize import fnv64a_hex
from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules

ACC = "acceleratable.feature.gpustack.ai/"
LONG = "NVIDIA Super Long Accelerator Product Name Generation Twelve Edition Variant "


def _cards(*name_mib: tuple[str, int]) -> list[AcceleratorFacts]:
    return [AcceleratorFacts(manufacturer="nvidia", uuid=f"GPU-{i}", index=i, name=name, memoryMib=mib)
            for i, (name, mib) in enumerate(name_mib)]


@pytest.mark.parametrize("with_memory", [False, True])
def test_memory_that_rounds_to_the_same_gib(policy, with_memory):
    cards = _cards(("Tesla T4", 15360), ("Tesla T4", 15360), ("Tesla T4", 15600), ("Tesla T4", 15600))
    groups = accelerator_groups(policy, cards, with_memory)
    assert [(g.id, [a.index for a in g.accelerators]) for g in groups] == [
        (f"tesla-t4-15g-{fnv64a_hex('Tesla T4/15360')[:8]}", [0, 1]),
        (f"tesla-t4-15g-{fnv64a_hex('Tesla T4/15600')[:8]}", [2, 3])]
    assert [g.id for g in groups] == ["tesla-t4-15g-77445afc", "tesla-t4-15g-5c7555fc"]
    labels = device_manager_labels(policy, groups)
    assert {k: v for k, v in labels.items() if k.endswith(".count")} == {
        f"{ACC}nvidia-tesla-t4-15g-77445afc.count": "2", f"{ACC}nvidia-tesla-t4-15g-5c7555fc.count": "2"}


def test_long_names_cut_to_the_same_slug(policy):
    cards = _cards((LONG + "A", 24576), (LONG + "A", 24576), (LONG + "B", 24576), (LONG + "B", 24576))
    groups = accelerator_groups(policy, cards)
    ids = [g.id for g in groups]
    assert ids == ["super-long-accelerator-product-name-ge-08ed3072",
                   "super-long-accelerator-product-name-ge-74581922"]
    # decision 13: the longest derived key name (<aKey>.capacity) stays within 63 characters
    assert all(len(f"nvidia-{i}.capacity") <= 63 for i in ids)
    assert [len(g.accelerators) for g in groups] == [2, 2]


def test_a_plain_name_keeps_its_plain_id(policy):
    """No collision, no suffix: the seed's IDs do not move."""
    assert [g.id for g in accelerator_groups(policy, _cards(("Tesla T4", 15360), ("NVIDIA A10G", 24563)))] == \
        ["tesla-t4", "a10g"]


def test_a_collision_that_survives_is_refused_naming_both_groups(tmp_path):
    """With one hex digit, ``Tesla T4/15360`` and ``Tesla T4/15361`` both hash to ``7``."""
    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules)
    path = rules / "node-facts.yaml"
    path.write_text(path.read_text().replace("groupIdHashDigits: 8", "groupIdHashDigits: 1"))
    policy = Policy(load_rules(rules))
    with pytest.raises(ValueError) as err:
        accelerator_groups(policy, _cards(("Tesla T4", 15360), ("Tesla T4", 15361)))
    assert str(err.value) == ("accelerator groups 'Tesla T4 (15360 MiB)' and 'Tesla T4 (15361 MiB)' of nvidia "
                              "both get the group ID 'tesla-t4-15g-7'; refusing to merge them")
