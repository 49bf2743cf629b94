"""The steady-state check's counting (testing/steadystate.py) on scripted cluster states."""
from __future__ import annotations

import copy

from testing.steadystate import observe


def cluster():
    return {
        "workloads.kueue.x-k8s.io": [{"metadata": {"namespace": "default", "name": "pod-pinned-demo-1"},
                                      "status": {"schedulingStats": {"evictions": [{"reason": "AdmissionCheck", "count": 2}]}}}],
        "pods": [{"metadata": {"namespace": "default", "name": "pinned-demo", "uid": "u1"},
                  "status": {"containerStatuses": [{"name": "main", "restartCount": 0}]}}],
        "instances.worker.gpustack.ai": [
            {"metadata": {"namespace": "default", "name": "pinned-demo"}, "spec": {}, "status": {"phase": "Ready"}},
            {"metadata": {"namespace": "default", "name": "claim-demo"}, "spec": {},
             "status": {"phase": "Starting", "phaseMessage": "PersistentVolumeClaim ... is Pending"}}],
        "nodes": [{"metadata": {"name": "node-t4-b", "labels": {"kubernetes.io/hostname": "node-t4-b",
                                                                 "shared-free-cards.fit.gpustack.ai/nvidia-tesla-t4": "3"}}}],
    }


def scripted(states):
    """A ``get`` that serves ``states[i]`` on its i-th pass over the kinds (the last one thereafter)."""
    calls = {"n": 0}

    def get(resource, *args):
        state = states[min(calls["n"] // 20, len(states) - 1)]
        calls["n"] += 1
        return {"items": copy.deepcopy(state.get(resource, []))}
    return get


def test_a_settled_cluster_is_steady():
    state = observe(scripted([cluster()]), seconds=0, interval=0)
    assert state.steady and state.counts() == {"evictions": 0, "replaced Pods": 0, "restarts": 0, "idle writes": 0,
                                               "Instances in no stated phase": 0}


def test_each_kind_of_movement_is_counted():
    moved = cluster()
    moved["workloads.kueue.x-k8s.io"][0]["status"]["schedulingStats"]["evictions"][0]["count"] = 3
    moved["pods"][0]["metadata"]["uid"] = "u2"
    moved["pods"][0]["status"]["containerStatuses"][0]["restartCount"] = 1
    moved["nodes"][0]["metadata"]["labels"]["shared-free-cards.fit.gpustack.ai/nvidia-tesla-t4"] = "2"
    moved["instances.worker.gpustack.ai"][1]["status"].pop("phaseMessage")
    state = observe(scripted([cluster(), moved]), seconds=0.3, interval=0.1)
    assert state.evictions == ["default/pod-pinned-demo-1: evictions 2 -> 3, Evicted since -"]
    assert state.replaced_pods == ["default/pinned-demo: Pod uid u1 -> u2"]
    assert state.restarts == ["default/pinned-demo:main: restartCount 0 -> 1"]
    assert "node node-t4-b changed" in state.controller_writes
    assert state.unstated_instances == ["default/claim-demo: phase Starting without a phaseMessage"]
    assert not state.steady
