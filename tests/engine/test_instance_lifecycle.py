"""The Instance reconcile decisions of docs/concepts/instances.md "Life cycle", seed steps 3, 4 and 6."""
from __future__ import annotations

import copy

import pytest

from runtime.engine.pools.derive import derive
from runtime.engine.instances.instancelife import (ADD_FINALIZER, CREATE_POD, CREATE_SERVICE, DELETE_POD, REMOVE_FINALIZER,
                                         SET_STOP, plan_instance)
from runtime.snapshots import load_snapshot
from tests.seedfiles import FIXTURES

FIN = "worker.gpustack.ai/instance"


@pytest.fixture(scope="module")
def world(policy):
    snapshot = load_snapshot([FIXTURES / "seed" / "step4-custom-type"])
    state = derive(policy, snapshot)
    types = {it["metadata"]["name"]: it for it in state.instance_types}
    queues = {q["metadata"]["name"]: q for q in state.cluster_queues}
    return snapshot, state.settings, types, queues


def custom_demo(**spec):
    inst = {"apiVersion": "worker.gpustack.ai/v1", "kind": "Instance",
            "metadata": {"name": "custom-demo", "namespace": "default", "uid": "u-3", "finalizers": [FIN]},
            "spec": {"type": "a10g-12c128g", "image": "ubuntu:24.04", "command": ["sleep", "86400"],
                     "resources": {"accelerator": "1", "cpu": "12", "ram": "128Gi", "localStorage": "15Gi"},
                     "volume": {"ephemeral": {"capacity": "1Gi"}}}}
    inst["spec"].update(spec)
    return inst


def pod_of(plan):
    return next(payload for verb, payload in plan.actions if verb == CREATE_POD)


def test_a_new_instance_gets_its_finalizer_and_pod(policy, world):
    snapshot, settings, types, queues = world
    inst = custom_demo()
    inst["metadata"]["finalizers"] = []
    plan = plan_instance(policy, settings, snapshot, inst, None, types["a10g-12c128g"], queues["a10g-12c128g"])
    assert [verb for verb, _ in plan.actions] == [ADD_FINALIZER, CREATE_POD]
    pod = pod_of(plan)
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpustack-fnv64-d4c0e6cd72686015"
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_deleting_the_type_drains_the_instance(policy, world):
    snapshot, settings, types, queues = world
    it = copy.deepcopy(types["a10g-12c128g"])
    it["metadata"]["deletionTimestamp"] = "2026-11-29T00:00:00Z"
    pod = {"metadata": {"name": "custom-demo"}, "status": {"phase": "Running"}}
    plan = plan_instance(policy, settings, snapshot, custom_demo(), pod, it, queues["a10g-12c128g"])
    assert plan.actions == [(SET_STOP, True), (DELETE_POD, "custom-demo")]
    assert plan.status["phase"] == "Stopping" and plan.requeue == 2
    # once the Pod is gone: Stopped (seed step 4: `kubectl get instance custom-demo` -> Stopped)
    stopped = plan_instance(policy, settings, snapshot, custom_demo(stop=True), None, None, None)
    assert stopped.status == {"phase": "Stopped"} and stopped.actions == []


def test_a_hold_and_drain_queue_stops_instances_but_an_administrators_hold_does_not(policy, world):
    snapshot, settings, types, queues = world
    pod = {"metadata": {"name": "custom-demo"}, "spec": {"nodeName": "node-a10g"},
           "status": {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"},
                                                         {"type": "Initialized", "status": "True"},
                                                         {"type": "Ready", "status": "True"}]}}
    for policy_name, drained in (("HoldAndDrain", True), ("Hold", False)):
        queue = copy.deepcopy(queues["a10g-12c128g"])
        queue["spec"]["stopPolicy"] = policy_name
        plan = plan_instance(policy, settings, snapshot, custom_demo(), pod, types["a10g-12c128g"], queue)
        assert ((SET_STOP, True) in plan.actions) is drained
    assert plan.status == {"phase": "Ready", "nodeName": "node-a10g"}


