"""Pure units with the spec's own numbers: FNV-1a entrances, quantities, presets, normalization."""
from __future__ import annotations

import pytest

from runtime.model import normalize

from runtime.engine.pools import presets
from runtime.engine.pools.instancetypes import entrance

ENTRANCES = {  # docs/concepts/pools-and-flavors.md "Queues and the entrance"
    "gpustack--generic-linux-amd64": "gpustack-fnv64-3b93966fd73eb9ec",
    "gpustack--nvidia-a10g-linux-amd64": "gpustack-fnv64-c4680bb149644f1c",
    "gpustack--nvidia-tesla-t4-linux-amd64": "gpustack-fnv64-6b371caa2da0b799",
    "gpustack--amd-epyc-7r13-linux-amd64": "gpustack-fnv64-8dde992f64a17a2f",
    "gpustack--amd-epyc-7r32-linux-amd64": "gpustack-fnv64-d3390f10cd57a632",
    "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64": "gpustack-fnv64-029fd9550e0c70bd",
    "gpustack--intel-xeon-platinum-8259cl-linux-amd64": "gpustack-fnv64-c6aee2b7b5c4dc6b",
    "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64": "gpustack-fnv64-5b59e508edc027b7",
    "gpustack--nvidia-geforce-rtx-4090-linux-amd64": "gpustack-fnv64-1a7145d0a5248d55",
    "gpustack--nvidia-h100-80gb-hbm3-linux-amd64": "gpustack-fnv64-e4768a65ca0ce96b",
    "gpustack--nvidia-l40s-linux-amd64": "gpustack-fnv64-a730f1dca9e26fca",
    "a10g-12c128g": "gpustack-fnv64-d4c0e6cd72686015",
    "a10g-8c32g": "gpustack-fnv64-8cf5b3114035c84a",
}


@pytest.mark.parametrize("name, expected", sorted(ENTRANCES.items()))
def test_entrance_is_fnv1a_of_the_queue_name(policy, name, expected):
    assert entrance(policy, name) == expected
    assert len(expected) == 31


@pytest.mark.parametrize("value, text", [(100, "100"), (1000, "1k"), (102400, "102400"), (160000, "160k"),
                                         (320000, "320k"), (800000, "800k"), (1600000, "1600k"),
                                         (6400000, "6400k"), (8000000, "8M"), (12800000, "12800k"),
                                         (64000, "64k"), (266666, "266666"), (0, "0")])
def test_decimal_quantities_of_pod_requests_md_8(value, text):
    assert normalize.format_decimal_quantity(value) == text


@pytest.mark.parametrize("mib, text", [(24563, "24Gi"), (16384, "16Gi"), (81559, "80Gi"), (1536, "2Gi"), (512, "512Mi")])
def test_memory_formatting_rounds_half_up(mib, text):
    assert normalize.format_memory_mib(mib) == text


@pytest.mark.parametrize("value, text", [(24 * 2**30, "24Gi"), (1536 * 2**20, "1536Mi"), (1920 * 2**20, "1920Mi")])
def test_binary_quantities(value, text):
    assert normalize.format_binary_quantity(value) == text


