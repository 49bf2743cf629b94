"""Ledger rebuild (docs/agent.md "The Devices object and its ledger"): each allocation mode, conflicts, invalid annotations."""
from __future__ import annotations

import pytest

from tests.agent.conftest import facts
from tests.agent.helpers import A10G, H100, entry, group, pod
from runtime.engine.devices.agentplan import plan_node
from runtime.engine.devices.ledger import parse_allocation

GID = "h100-80gb-hbm3"


def _ledger(plan, stem, pods):
    p = plan(stem, pods=pods)
    return p.devices["status"]["groups"][0]["accelerators"], p.events


@pytest.mark.parametrize("entries, expected", [
    ([], {"mode": 0, "remaining": 1600000}),
    ([entry(A10G, 0, 3, 320000)], {"mode": 3, "allocated": 320000, "remaining": 1280000, "allocatedSlices": 1}),
    ([entry(A10G, 0, 1)], {"mode": 1, "allocated": 1600000}),
    ([entry(A10G, 0, 1, 1600000)], {"mode": 1, "allocated": 1600000}),
    ([entry(A10G, 0, 2)], {"mode": 2, "allocated": 160000, "remaining": 1440000}),
    ([entry(A10G, 0, 2), entry(A10G, 0, 2)], {"mode": 2, "allocated": 320000, "remaining": 1280000}),
    ([entry(A10G, 0, 3, 320000), entry(A10G, 0, 3, 1600000)],
     {"mode": 3, "allocated": 1920000, "allocatedSlices": 2}),
], ids=["free", "sliced-20pct", "exclusive", "exclusive-explicit", "shared", "shared-twice", "sliced-over"])
def test_each_logical_mode(plan, entries, expected):
    pods = [pod(f"p{i}", [group("a10g", e)], created=f"2026-01-01T00:00:0{i}Z") for i, e in enumerate(entries)]
    accs, events = _ledger(plan, "node-a10g", pods)
    assert accs == [{"id": A10G, "index": 0, **expected}]
    assert events == []


def test_partitioned_mode_without_placement_takes_the_lowest_free_one(plan):
    pods = [pod(f"p{i}", [group(GID, entry(H100.format(0), 0, 4, 800000, "3g.40gb"))],
                created=f"2026-01-01T00:00:0{i}Z") for i in range(2)]
    accs, events = _ledger(plan, "node-h100-mig-on", pods)
    assert accs[0]["mode"] == 4 and accs[0]["allocated"] == 1600000 and "remaining" not in accs[0]
    assert accs[0]["allocatedProfiles"] == [{"name": "3g.40gb", "count": 2}]
    assert all(p["count"] == 0 for p in accs[0]["remainingProfiles"])
    assert events == []


def test_mode_conflict_is_reported_and_the_later_charge_skipped(plan):
    whole = pod("whole", [group("a10g", entry(A10G, 0, 1))], created="2026-01-01T00:00:00Z")
    slice_ = pod("slice", [group("a10g", entry(A10G, 0, 3, 320000))], created="2026-01-01T00:00:01Z")
    accs, events = _ledger(plan, "node-a10g", [slice_, whole])
    assert accs == [{"id": A10G, "index": 0, "mode": 1, "allocated": 1600000}]
    assert len(events) == 1
    ev = events[0]
    assert (ev.kind, ev.name, ev.reason) == ("Devices", "node-a10g", "AllocationConflict")
    assert ev.message == (f"Pod demo/slice container main: accelerator {A10G} (nvidia/a10g) is held in mode 1; "
                          "charge in mode 3 skipped")


def test_partition_on_an_unpartitioned_accelerator_is_a_conflict(plan):
    bad = pod("bad", [group("a10g", entry(A10G, 0, 4, 800000, "3g.40gb"))])
    accs, events = _ledger(plan, "node-a10g", [bad])
    assert accs[0]["mode"] == 0
    assert [e.reason for e in events] == ["AllocationConflict"]
    assert "is not partitioned" in events[0].message


def test_logical_charge_on_a_partitioned_accelerator_is_a_conflict(plan):
    bad = pod("bad", [group(GID, entry(H100.format(1), 1, 2))])
    accs, events = _ledger(plan, "node-h100-mig-mixed", [bad])
    assert accs[1]["mode"] == 0
    assert "is partitioned; charge in mode 2 skipped" in events[0].message


def test_overlapping_placement_is_a_conflict(plan):
    first = pod("a", [group(GID, entry(H100.format(0), 0, 4, 800000, "3g.40gb", [(0, 4)]))], created="1")
    second = pod("b", [group(GID, entry(H100.format(0), 0, 4, 200000, "1g.10gb", [(2, 1)]))], created="2")
    accs, events = _ledger(plan, "node-h100-mig-on", [first, second])
    assert accs[0]["allocatedProfiles"] == [{"name": "3g.40gb", "count": 1}]
    assert "no free legal placement for profile 1g.10gb" in events[0].message


