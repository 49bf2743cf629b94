"""Per-accelerator maintenance (docs/concepts/out-of-service.md "Maintenance"): an AcceleratorMaintenance
object takes accelerators of one node (by UUID or index, or all of them) out of all four views, the quota, the
capacity keys and the ledger until its expiry, without renaming anything (decision 26); at its expiry it has
no effect, without anyone acting; the controller writes its status with the Pods still on them.
"""
from __future__ import annotations

import copy
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from runtime.controller.maintenance import plan_maintenance
from runtime.engine.devices.agentplan import plan_node
from runtime.engine.devices.maintenance import in_force, maintenance_status
from runtime.engine.pools import derive
from runtime.engine.snapshot import Snapshot
from runtime.snapshots import load_snapshot
from tests.agent.conftest import facts, seed_node

NOW = datetime(2026, 11, 29, 21, 0, 0, tzinfo=timezone.utc)
A10G = "GPU-e0587d2e-127c-4fb8-e2c1-6e517529f575"
T4B = [f"GPU-3f6e8b21-90c4-4d7a-b5e2-1a9c8d7e6f0{i}" for i in range(4)]
A10G_POOL = "gpustack--nvidia-a10g-linux-amd64"
A10G_FLAVOR = "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d"
ALLOCATION = "device.gpustack.ai/accelerator.allocated"


def stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def maintenance(name: str, node: str, expiry: datetime, accelerators=None, reason="fan replacement",
                owner="gpu-team@example.com") -> dict:
    spec = {"node": node, "reason": reason, "owner": owner, "expiry": stamp(expiry)}
    if accelerators is not None:
        spec["accelerators"] = accelerators
    return {"apiVersion": "worker.gpustack.ai/v1", "kind": "AcceleratorMaintenance", "metadata": {"name": name},
            "spec": spec}


def _pairs(stem: str) -> list[tuple[str, int]]:
    return [(a.uuid, a.index) for a in facts(stem).accelerators]


def test_in_force_by_uuid_index_or_the_whole_node_until_expiry():
    later = NOW + timedelta(hours=1)
    objects = [maintenance("by-index", "node-t4-b", later, ["2"]),
               maintenance("by-uuid", "node-t4-b", later + timedelta(hours=1), [T4B[3], T4B[2]]),
               maintenance("other-node", "node-t4-a", later)]
    found, wake = in_force(objects, "node-t4-b", _pairs("node-t4-b"), NOW)
    assert sorted(found) == [T4B[2], T4B[3]]
    assert found[T4B[2]]["name"] == "by-uuid"     # the later expiry holds it
    assert found[T4B[3]] == {"name": "by-uuid", "reason": "fan replacement", "owner": "gpu-team@example.com",
                             "expiry": stamp(later + timedelta(hours=1))}
    assert wake == later
    whole, _ = in_force([maintenance("all", "node-t4-b", later)], "node-t4-b", _pairs("node-t4-b"), NOW)
    assert sorted(whole) == T4B


def test_a_past_expiry_has_no_effect_and_its_status_says_expired(policy):
    past = maintenance("done", "node-a10g", NOW - timedelta(seconds=1), ["0"])
    assert in_force([past], "node-a10g", _pairs("node-a10g"), NOW) == ({}, None)
    plan = plan_node(policy, facts("node-a10g"), seed_node("node-a10g"), resolve_defaults(policy),
                     maintenance=in_force([past], "node-a10g", _pairs("node-a10g"), NOW)[0])
    assert "maintenance" not in plan.devices["spec"]["groups"][0]["accelerators"][0]["status"]
    assert plan.devices["status"]["groups"][0]["accelerators"] == [{"id": A10G, "index": 0, "mode": 0,
                                                                    "remaining": 1600000}]
    status = maintenance_status(policy, past, plan.devices, [], NOW)
    assert status == {"state": "Expired", "devices": "0", "accelerators": [{"id": A10G, "index": 0}],
                      "message": f"expired at {stamp(NOW - timedelta(seconds=1))}: the accelerators are back in service"}


def resolve_defaults(policy):
    from runtime.engine.settings import resolve
    return resolve(policy.settings, {})


def _a10g_cluster(policy, devices: dict, extra=()) -> Snapshot:
    objects = [copy.deepcopy(o) for o in load_snapshot([Path("tests/fixtures/seed/common")])]
    objects = [o for o in objects if not (o["kind"] == "Devices" and o["metadata"]["name"] == "node-a10g")]
    return Snapshot.from_objects(objects + [devices, *extra])


