"""A rules change never destroys work (docs/rule-authoring.md "How a rules change goes live";
docs/concepts/pools-and-flavors.md "Queues and the entrance", docs/concepts/instances.md "Life cycle"):

- a pool a rules generation left without flavors (its ClusterQueue marked ``queueEmptiedByRules`` when
  the generation went live) keeps its groups under ``Hold``, never ``HoldAndDrain``: nothing running is
  evicted, no Instance stopped, and its flavors stay while the queue names them;
- once its flavors are back, the mark goes;
- an Instance the controller stopped (it says so: ``instanceStoppedBy``) starts again when its pool is
  back; one its owner stopped stays stopped;
- an InstanceType whose pool has no flavors shows no capacity, and its phase message says why."""
from __future__ import annotations

import copy

from runtime.engine.instances.instancelife import SET_STOP, plan_instance
from runtime.engine.plan import Verb, plan
from runtime.engine.pools.derive import derive
from runtime.engine.snapshot import Snapshot
from runtime.snapshots import load_snapshot
from tests.engine.test_instance_lifecycle import custom_demo
from tests.engine.test_settings_effects import with_settings
from tests.seedfiles import FIXTURES

A10G = "gpustack--nvidia-a10g-linux-amd64"
MARK = "schedule.gpustack.ai/emptied-by-rules"
STOPPED_BY = "worker.gpustack.ai/stopped-by"


def _unmanaged(policy, marked: bool, reserving: bool = True):
    """Seed step 2 (node-a10g unmanaged: its pool has no flavor) with the A10G queue as step 1 left it,
    holding an admitted Workload, marked by a rules generation or not."""
    base = load_snapshot([FIXTURES / "seed" / "step2-unmanaged"])
    step1 = derive(policy, load_snapshot([FIXTURES / "seed" / "step1"]))
    queue = copy.deepcopy(next(q for q in step1.cluster_queues if q["metadata"]["name"] == A10G))
    queue["status"] = {"reservingWorkloads": int(reserving), "admittedWorkloads": int(reserving), "conditions": [
        {"type": "Active", "status": "True", "reason": "Ready", "message": "Can admit new workloads"}]}
    if marked:
        queue["metadata"]["annotations"] = {MARK: "3f2a9c1d0b7e"}
    flavor = next(f for f in step1.resource_flavors if "nvidia-a10g" in f["metadata"]["name"])
    snapshot = with_settings(Snapshot.from_objects(list(base) + [queue, flavor]),
                             **{"instance-type-drain-when-no-flavors": "true"})
    return snapshot, queue, flavor


def test_a_pool_emptied_by_rules_is_held_not_drained_and_keeps_its_flavor(policy):
    snapshot, old, flavor = _unmanaged(policy, marked=True)
    state = derive(policy, snapshot)
    queue = next(q for q in state.cluster_queues if q["metadata"]["name"] == A10G)
    it = next(i for i in state.instance_types if i["metadata"]["name"] == A10G)
    assert queue["spec"]["stopPolicy"] == "Hold"
    assert queue["spec"]["resourceGroups"] == old["spec"]["resourceGroups"]
    assert queue["metadata"]["annotations"] == {MARK: "3f2a9c1d0b7e"}
    assert (it["status"]["phase"], it["status"]["phaseMessage"]) == (
        "Inactive", "no flavors: no managed node offers this pool any more; its queue holds (nothing new is "
                    "admitted, nothing running is evicted) until they come back")
    assert it["status"]["summary"]["accelerator"] == "0/0 0/0 0/0 0/0"
    name = flavor["metadata"]["name"]
    assert name in state.flavor_deletes                       # no contributor any more ...
    actions = plan(policy, state, snapshot)
    assert not [a for a in actions if a.verb == Verb.DELETE and a.name == name]   # ... but the queue names it


def test_without_the_mark_the_same_pool_drains(policy):
    snapshot, _, flavor = _unmanaged(policy, marked=False)
    state = derive(policy, snapshot)
    queue = next(q for q in state.cluster_queues if q["metadata"]["name"] == A10G)
    assert queue["spec"]["stopPolicy"] == "HoldAndDrain" and "annotations" not in queue["metadata"]


def test_the_mark_goes_once_the_flavors_are_back(policy):
    step1 = load_snapshot([FIXTURES / "seed" / "step1"])
    queue = copy.deepcopy(next(q for q in derive(policy, step1).cluster_queues if q["metadata"]["name"] == A10G))
    queue["metadata"]["annotations"] = {MARK: "3f2a9c1d0b7e"}      # as the emptying generation left it
    snapshot = Snapshot.from_objects(list(step1) + [queue])
    state = derive(policy, snapshot)
    assert "annotations" not in next(q for q in state.cluster_queues if q["metadata"]["name"] == A10G)["metadata"]
    patches = [a for a in plan(policy, state, snapshot) if a.kind == "ClusterQueue" and a.name == A10G
               and a.verb == Verb.PATCH]
    assert [a.body for a in patches] == [{"metadata": {"annotations": {MARK: None}}}]


def test_an_instance_the_controller_stopped_starts_again_when_its_pool_is_back(policy):
    snapshot = load_snapshot([FIXTURES / "seed" / "step4-custom-type"])
    state = derive(policy, snapshot)
    types = {it["metadata"]["name"]: it for it in state.instance_types}
    queues = {q["metadata"]["name"]: q for q in state.cluster_queues}
    stopped = custom_demo(stop=True)
    stopped["metadata"]["annotations"] = {STOPPED_BY: "controller"}
    back = plan_instance(policy, state.settings, snapshot, stopped, None, types["a10g-12c128g"],
                         queues["a10g-12c128g"])
    assert back.actions == [(SET_STOP, False)] and back.status == {"phase": "Starting"}
    gone = plan_instance(policy, state.settings, snapshot, stopped, None, None, None)   # its type is still gone
    assert gone.actions == [] and gone.status == {"phase": "Stopped"}
    held = copy.deepcopy(queues["a10g-12c128g"])
    held["spec"]["stopPolicy"] = "Hold"                                                 # its pool holds: not yet
    assert plan_instance(policy, state.settings, snapshot, stopped, None, types["a10g-12c128g"], held).actions == []
    owners = custom_demo(stop=True)                                                     # its owner stopped it
    assert plan_instance(policy, state.settings, snapshot, owners, None, types["a10g-12c128g"],
                         queues["a10g-12c128g"]).actions == []


def test_an_instance_type_without_flavors_shows_no_capacity_and_says_why(policy):
    """Seed step 2: the A10G pool lost its only node; the seed's table reads it Active with 0/0 in every
    view, and the phase message says why."""
    state = derive(policy, load_snapshot([FIXTURES / "seed" / "step2-unmanaged"]))
    it = next(i for i in state.instance_types if i["metadata"]["name"] == A10G)
    assert it["status"]["phase"] == "Active" and it["status"]["summary"]["accelerator"] == "0/0 0/0 0/0 0/0"
    assert it["status"]["phaseMessage"] == "no flavors: no managed node offers this pool, so it has no capacity"
