"""What a rules generation would do to running work, and the hold it meets (docs/rule-authoring.md "How a
rules change goes live"): a queue it drains evicts its admitted Workloads, a flavor it deletes that an
admitted Workload uses is named, an Instance whose type goes or whose queue drains stops; each holds the
generation by the serving rules' ``hold``, and the replicas' reviews count with the leader's."""
from __future__ import annotations

from runtime.engine.pools import DesiredState
from runtime.engine.settings import Settings
from runtime.engine.snapshot import Snapshot
from runtime.model.reloadgate import HoldSpec
from runtime.reload.consequences import (CapacityLoss, Consequences, evicted_workloads, flavors_in_use,
                                         hold_reasons, stopped_instances)
from runtime.reload.trial import Trial, VerdictChange

A10G = "gpustack--nvidia-a10g-linux-amd64"
FLAVOR = "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d"


def _queue(stop: str = "None") -> dict:
    return {"kind": "ClusterQueue", "metadata": {"name": A10G},
            "spec": {"stopPolicy": stop, "resourceGroups": [{"flavors": [{"name": FLAVOR}]}]}}


def _state(stop: str = "None", types: bool = True, deletes: tuple = ()) -> DesiredState:
    state = DesiredState(settings=Settings({}))
    state.cluster_queues = [_queue(stop)] if stop else []
    state.instance_types = [{"kind": "InstanceType", "metadata": {"name": A10G}, "status": {}}] if types else []
    state.flavor_deletes = list(deletes)
    return state


LIVE = Snapshot.from_objects([
    _queue(),
    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "w1", "namespace": "default"},
     "status": {"admission": {"clusterQueue": A10G, "podSetAssignments": [{"flavors": {"credits.gpustack.ai/nvidia":
                                                                                       FLAVOR}}]}}},
    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "done", "namespace": "default"},
     "status": {"admission": {"clusterQueue": A10G}, "conditions": [{"type": "Finished", "status": "True"}]}},
    {"apiVersion": "worker.gpustack.ai/v1", "kind": "Instance", "metadata": {"name": "i1", "namespace": "default"},
     "spec": {"type": A10G}},
    {"apiVersion": "worker.gpustack.ai/v1", "kind": "Instance", "metadata": {"name": "off", "namespace": "default"},
     "spec": {"type": A10G, "stop": True}}])


def test_a_queue_drained_evicts_its_admitted_workloads_and_stops_its_instances():
    old, new = _state(), _state("HoldAndDrain")
    assert evicted_workloads(old, new, LIVE) == [f"Workload default/w1 (ClusterQueue {A10G})"]
    assert stopped_instances(old, new, LIVE) == [f"Instance default/i1 (type {A10G})"]
    assert evicted_workloads(old, old, LIVE) == [] and stopped_instances(old, old, LIVE) == []


def test_a_type_gone_stops_its_instances_and_a_deleted_flavor_in_use_is_named():
    assert stopped_instances(_state(), _state(types=False), LIVE) == [f"Instance default/i1 (type {A10G})"]
    deleting = _state(stop="", deletes=(FLAVOR,))   # no queue names the flavor any more
    assert flavors_in_use(_state(), deleting, LIVE) == [f"ResourceFlavor {FLAVOR}: used by Workload default/w1"]
    kept = _state(deletes=(FLAVOR,))                # a queue still names it: it stays, nothing in use goes
    assert flavors_in_use(_state(), kept, LIVE) == []


def test_each_consequence_holds_by_the_serving_hold():
    found = Consequences(evicted=["Workload default/w1 (ClusterQueue q)"], stopped=["Instance default/i1 (type t)"],
                         flavors_in_use=[f"ResourceFlavor {FLAVOR}: used by Workload default/w1"],
                         capacity=[CapacityLoss(A10G, "accelerator", 4, 3), CapacityLoss(A10G, "acceleratorShared", 40, 10)])
    trial = Trial(reviews=40, denied_reviews=2, objects=10,
                  changes=[VerdictChange("p", "r", f"Pod default/x{i}", "allowed", "denied") for i in range(3)])
    assert hold_reasons(found, trial, HoldSpec()) == [
        "it evicts 1 admitted Workload(s) and stops 1 running Instance(s) (hold.runningWork)",
        "it deletes 1 ResourceFlavor(s) admitted Workloads use (hold.flavorsInUse)",
        f"it removes more than 25% of the capacity of 1 pool(s) (hold.maxCapacityRemovedPercent): InstanceType {A10G} "
        "acceleratorShared: capacity 40 -> 10 (-75%)",
        "it newly denies 3 of 10 existing object(s) (30%, more than hold.maxNewDenialsPercent 5%)"]
    lenient = HoldSpec(runningWork=False, flavorsInUse=False, maxCapacityRemovedPercent=80, maxNewDenialsPercent=5,
                       maxNewDenials=3)
    assert hold_reasons(found, trial, lenient) == []   # 2 of 40 reviews is 5%: not more; 3 objects: not more than 3