PRESET_VECTORS = [  # docs/tasks/add-manufacturer-or-preset.md "A product without a preset"
    ("nvidia", "NVIDIA-A10G", "8", "64Gi"), ("nvidia", "Tesla-T4", "8", "32Gi"), ("nvidia", "Tesla T4", "8", "32Gi"),
    ("nvidia", "NVIDIA H100 80GB HBM3", "12", "192Gi"), ("nvidia", "NVIDIA-H100-80GB-HBM3", "12", "192Gi"),
    ("nvidia", "NVIDIA H100 PCIe", "12", "192Gi"), ("nvidia", "NVIDIA H100 NVL", "12", "192Gi"),
    ("nvidia", "H100", "12", "192Gi"), ("nvidia", "NVIDIA GB10", "8", "32Gi"),
    ("nvidia", "NVIDIA A100 80GB PCIe", "12", "128Gi"), ("nvidia", "NVIDIA A100-SXM4-40GB", "8", "64Gi"),
    ("nvidia", "NVIDIA A100", "8", "64Gi"), ("nvidia", "NVIDIA A100 140GB", "8", "64Gi"),
    ("nvidia", "NVIDIA A100 80GB 40GB", "12", "128Gi"), ("nvidia", "NVIDIA A10", "8", "64Gi"),
    ("nvidia", "NVIDIA GeForce RTX 4090", "8", "64Gi"), ("nvidia", "NVIDIA GeForce RTX 4090 D", "8", "64Gi"),
    ("nvidia", "Quadro RTX 6000", "8", "32Gi"), ("nvidia", "NVIDIA L40S", "12", "128Gi"),
    ("nvidia", "Tesla V100-SXM2-32GB", "8", "64Gi"), ("nvidia", "Tesla V100-SXM2-16GB", "8", "32Gi"),
    ("nvidia", "NVIDIA RTX 5070", "4", "16Gi"), ("nvidia", "", "4", "16Gi"), ("nvidia", "NVIDIA", "4", "16Gi"),
    ("nvidia", "Tesla", "4", "16Gi"), ("nvidia", "!!!", "4", "16Gi"), ("kunlun", "P800", "4", "16Gi"),
    ("ascend", "910B2", "8", "64Gi"), ("ascend", "Ascend910B2", "8", "64Gi"), ("ascend", "910B4-1", "8", "64Gi"),
    ("ascend", "310P3", "8", "64Gi"), ("ascend", "910_9382", "12", "192Gi"), ("amd", "MI300X", "12", "192Gi"),
    ("amd", "AMD Instinct MI300X", "12", "192Gi"), ("hygon", "K100_AI", "12", "128Gi"),
    ("cambricon", "MLU370-X8", "8", "64Gi"), ("cambricon", "MLU", "4", "16Gi"), ("mthreads", "MTT S4000", "8", "64Gi"),
]


@pytest.mark.parametrize("manufacturer, product, cpu, ram", PRESET_VECTORS)
def test_preset_vectors(policy, manufacturer, product, cpu, ram):
    assert presets.unit_for(policy, manufacturer, product) == {"cpu": cpu, "ram": ram}


@pytest.mark.parametrize("manufacturer, product, why", [
    ("nvidia", "Tesla-T4", ""), ("nvidia", "NVIDIA RTX 5070", "noMatch"), ("nvidia", "", "noMatch"),
    ("nvidia", "NVIDIA A2", "noMatch"), ("kunlun", "P800", "undetectable"), ("acme", "X1", "undetectable"),
])
def test_preset_miss_says_why_the_fallback_tier_was_taken(policy, manufacturer, product, why):
    assert presets.preset_miss(policy, manufacturer, product) == why
    assert (presets.match_tier(policy, manufacturer, product) == policy.presets.fallbackTier) == bool(why)


def test_preset_tokens_examples(policy):
    assert presets.product_tokens(policy, "nvidia", "NVIDIA A100 140GB") == ["a100", "140gb"]
    assert presets.product_tokens(policy, "nvidia", "NVIDIA GeForce RTX 4090 D") == ["rtx", "4090", "d"]


@pytest.mark.parametrize("name, prefix, expected", [
    ("NVIDIA A10G", "nvidia", "a10g"), ("Tesla T4", "nvidia", "tesla-t4"),
    ("NVIDIA H100 80GB HBM3", "nvidia", "h100-80gb-hbm3"), ("NVIDIA GeForce RTX 4090", "nvidia", "geforce-rtx-4090"),
    ("AMD64 X", "amd", "64-x"),
])
def test_normalize_name_group_ids(name, prefix, expected):
    assert normalize.normalize_name(name, prefix, 0, None) == expected


@pytest.mark.parametrize("value, expected", [("NVIDIA A10G", "NVIDIA-A10G"), ("Tesla T4", "Tesla-T4"),
                                             ("a.b_c-1 2  -  3  .  ", "a.b_c-1-2-3")])
def test_sanitize_label_value(value, expected):
    assert normalize.sanitize_label_value(value) == expected