def test_a_repointed_stopped_instance_starts_again(policy, world):
    snapshot, settings, types, queues = world
    inst = custom_demo(type="gpustack--nvidia-a10g-linux-amd64", stop=False)
    inst["status"] = {"phase": "Stopped"}
    plan = plan_instance(policy, settings, snapshot, inst, None, types["gpustack--nvidia-a10g-linux-amd64"],
                         queues["gpustack--nvidia-a10g-linux-amd64"])
    assert plan.status == {"phase": "Starting"}
    assert pod_of(plan)["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpustack-fnv64-c4680bb149644f1c"


def test_deleting_an_instance_deletes_its_pod_then_its_finalizer(policy, world):
    snapshot, settings, types, queues = world
    inst = custom_demo()
    inst["metadata"]["deletionTimestamp"] = "2026-11-29T00:00:00Z"
    plan = plan_instance(policy, settings, snapshot, inst, {"metadata": {"name": "custom-demo"}}, types["a10g-12c128g"], None)
    assert plan.actions == [(DELETE_POD, "custom-demo")] and plan.status["phase"] == "Deleting"
    plan = plan_instance(policy, settings, snapshot, inst, None, types["a10g-12c128g"], None)
    assert plan.actions == [(REMOVE_FINALIZER, FIN)]


def test_a_pod_kubelet_refused_is_rebuilt_within_five_minutes(policy, world):
    snapshot, settings, types, queues = world
    failed = {"metadata": {"name": "custom-demo"}, "status": {"phase": "Failed", "reason": "UnexpectedAdmissionError"}}
    early = plan_instance(policy, settings, snapshot, custom_demo(), failed, types["a10g-12c128g"], queues["a10g-12c128g"], 30)
    assert early.actions == [(DELETE_POD, "custom-demo")] and early.requeue == 30
    late = plan_instance(policy, settings, snapshot, custom_demo(), failed, types["a10g-12c128g"], queues["a10g-12c128g"], 301)
    assert late.actions == []


# -- docs/concepts/instances.md "The Instance's Pod" Service, docs/concepts/instances.md "Instances" status.ports / hostIPs ---

RUNNING = {"phase": "Running", "podIP": "10.0.0.7",
           "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Initialized", "status": "True"},
                          {"type": "Ready", "status": "True"}]}


def with_objects(snapshot, *objects):
    from runtime.engine.snapshot import Snapshot
    return Snapshot.from_objects([*snapshot, *objects])


def test_an_instance_with_ports_gets_a_node_port_service_then_status_ports(policy, world):
    snapshot, settings, types, queues = world
    inst = custom_demo(ports=[{"port": 8080}, {"port": 53, "protocol": "UDP", "name": "dns"}])
    created = plan_instance(policy, settings, snapshot, inst, None, types["a10g-12c128g"], queues["a10g-12c128g"])
    pod = pod_of(created)
    assert pod["spec"]["containers"][0]["ports"] == [
        {"name": "tcp-8080", "containerPort": 8080, "protocol": "TCP"},
        {"name": "udp-53", "containerPort": 53, "protocol": "UDP"}]
    pod = {**pod, "spec": {**pod["spec"], "nodeName": "node-a10g"}, "status": RUNNING}
    plan = plan_instance(policy, settings, snapshot, inst, pod, types["a10g-12c128g"], queues["a10g-12c128g"])
    assert plan.actions == [(CREATE_SERVICE, {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "custom-demo", "namespace": "default",
                     "labels": {"kueue.x-k8s.io/queue-name": "gpustack-fnv64-d4c0e6cd72686015",
                                "app.kubernetes.io/part-of": "u-3"},
                     "ownerReferences": [{"apiVersion": "worker.gpustack.ai/v1", "kind": "Instance",
                                          "name": "custom-demo", "uid": "u-3", "controller": True,
                                          "blockOwnerDeletion": True}]},
        "spec": {"type": "NodePort",
                 "selector": {"kueue.x-k8s.io/queue-name": "gpustack-fnv64-d4c0e6cd72686015",
                              "app.kubernetes.io/part-of": "u-3"},
                 "ports": [{"name": "tcp-8080", "protocol": "TCP", "port": 8080, "targetPort": 8080},
                           {"name": "udp-53", "protocol": "UDP", "port": 53, "targetPort": 53}]}})]
    assert "ports" not in plan.status
    service = copy.deepcopy(plan.actions[0][1])
    service["spec"]["ports"][0]["nodePort"] = 31080
    half = plan_instance(policy, settings, with_objects(snapshot, service), inst, pod,
                         types["a10g-12c128g"], queues["a10g-12c128g"])
    assert half.actions == [] and "ports" not in half.status    # filled once every port has a NodePort
    service["spec"]["ports"][1]["nodePort"] = 30053
    full = plan_instance(policy, settings, with_objects(snapshot, service), inst, pod,
                         types["a10g-12c128g"], queues["a10g-12c128g"])
    assert full.actions == []
    assert full.status["ports"] == [{"port": 8080, "protocol": "TCP", "name": "tcp-8080", "nodePort": 31080},
                                    {"port": 53, "protocol": "UDP", "name": "udp-53", "nodePort": 30053}]


