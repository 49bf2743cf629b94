"""Four-view arithmetic: the worked examples #1-#9 of docs/concepts/four-views.md "The four views" as unit tests of
``runtime.engine.pools.fourview.compute``, under both SH onceMaxRequest readings (docs/concepts/four-views.md "The four views").

The ``acceleratorCount`` reading is selected the way an operator would: by editing a copy of
``rules/`` (rules/pools/fourview.yaml ``spec.sharedOnceMaxReading``), never in Python.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from runtime.engine.pools import fourview
from runtime.engine.pools.instancetypes import devices_selector, matches, schedule_labels
from runtime.engine.policy import Policy
from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules

D = 1_600_000
A10G = "nvidia-a10g"
T4 = "nvidia-tesla-t4"
H100 = "nvidia-h100-80gb-hbm3"
H100_PROFILES = [  # docs/concepts/four-views.md "The partitioned side" (placements are not read by the four-view)
    {"name": "1g.10gb", "memoryMib": 10240, "count": 7}, {"name": "1g.20gb", "memoryMib": 20480, "count": 4},
    {"name": "2g.20gb", "memoryMib": 20480, "count": 3}, {"name": "3g.40gb", "memoryMib": 40960, "count": 2},
    {"name": "4g.40gb", "memoryMib": 40960, "count": 1}, {"name": "7g.80gb", "memoryMib": 81920, "count": 1},
]


@pytest.fixture(scope="module")
def default_policy() -> Policy:
    return Policy(load_rules())


@pytest.fixture(scope="module")
def option_policy(tmp_path_factory) -> Policy:
    """A Policy whose copy of rules/ selects ``sharedOnceMaxReading: acceleratorCount``."""
    root = tmp_path_factory.mktemp("rules-option") / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, root)
    path = root / "pools" / "fourview.yaml"
    text = path.read_text()
    assert "sharedOnceMaxReading: shareSum" in text
    path.write_text(text.replace("sharedOnceMaxReading: shareSum", "sharedOnceMaxReading: acceleratorCount"))
    policy = Policy(load_rules(root))
    assert policy.fourview.sharedOnceMaxReading == "acceleratorCount"
    return policy


def _accel(i: int, mig: bool = False, unhealthy: bool = False) -> dict:
    status = {"unhealthy": unhealthy,
              "logicalSliced": {"count": 0 if mig else 128, "coresPercentageOvercommit": True},
              "physicalSliced": {"count": 7, "profiles": H100_PROFILES} if mig else {"count": 0}}
    return {"id": f"GPU-{i}", "index": i, "status": status}


def devices(node: str, akey: str, ledger: list[dict | None], mig: bool = False, managed: str = "true",
            unhealthy: tuple[int, ...] = ()) -> dict:
    """A Devices object with ``len(ledger)`` accelerators of ``akey``; a ``None`` ledger entry leaves
    that accelerator without a ledger row."""
    manu, gid = akey.split("-", 1)
    rows = [dict({"id": f"GPU-{i}", "index": i}, **entry) for i, entry in enumerate(ledger) if entry is not None]
    return {
        "apiVersion": "worker.gpustack.ai/v1", "kind": "Devices",
        "metadata": {"name": node, "labels": {
            "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "gpustack.ai/managed": managed,
            "general.feature.gpustack.ai/amd-epyc-7r32": "true", f"acceleratable.feature.gpustack.ai/{akey}": "true"}},
        "spec": {"groups": [{"id": gid, "manufacturer": manu,
                             "accelerators": [_accel(i, mig, i in unhealthy) for i in range(len(ledger))]}]},
        "status": {"groups": [{"id": gid, "manufacturer": manu, "accelerators": rows}]},
    }


FREE = {"mode": 0, "remaining": D}
SEED_T4 = [devices("node-t4-a", T4, [FREE]), devices("node-t4-b", T4, [FREE] * 4)]

# (id, devices, aKey, EX, SH default, SH option, SL, PT, capacities EX/SH/SL/PT) — docs/concepts/four-views.md "The four views"
EXAMPLES = [
    ("1-a10g-idle", [devices("node-a10g", A10G, [FREE])], A10G,
     "1/1", "10/10", "1/10", "100/100", "0/0", (1, 10, 100, 0)),
    ("2-a10g-20pct-slice", [devices("node-a10g", A10G, [{"mode": 3, "allocated": 320000, "remaining": 1280000,
                                                         "allocatedSlices": 1}])], A10G,
     "0/0", "0/0", "0/0", "80/80", "0/0", (1, 10, 100, 0)),
    ("3-a10g-whole-held", [devices("node-a10g", A10G, [{"mode": 1, "allocated": D}])], A10G,
     "0/0", "0/0", "0/0", "0/0", "0/0", (1, 10, 100, 0)),
    ("5-t4-idle", SEED_T4, T4,
     "4/5", "40/50", "4/50", "100/500", "0/0", (5, 50, 500, 0)),
    ("6-a10g-one-shared", [devices("node-a10g", A10G, [{"mode": 2, "allocated": 160000, "remaining": 1440000}])], A10G,
     "0/0", "9/9", "1/9", "0/0", "0/0", (1, 10, 100, 0)),
    ("7-a10g-20-and-30pct", [devices("node-a10g", A10G, [{"mode": 3, "allocated": 800000, "remaining": 800000,
                                                          "allocatedSlices": 2}])], A10G,
     "0/0", "0/0", "0/0", "50/50", "0/0", (1, 10, 100, 0)),
    ("8-t4-one-whole-held", [devices("node-t4-a", T4, [FREE]),
                             devices("node-t4-b", T4, [FREE, {"mode": 1, "allocated": D}, FREE, FREE])], T4,
     "3/4", "30/40", "3/40", "100/400", "0/0", (5, 50, 500, 0)),
    ("9-h100-plain-and-mig", [devices("node-h100-a", H100, [FREE]),
                              devices("node-h100-b", H100, [None], mig=True)], H100,
     "1/1", "10/10", "1/10", "100/100", "1/7", (1, 10, 100, 7)),
]


def _pairs(fv: fourview.FourView) -> tuple[str, str, str, str]:
    return fv.ex.pair, fv.sh.pair, fv.sl.pair, fv.pt.pair


def _capacities(fv: fourview.FourView) -> tuple[int, int, int, int]:
    return fv.ex.capacity, fv.sh.capacity, fv.sl.capacity, fv.pt.capacity


@pytest.mark.parametrize("reading", ["default_policy", "option_policy"])
@pytest.mark.parametrize("example", EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_worked_example(request, reading, example):
    """docs/concepts/four-views.md "The four views" under the default SH reading ``shareSum`` and the ``acceleratorCount`` option: only SH
    onceMaxRequest changes with the option; capacity and remaining do not."""
    _, devs, akey, ex, sh, sh_option, sl, pt, caps = example
    fv = fourview.compute(request.getfixturevalue(reading), devs, akey)
    shared = sh if reading == "default_policy" else sh_option
    assert _pairs(fv) == (ex, shared, sl, pt)
    assert _capacities(fv) == caps
    assert fv.summary() == f"{ex} {shared} {sl} {pt}"


def test_example_4_unmanaged_node_is_not_selected(default_policy):
    """#4: the A10G node unmanaged -> its Devices is not selected (docs/concepts/pools-and-flavors.md "Pools: InstanceType + ClusterQueue of one name") -> all 0/0, capacity 0."""
    spec = {"acceleratable": True, "acceleratorGroup": A10G, "os": "linux", "arch": "amd64", "generalGroup": "generic"}
    selector = devices_selector(default_policy, schedule_labels(default_policy, spec, aware=False))
    managed = devices("node-a10g", A10G, [FREE])
    unmanaged = devices("node-a10g", A10G, [FREE], managed="false")
    assert matches(selector, managed["metadata"]["labels"])
    assert not matches(selector, unmanaged["metadata"]["labels"])
    selected = [d for d in (unmanaged,) if matches(selector, d["metadata"]["labels"])]
    fv = fourview.compute(default_policy, selected, A10G)
    assert fv.summary() == "0/0 0/0 0/0 0/0"
    assert _capacities(fv) == (0, 0, 0, 0)


