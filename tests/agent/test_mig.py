"""The three MIG configurations of docs/concepts/four-views.md "The partitioned side": profiles, counts, node capacity keys and the carve
example's ledger (docs/agent.md "The Devices object and its ledger" and "Capacity and fit labels")."""
from __future__ import annotations

from tests.agent.helpers import H100, entry, group, pod

GID = "h100-80gb-hbm3"
MIG = "nvidia.com/gpu.partitioned.mig-"
PROFILES = ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
INVENTORY = {  # docs/concepts/four-views.md "The partitioned side": memoryMib, computeSlices, memorySlices, count, legal starts
    "1g.10gb": (10240, 1, 1, 7, [0, 1, 2, 3, 4, 5, 6]), "1g.20gb": (20480, 1, 2, 4, [0, 2, 4, 6]),
    "2g.20gb": (20480, 2, 2, 3, [0, 2, 4]), "3g.40gb": (40960, 3, 4, 2, [0, 4]),
    "4g.40gb": (40960, 4, 4, 1, [0]), "7g.80gb": (81920, 7, 8, 1, [0]),
}
SLICED_ZERO = {"nvidia.com/gpu.sliced.units": "0", "nvidia.com/gpu.sliced.cores-percentage": "0",
               "nvidia.com/gpu.sliced.memory-percentage": "0", "nvidia.com/gpu.sliced.memory-mib": "0"}
CARVE = pod("carve", [group(GID, entry(H100.format(0), 0, 4, 800000, "3g.40gb", [(0, 4)]))])
FRESH_REMAINING = [{"name": "1g.10gb", "count": 7}, {"name": "1g.20gb", "count": 4}, {"name": "2g.20gb", "count": 3},
                   {"name": "3g.40gb", "count": 2}, {"name": "4g.40gb", "count": 1}, {"name": "7g.80gb", "count": 1}]
CARVED_GPU0 = {"id": H100.format(0), "index": 0, "mode": 4, "allocated": 800000, "remaining": 800000,
               "allocatedProfiles": [{"name": "3g.40gb", "count": 1}],
               "remainingProfiles": [{"name": "1g.10gb", "count": 3}, {"name": "1g.20gb", "count": 2},
                                     {"name": "2g.20gb", "count": 1}, {"name": "3g.40gb", "count": 1},
                                     {"name": "4g.40gb", "count": 0}, {"name": "7g.80gb", "count": 0}]}


def _capacity(p):
    return p.node_patch["status"]["capacity"]


def _mig_keys(values):
    return {f"{MIG}{name}": str(v) for name, v in zip(PROFILES, values)}


def test_config1_all_logical(plan):
    p = plan("node-h100-mig-off")
    assert _capacity(p) == {"nvidia.com/gpu.sliced.units": "12800k", "nvidia.com/gpu.sliced.cores-percentage": "102400",
                            "nvidia.com/gpu.sliced.memory-percentage": "800", "nvidia.com/gpu.sliced.memory-mib": "655360",
                            "nvidia.com/gpu.partitioned.units": "0"}
    for acc in p.devices["spec"]["groups"][0]["accelerators"]:
        assert acc["status"]["logicalSliced"] == {"count": 128, "coresPercentageOvercommit": True}
        assert acc["status"]["physicalSliced"] == {"count": 0}
    assert p.device_manager["spec"]["labels"]["acceleratable.feature.gpustack.ai/nvidia-h100-80gb-hbm3.memory"] == "80Gi"


def test_config2_profiles_per_accelerator(plan):
    p = plan("node-h100-mig-on")
    group_spec = p.devices["spec"]["groups"][0]
    assert group_spec["id"] == GID and len(group_spec["accelerators"]) == 8
    for acc in group_spec["accelerators"]:
        status = acc["status"]
        assert status["logicalSliced"]["count"] == 0
        assert status["physicalSliced"]["count"] == 7
        profiles = status["physicalSliced"]["profiles"]
        assert [pr["name"] for pr in profiles] == PROFILES          # 1g.10gb+me excluded (docs/agent.md "The Devices object and its ledger")
        for pr in profiles:
            mem, cs, ms, count, starts = INVENTORY[pr["name"]]
            assert (pr["memoryMib"], pr["computeSlices"], pr["memorySlices"], pr["count"]) == (mem, cs, ms, count)
            assert pr["placements"] == [{"start": s, "length": ms} for s in starts]