def test_an_instance_without_ports_gets_no_service(policy, world):
    snapshot, settings, types, queues = world
    pod = {"metadata": {"name": "custom-demo", "namespace": "default"}, "spec": {"nodeName": "node-a10g",
           "containers": [{"name": "main"}]}, "status": RUNNING}
    plan = plan_instance(policy, settings, snapshot, custom_demo(), pod, types["a10g-12c128g"], queues["a10g-12c128g"])
    assert plan.actions == [] and "ports" not in plan.status


def test_host_ips_list_external_addresses_first_then_internal(policy, world):
    snapshot, settings, types, queues = world
    node = copy.deepcopy(snapshot.get("Node", "node-a10g"))
    node["status"] = {**(node.get("status") or {}), "addresses": [
        {"type": "InternalIP", "address": "172.31.0.10"}, {"type": "Hostname", "address": "node-a10g"},
        {"type": "ExternalIP", "address": "54.1.2.3"}, {"type": "InternalIP", "address": "fd00::10"}]}
    others = [o for o in snapshot if not (o["kind"] == "Node" and o["metadata"]["name"] == "node-a10g")]
    from runtime.engine.snapshot import Snapshot
    pod = {"metadata": {"name": "custom-demo", "namespace": "default"},
           "spec": {"nodeName": "node-a10g", "containers": [{"name": "main"}]}, "status": RUNNING}
    plan = plan_instance(policy, settings, Snapshot.from_objects([*others, node]), custom_demo(), pod,
                         types["a10g-12c128g"], queues["a10g-12c128g"])
    assert plan.status == {"phase": "Ready", "nodeName": "node-a10g",
                           "hostIPs": [{"ip": "54.1.2.3"}, {"ip": "172.31.0.10"}, {"ip": "fd00::10"}],
                           "podIPs": [{"ip": "10.0.0.7"}]}


def test_a_pod_in_graceful_deletion_is_waited_for_not_deleted_again(policy, world):
    """docs/concepts/instances.md "Life cycle": the finalizer goes only once the Pod is gone; a Pod its kubelet is still
    stopping (deletionTimestamp set) is not deleted again, the Instance is looked at every 2 s."""
    snapshot, settings, types, queues = world
    pod = {"metadata": {"name": "custom-demo", "deletionTimestamp": "2026-11-29T00:00:00Z",
                        "deletionGracePeriodSeconds": 30}, "status": {"phase": "Running"}}
    deleting = custom_demo()
    deleting["metadata"]["deletionTimestamp"] = "2026-11-29T00:00:00Z"
    plan = plan_instance(policy, settings, snapshot, deleting, pod, types["a10g-12c128g"], queues["a10g-12c128g"])
    assert plan.actions == [] and plan.requeue == 2 and plan.status["phase"] == "Deleting"
    stopping = plan_instance(policy, settings, snapshot, custom_demo(stop=True), pod, types["a10g-12c128g"],
                             queues["a10g-12c128g"])
    assert stopping.actions == [] and stopping.requeue == 2 and stopping.status == {"phase": "Stopping"}