def test_example_9_render_status(default_policy):
    """#9 rendered: the MIG accelerator lists every offered profile at its capability count."""
    _, devs, akey, *_ = EXAMPLES[-1]
    status = fourview.compute(default_policy, devs, akey).render_status()
    assert status["accelerator"] == {"capacity": "1", "onceMaxRequest": "1", "remaining": "1"}
    pt = status["acceleratorPartitioned"]
    assert {k: pt[k] for k in ("capacity", "onceMaxRequest", "remaining")} == {
        "capacity": "7", "onceMaxRequest": "1", "remaining": "7"}
    assert pt["remainingProfiles"] == [{"name": p["name"], "count": p["count"]} for p in H100_PROFILES]
    assert "allocatedProfiles" not in pt


def test_unhealthy_accelerators_are_skipped(default_policy):
    """docs/concepts/four-views.md "The four views": an unhealthy accelerator is excluded from every view and capacity (node-t4-b with GPU 2 failing)."""
    devs = [devices("node-t4-b", T4, [FREE] * 4, unhealthy=(2,))]
    fv = fourview.compute(default_policy, devs, T4)
    assert fv.summary() == "3/3 30/30 100/300 0/0"
    assert _capacities(fv) == (3, 30, 300, 0)


def test_other_groups_do_not_count(default_policy):
    """docs/concepts/four-views.md "The four views": only groups whose `<manufacturer>-<id>` equals the aKey exactly."""
    fv = fourview.compute(default_policy, SEED_T4, A10G)
    assert fv.summary() == "0/0 0/0 0/0 0/0"
    assert _capacities(fv) == (0, 0, 0, 0)


def test_fully_carved_mig_accelerator_reads_pt_zero(default_policy):
    """docs/concepts/four-views.md "The four views"/mig.md docs/concepts/four-views.md "The partitioned side": PT onceMax is 0 when no partitioned accelerator can host an instance."""
    full = {"mode": 4, "allocated": D, "allocatedProfiles": [{"name": "7g.80gb", "count": 1}],
            "remainingProfiles": [{"name": p["name"], "count": 0} for p in H100_PROFILES]}
    fv = fourview.compute(default_policy, [devices("node-h100", H100, [full], mig=True)], H100)
    assert fv.pt.pair == "0/0"
    assert fv.pt.capacity == 7
    assert fv.allocated_profiles == {"7g.80gb": 1}
    assert fv.partitions() == "1g.10gb=0,1g.20gb=0,2g.20gb=0,3g.40gb=0,4g.40gb=0,7g.80gb=0"