def test_an_a10g_in_maintenance_leaves_every_view_the_quota_the_capacity_and_the_ledger(policy):
    obj = maintenance("a10g-fan", "node-a10g", NOW + timedelta(minutes=10), ["0"])
    held = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "sliced-demo", "namespace": "default", "creationTimestamp": "2026-11-29T20:00:00Z",
        "annotations": {ALLOCATION: json.dumps({"main": [{"id": "a10g", "manufacturer": "nvidia", "accelerators": [
            {"id": A10G, "index": 0, "mode": 3, "allocated": 320000}]}]})}},
        "spec": {"nodeName": "node-a10g"}, "status": {"phase": "Running"}}
    found, _ = in_force([obj], "node-a10g", _pairs("node-a10g"), NOW)
    node = seed_node("node-a10g", labels={"gpustack.ai/managed": "true"})
    plan = plan_node(policy, facts("node-a10g"), node, resolve_defaults(policy), pods=[held], maintenance=found)
    acc = plan.devices["spec"]["groups"][0]["accelerators"][0]
    assert acc["status"]["maintenance"] == {"name": "a10g-fan", "reason": "fan replacement",
                                            "owner": "gpu-team@example.com",
                                            "expiry": stamp(NOW + timedelta(minutes=10))}
    assert acc["status"]["unhealthy"] is False
    assert plan.devices["status"]["groups"][0]["accelerators"] == []     # out of the ledger
    assert plan.events == []                                               # the Pod was there first: no conflict
    assert plan.node_patch["status"]["capacity"]["nvidia.com/gpu.sliced.units"] == "0"
    assert plan.device_manager["spec"]["labels"]["acceleratable.feature.gpustack.ai/nvidia-a10g.count"] == "1"
    state = derive(policy, _a10g_cluster(policy, plan.devices))
    it = next(t for t in state.instance_types if t["metadata"]["name"] == A10G_POOL)
    assert it["status"]["summary"]["accelerator"] == "0/0 0/0 0/0 0/0"
    queue = next(q for q in state.cluster_queues if q["metadata"]["name"] == A10G_POOL)
    assert queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == "0"
    assert A10G_FLAVOR in {f["metadata"]["name"] for f in state.resource_flavors}
    # the controller's status names the Pod still on it
    assert maintenance_status(policy, obj, plan.devices, [held], NOW) == {
        "state": "InForce", "devices": "0", "accelerators": [{"id": A10G, "index": 0}],
        "pods": ["default/sliced-demo"],
        "message": f"accelerators 0 of node node-a10g are out of service until {stamp(NOW + timedelta(minutes=10))}; "
                   "Pods still on them: default/sliced-demo"}


@pytest.mark.parametrize("edit, state, message", [
    (lambda o: o["spec"].update(accelerators=["7"]), "Unmatched", "node node-a10g has no accelerator 7"),
    (lambda o: o["spec"].update(expiry="tomorrow"), "Invalid", "spec.expiry: 'tomorrow' is not an RFC 3339 time"),
    (lambda o: o["spec"].update(node=""), "Invalid", "spec.node: Required value"),
])
def test_an_object_that_matches_nothing_or_cannot_be_read_costs_only_itself(policy, edit, state, message):
    obj = maintenance("bad", "node-a10g", NOW + timedelta(minutes=10), ["0"])
    edit(obj)
    devices = plan_node(policy, facts("node-a10g"), seed_node("node-a10g"), resolve_defaults(policy)).devices
    assert maintenance_status(policy, obj, devices, [], NOW) == {"state": state, "message": message}
    assert in_force([obj], "node-a10g", _pairs("node-a10g"), NOW) == ({}, None)


def test_the_controller_writes_a_status_only_when_it_changes_and_comes_back_at_the_expiry(policy):
    devices = plan_node(policy, facts("node-a10g"), seed_node("node-a10g"), resolve_defaults(policy)).devices
    obj = maintenance("a10g-fan", "node-a10g", NOW + timedelta(seconds=90), ["0"])
    plan = plan_maintenance(policy, _a10g_cluster(policy, devices, [obj]), NOW)
    (action,) = plan.actions
    assert (action.verb, action.kind, action.name, action.namespace) == ("apply-status", "AcceleratorMaintenance",
                                                                         "a10g-fan", "")
    assert action.body["status"]["state"] == "InForce" and plan.requeue == 90.0
    obj["status"] = action.body["status"]
    again = plan_maintenance(policy, _a10g_cluster(policy, devices, [obj]), NOW + timedelta(seconds=1))
    assert again.actions == [] and again.requeue == 89.0
    expired = plan_maintenance(policy, _a10g_cluster(policy, devices, [obj]), NOW + timedelta(seconds=90))
    assert [a.body["status"]["state"] for a in expired.actions] == ["Expired"] and expired.requeue is None
