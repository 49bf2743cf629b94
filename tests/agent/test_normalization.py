"""Worked normalization examples of docs/agent.md "Normalization"."""
from __future__ import annotations

import pytest

from runtime.engine.devices.nodefacts import (accelerator_groups, adjusted_memory_mib, compute_capability, family,
                                      group_id, runtime_version)
from runtime.model.normalize import format_memory_mib, sanitize_label_value
from runtime.model.facts import AcceleratorFacts


@pytest.mark.parametrize("name, mib, with_memory, gid", [
    ("NVIDIA A10G", 24563, False, "a10g"),
    ("Tesla T4", 16384, False, "tesla-t4"),
    ("NVIDIA H100 80GB HBM3", 81559, False, "h100-80gb-hbm3"),
    ("NVIDIA GeForce RTX 4090", 24564, False, "geforce-rtx-4090"),
    ("Tesla T4", 16384, True, "tesla-t4-16g"),
    ("Tiny", 512, True, "tiny-1g"),
    ("Empty", 0, True, "empty-0g"),
])
def test_group_ids(policy, name, mib, with_memory, gid):
    assert group_id(policy, "nvidia", name, mib, with_memory) == gid
    assert f"nvidia-{gid}" == "nvidia-" + group_id(policy, "nvidia", name, mib, with_memory)


@pytest.mark.parametrize("text, out", [
    ("NVIDIA A10G", "NVIDIA-A10G"), ("Tesla T4", "Tesla-T4"), ("a.b_c-1 2  -  3  .  ", "a.b_c-1-2-3"),
])
def test_sanitize_label_value(text, out):
    assert sanitize_label_value(text) == out


def _acc(**kw):
    base = dict(manufacturer="nvidia", uuid="GPU-x", index=0, name="X", memoryMib=0)
    base.update(kw)
    return AcceleratorFacts(**base)


@pytest.mark.parametrize("total, bus, ecc, adjusted, label", [
    (23028, 384, True, 24563, "24Gi"),      # A10G
    (15360, 256, True, 16384, "16Gi"),      # T4
    (81559, 5120, True, 81559, "80Gi"),     # H100 80GB HBM3: HBM, no adjustment
    (15360, 256, False, 15360, "15Gi"),     # ECC off: no adjustment
    (15360, 0, True, 15360, "15Gi"),        # bus width unreadable: no adjustment
])
def test_memory_with_ecc(policy, total, bus, ecc, adjusted, label):
    mib = adjusted_memory_mib(policy, _acc(memoryMib=total, memoryBusWidth=bus, eccEnabled=ecc))
    assert mib == adjusted
    assert format_memory_mib(mib) == label


def test_ecc_rule_is_nvidia_only(policy):
    assert adjusted_memory_mib(policy, _acc(manufacturer="amd", memoryMib=15360, memoryBusWidth=256,
                                            eccEnabled=True)) == 15360


@pytest.mark.parametrize("major, minor, fam", [
    (1, 0, "Tesla"), (2, 1, "Fermi"), (3, 5, "Kepler"), (5, 2, "Maxwell"), (6, 1, "Pascal"),
    (7, 0, "Volta"), (7, 2, "Volta"), (7, 5, "Turing"), (8, 0, "Ampere"), (8, 6, "Ampere"),
    (8, 9, "Ada-Lovelace"), (9, 0, "Hopper"), (10, 0, "Blackwell"), (12, 0, "Blackwell"), (4, 0, ""), (11, 0, ""),
])
def test_family_table(policy, major, minor, fam):
    assert family(policy, "nvidia", major, minor) == fam


def test_family_only_for_nvidia(policy):
    assert family(policy, "amd", 8, 6) == ""


@pytest.mark.parametrize("major, minor, text", [(8, 6, "8.6"), (7, 5, "7.5"), (0, 0, ""), (0, 5, "")])
def test_compute_capability(major, minor, text):
    assert compute_capability(major, minor) == text


@pytest.mark.parametrize("value, text", [(13000, "13.0"), (12040, "12.4"), (12020, "12.2"), (0, ""), (-1, "")])
def test_runtime_version(policy, value, text):
    assert runtime_version(policy, value) == text


def test_groups_by_name_and_memory_with_collision_suffix(policy):
    accs = [_acc(uuid="a", index=1, name="Tesla T4", memoryMib=15360, memoryBusWidth=256, eccEnabled=True),
            _acc(uuid="b", index=0, name="Tesla T4", memoryMib=15360, memoryBusWidth=256, eccEnabled=False),
            _acc(uuid="c", index=2, name="NVIDIA A10G", memoryMib=23028, memoryBusWidth=384, eccEnabled=True)]
    groups = accelerator_groups(policy, accs)
    # same name, different memory -> two groups that would both be tesla-t4: both get the suffix
    assert [(g.id, [a.uuid for a in g.accelerators]) for g in groups] == [
        ("tesla-t4-15g", ["b"]), ("tesla-t4-16g", ["a"]), ("a10g", ["c"])]


def test_unknown_manufacturer_is_named(policy):
    with pytest.raises(ValueError, match="unknown manufacturer 'acme'"):
        accelerator_groups(policy, [_acc(manufacturer="acme")])