def test_config2_fresh_capacity_and_ledger(plan):
    p = plan("node-h100-mig-on")
    assert _capacity(p) == {**_mig_keys([56, 32, 24, 16, 8, 8]), "nvidia.com/gpu.partitioned.units": "12800k",
                            **SLICED_ZERO}
    for acc in p.devices["status"]["groups"][0]["accelerators"]:
        assert acc["mode"] == 0 and acc["remaining"] == 1600000
        assert acc["remainingProfiles"] == FRESH_REMAINING
        assert "allocatedProfiles" not in acc


def test_config2_after_one_3g40gb_carve(plan):
    p = plan("node-h100-mig-on", pods=[CARVE])
    accs = p.devices["status"]["groups"][0]["accelerators"]
    assert accs[0] == CARVED_GPU0
    assert all(a["remainingProfiles"] == FRESH_REMAINING for a in accs[1:])
    # per-profile key = sum of allocated + remaining instances (docs/concepts/four-views.md "The partitioned side")
    assert _capacity(p) == {**_mig_keys([52, 30, 22, 16, 7, 7]), "nvidia.com/gpu.partitioned.units": "12800k",
                            **SLICED_ZERO}
    assert p.events == []


def test_config3_mixed_fresh(plan):
    p = plan("node-h100-mig-mixed")
    assert _capacity(p) == {**_mig_keys([21, 12, 9, 6, 3, 3]), "nvidia.com/gpu.partitioned.units": "4800k",
                            "nvidia.com/gpu.sliced.units": "8M", "nvidia.com/gpu.sliced.cores-percentage": "64k",
                            "nvidia.com/gpu.sliced.memory-percentage": "500",
                            "nvidia.com/gpu.sliced.memory-mib": "409600"}
    accs = p.devices["spec"]["groups"][0]["accelerators"]
    assert [a["index"] for a in accs if a["status"]["physicalSliced"]["count"] > 0] == [0, 1, 2]
    assert [a["index"] for a in accs if a["status"]["logicalSliced"]["count"] > 0] == [3, 4, 5, 6, 7]


def test_config3_with_a_carve_and_a_half_slice(plan):
    half = pod("half", [group(GID, entry(H100.format(5), 5, 3, 800000))])
    p = plan("node-h100-mig-mixed", pods=[CARVE, half])
    accs = {a["index"]: a for a in p.devices["status"]["groups"][0]["accelerators"]}
    assert accs[5] == {"id": H100.format(5), "index": 5, "mode": 3, "allocated": 800000, "remaining": 800000,
                       "allocatedSlices": 1}
    assert accs[0] == CARVED_GPU0
    cap = _capacity(p)
    assert {k: v for k, v in cap.items() if k.startswith(MIG)} == _mig_keys([17, 10, 7, 6, 2, 2])
    assert cap["nvidia.com/gpu.partitioned.units"] == "4800k"
    # capacity of the sliced keys is capability: a held slice does not change it
    assert cap["nvidia.com/gpu.sliced.units"] == "8M"


def test_back_to_all_logical_keeps_published_keys_at_zero(plan):
    published = {**_mig_keys([56, 32, 24, 16, 8, 8]), "nvidia.com/gpu.partitioned.units": "12800k",
                 "nvidia.com/gpu": "0", "example.com/other": "3"}
    cap = _capacity(plan("node-h100-mig-off", capacity=published))
    assert {k: v for k, v in cap.items() if k.startswith(MIG)} == _mig_keys([0] * 6)
    assert cap["nvidia.com/gpu.partitioned.units"] == "0"
    assert cap["nvidia.com/gpu.sliced.units"] == "12800k"
    # keys the agent does not own are never in its patch
    assert "nvidia.com/gpu" not in cap and "example.com/other" not in cap