def test_unoffered_profile_is_a_conflict(plan):
    bad = pod("bad", [group(GID, entry(H100.format(0), 0, 4, 200000, "2g.10gb"))])
    accs, events = _ledger(plan, "node-h100-mig-on", [bad])
    assert accs[0]["mode"] == 0 and events[0].reason == "AllocationConflict"


def test_finished_pods_hold_nothing(plan):
    done = [pod("ok", [group("a10g", entry(A10G, 0, 1))], phase="Succeeded"),
            pod("ko", [group("a10g", entry(A10G, 0, 1))], phase="Failed")]
    accs, events = _ledger(plan, "node-a10g", done)
    assert accs == [{"id": A10G, "index": 0, "mode": 0, "remaining": 1600000}]


@pytest.mark.parametrize("annotation, fragment", [
    ("{not json", "is not a JSON object"),
    ("[1, 2]", "is not a JSON object"),
    ({"main": [group("t4", entry(A10G, 0, 1))]}, "no group nvidia/t4 on node node-a10g"),
    ({"main": [group("a10g", entry("GPU-nope", 0, 1))]}, "has no accelerator GPU-nope"),
    ({"main": [group("a10g", entry(A10G, 0, 7))]}, "mode 7 is not one of 1, 2, 3, 4"),
    ({"main": [group("a10g", entry(A10G, 0, 1, 5))]}, "mode 1 charges 1600000, not 5"),
    ({"main": [group("a10g", entry(A10G, 0, 2, 1))]}, "mode 2 charges 160000, not 1"),
    ({"main": [group("a10g", entry(A10G, 0, 3))]}, "mode 3 needs allocated in 1..1600000, got None"),
    ({"main": [group("a10g", entry(A10G, 0, 3, 1600001))]}, "got 1600001"),
    ({"main": [group("a10g", entry(A10G, 0, 4, 5))]}, "mode 4 needs allocatedPhysicalProfile"),
    ({"main": "x"}, "allocation groups must be a list"),
])
def test_invalid_annotation_is_ignored_with_an_event_on_the_pod(plan, annotation, fragment):
    import json
    raw = annotation if isinstance(annotation, str) else json.dumps(annotation)
    other = pod("good", [group("a10g", entry(A10G, 0, 2))], created="2026-01-01T00:00:00Z")
    bad = pod("bad", raw=raw, created="2026-01-01T00:00:01Z")
    accs, events = _ledger(plan, "node-a10g", [other, bad])
    assert accs == [{"id": A10G, "index": 0, "mode": 2, "allocated": 160000, "remaining": 1440000}]
    assert [(e.kind, e.namespace, e.name, e.reason) for e in events] == [("Pod", "demo", "bad", "InvalidAllocation")]
    assert fragment in events[0].message
    assert events[0].message.startswith("allocation annotation device.gpustack.ai/accelerator.allocated")


def test_unhealthy_accelerator_is_left_out_and_charges_conflict(policy, defaults):
    f = facts("node-t4-b")
    f.accelerators[1].healthy = False
    from tests.agent.conftest import seed_node
    held = pod("p", [group("tesla-t4", entry("GPU-3f6e8b21-90c4-4d7a-b5e2-1a9c8d7e6f01", 1, 1))])
    p = plan_node(policy, f, seed_node("node-t4-b"), defaults, pods=[held])
    assert [a["index"] for a in p.devices["status"]["groups"][0]["accelerators"]] == [0, 2, 3]
    assert p.devices["spec"]["groups"][0]["accelerators"][1]["status"]["unhealthy"] is True
    assert "is unhealthy" in p.events[0].message
    assert p.device_manager["spec"]["labels"]["acceleratable.feature.gpustack.ai/nvidia-tesla-t4.count"] == "4"  # installed (decision 26)
    assert p.node_patch["status"]["capacity"]["nvidia.com/gpu.sliced.units"] == "4800k"


def test_parse_allocation_returns_typed_charges(policy, plan):
    spec = plan("node-h100-mig-on").devices["spec"]
    import json
    text = json.dumps({"b": [group(GID, entry(H100.format(0), 0, 4, 800000, "3g.40gb", [(4, 4)]))],
                       "a": [group(GID, entry(H100.format(1), 1, 4, 200000, "1g.10gb"))]})
    charges = parse_allocation(policy, text, spec, "node-h100")
    assert [(c.container, c.accelerator, c.mode, c.allocated, c.profile, c.placements) for c in charges] == [
        ("a", H100.format(1), 4, 200000, "1g.10gb", ()),
        ("b", H100.format(0), 4, 800000, "3g.40gb", ((4, 4),))]
