"""A pin picks its flavor (docs/concepts/instances.md, "Pinned to a node"): seed step 6's pinned-demo
against Kueue's flavor choice (tests/kueueflavors.py) and the gpustack-node-devices check.

Before the pin term, the Pod's only placement was ``nodeSelector: {kubernetes.io/hostname:
node-t4-b}``; Kueue reads only the flavors' label keys, so it reserved the T4 pool's first flavor
(``...-1d``, node-t4-a alone) and the check answered Retry, again after every eviction.
"""
from __future__ import annotations

import copy

import pytest

from runtime.engine import admissioncheck as ac
from runtime.engine.instances.instancelife import plan_instance
from runtime.engine.instances.instancepods import render_pod
from runtime.engine.pools.derive import derive
from runtime.engine.snapshot import Snapshot
from runtime.model.nodepin import flavors_holding, pin_requirements, with_node_requirements
from runtime.snapshots import load_snapshot
from tests.kueueflavors import assign_flavor
from tests.seedfiles import FIXTURES, seed_object

T4 = "gpustack--nvidia-tesla-t4-linux-amd64"
CPU = "gpustack--generic-linux-amd64"
T4_1D = "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-1d"
T4_4D = "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-4d"
T4B_GPU0 = "GPU-3f6e8b21-90c4-4d7a-b5e2-1a9c8d7e6f00"

#: pinned-demo's affinity: node-t4-b's values of the T4 pool flavors' label keys (docs/concepts/instances.md
#: "Pinned to a node"); the live test asserts the same on the Pod the controller writes
PINNED_AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
        {"key": "gpustack.ai/managed", "operator": "In", "values": ["true"]},
        {"key": "general.feature.gpustack.ai/intel-xeon-platinum-8259cl", "operator": "In", "values": ["true"]},
        {"key": "acceleratable.feature.gpustack.ai/nvidia-tesla-t4", "operator": "In", "values": ["true"]},
        {"key": "acceleratable.feature.gpustack.ai/nvidia-tesla-t4.count", "operator": "In", "values": ["4"]}]}]}}}


@pytest.fixture(scope="module")
def seed(policy):
    """The seed's step-1 cluster with the controller's derived flavors and queues, its settings with
    claim placement off (the dataset claim is not part of this test), the types by name."""
    objects = list(load_snapshot([FIXTURES / "seed" / "step1"]))
    state = derive(policy, Snapshot.from_objects(objects))
    snapshot = Snapshot.from_objects(objects + state.resource_flavors + state.cluster_queues)
    settings = type(state.settings)(values={**state.settings.values, "instance-persistent-volume-placement": False})
    return snapshot, settings, {it["metadata"]["name"]: it for it in state.instance_types}


def pinned(node="node-t4-b", type_name=T4):
    inst = copy.deepcopy(seed_object("step6-instance-pinned-demo.yaml"))
    inst["spec"].update({"nodeName": node, "type": type_name})
    inst["spec"]["resources"].update({"cpu": "8", "ram": "32Gi", "localStorage": "15Gi"})
    inst["metadata"]["uid"] = "u-6"
    return inst


def workload_of(pod: dict, flavor: str) -> dict:
    """The Workload Kueue builds from ``pod`` once it reserved ``flavor``, the check Pending."""
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": "pod-pinned-demo-6c1e2", "namespace": "default", "uid": "w-6"},
            "spec": {"queueName": pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"],
                     "podSets": [{"name": "main", "count": 1, "template": {"spec": pod["spec"]}}]},
            "status": {"admission": {"clusterQueue": T4, "podSetAssignments": [
                {"name": "main", "flavors": {"credits.gpustack.ai/nvidia": flavor}, "count": 1}]},
                "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                                "message": f"Quota reserved in ClusterQueue {T4}",
                                "lastTransitionTime": "2026-12-02T18:00:00Z"}],
                "admissionChecks": [{"name": "gpustack-node-devices", "state": "Pending", "message": "",
                                     "lastTransitionTime": "2026-12-02T18:00:00Z"}]}}


def test_the_pinned_demo_gets_the_flavor_holding_node_t4_b_and_the_check_is_ready(policy, seed):
    snapshot, settings, types = seed
    pod = render_pod(policy, settings, snapshot, pinned(), types[T4]).pod
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "node-t4-b"}
    assert pod["spec"]["affinity"] == PINNED_AFFINITY
    queue = snapshot.get("ClusterQueue", T4)
    flavors = {f["metadata"]["name"]: f for f in snapshot.list("ResourceFlavor")}
    assert [r["name"] for r in queue["spec"]["resourceGroups"][0]["flavors"]] == [T4_1D, T4_4D]
    flavor = assign_flavor(pod["spec"], queue, flavors)
    assert flavor == T4_4D
    verdict = ac.check_workload(policy, snapshot, workload_of(pod, flavor))
    assert (verdict.state, verdict.message) == ("Ready", "node node-t4-b can hold the request")
    assert verdict.placements == (ac.Placement("main", "node-t4-b", (T4B_GPU0,)),)


def test_the_hostname_selector_alone_is_what_looped(policy, seed):
    """The Pod as it was rendered before the pin term: Kueue takes ``...-1d`` and the check retries."""
    snapshot, settings, types = seed
    pod = render_pod(policy, settings, snapshot, pinned(), types[T4]).pod
    pod["spec"].pop("affinity")
    queue = snapshot.get("ClusterQueue", T4)
    flavors = {f["metadata"]["name"]: f for f in snapshot.list("ResourceFlavor")}
    flavor = assign_flavor(pod["spec"], queue, flavors)
    assert flavor == T4_1D
    verdict = ac.check_workload(policy, snapshot, workload_of(pod, flavor))
    assert (verdict.state, verdict.message) == ("Retry", f"no node of flavor {T4_1D} can hold the request now")


def test_a_pin_to_a_node_outside_the_pool_matches_no_flavor(policy, seed):
    snapshot, settings, types = seed
    pod = render_pod(policy, settings, snapshot, pinned("node-cpu"), types[T4]).pod
    queue = snapshot.get("ClusterQueue", T4)
    flavors = {f["metadata"]["name"]: f for f in snapshot.list("ResourceFlavor")}
    assert assign_flavor(pod["spec"], queue, flavors) is None
    # the Pod is created (Kueue keeps it pending, with its own reason); the Instance says which flavors
    gated = copy.deepcopy(pod)
    gated["status"] = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
         "message": "Scheduling is blocked due to non-empty scheduling gates"}]}
    plan = plan_instance(policy, settings, snapshot, {**pinned("node-cpu"), "metadata": {
        **pinned("node-cpu")["metadata"], "finalizers": ["worker.gpustack.ai/instance"]}}, gated, types[T4], queue)
    assert plan.status["phase"] == "Pending"
    assert plan.status["phaseMessage"] == (
        f"node node-cpu is in no flavor of pool {T4} (its flavors: {T4_1D}, {T4_4D}): "
        "Kueue cannot admit a Pod pinned to it")


def test_a_pin_into_the_cpu_pool_crosses_the_pool_terms(policy, seed):
    """The generic pool's Pod already has one term per flavor (Kueue does not charge cpu): the pin's
    requirements join every term, so only node-t4-b's own flavor (``...-48c``) can match."""
    snapshot, settings, types = seed
    inst = pinned(type_name=CPU)
    inst["spec"]["resources"].pop("accelerator")
    pod = render_pod(policy, settings, snapshot, inst, types[CPU]).pod
    queue = snapshot.get("ClusterQueue", CPU)
    flavors = {f["metadata"]["name"]: f for f in snapshot.list("ResourceFlavor")}
    assert assign_flavor(pod["spec"], queue, flavors) == "gpustack--intel-xeon-platinum-8259cl-linux-amd64-48c"
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert len(terms) == len(queue["spec"]["resourceGroups"][0]["flavors"])
    assert all({"key": "general.feature.gpustack.ai/amd-epyc-7r13", "operator": "DoesNotExist"}
               in t["matchExpressions"] for t in terms)


def test_pin_requirements_cover_flavors_that_do_not_carry_a_key():
    a = {"metadata": {"name": "a"}, "spec": {"nodeLabels": {"os": "linux", "cpu-x": "true"}}}
    b = {"metadata": {"name": "b"}, "spec": {"nodeLabels": {"os": "linux", "cpu-y": "true", "zone": "1"}}}
    c = {"metadata": {"name": "c"}, "spec": {"nodeLabels": {"os": "linux", "cpu-y": "true", "zone": "2"}}}
    node = {"os": "linux", "cpu-y": "true", "zone": "2"}
    assert pin_requirements(node, [a, b, c]) == [
        {"key": "os", "operator": "In", "values": ["linux"]},
        {"key": "cpu-x", "operator": "DoesNotExist"},
        {"key": "zone", "operator": "NotIn", "values": ["1"]}]
    assert flavors_holding(node, [a, b, c]) == [c]
    assert pin_requirements(node, []) == []


def test_with_node_requirements_appends_once_and_leaves_empty_terms():
    req = {"key": "k", "operator": "In", "values": ["v"]}
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [req]}, {}]}}}
    assert with_node_requirements(aff, [req]) == aff
    assert with_node_requirements(None, [req]) == {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [req]}]}}}
    assert with_node_requirements(None, []) == {}


def test_the_loop_names_the_flavor_holding_a_node_that_can_take_it(policy, seed):
    snapshot, settings, types = seed
    pod = render_pod(policy, settings, snapshot, pinned(), types[T4]).pod
    pod["spec"].pop("affinity")   # the Pod before the pin term: Kueue took -1d
    looping = workload_of(pod, T4_1D)
    verdict = ac.check_workload(policy, snapshot, looping)
    assert ac.flavor_that_holds(policy, snapshot, looping, verdict) == (T4_4D, "node-t4-b")
    held = workload_of(pod, T4_4D)
    assert ac.flavor_that_holds(policy, snapshot, held, ac.check_workload(policy, snapshot, held)) is None   # Ready
    # a pin to node-cpu: no flavor of the T4 pool can take it, so it is no loop to report
    cpu = render_pod(policy, settings, snapshot, pinned("node-cpu"), types[T4]).pod
    cpu["spec"].pop("affinity")
    stuck = workload_of(cpu, T4_1D)
    assert ac.flavor_that_holds(policy, snapshot, stuck, ac.check_workload(policy, snapshot, stuck)) is None


def test_the_audit_names_a_looping_workload(policy, seed):
    from runtime.report.audit import retry_loop_results
    snapshot, settings, types = seed
    pod = render_pod(policy, settings, snapshot, pinned(), types[T4]).pod
    pod["spec"].pop("affinity")
    looping = workload_of(pod, T4_1D)
    looping["status"]["admissionChecks"][0]["state"] = "Retry"
    fixed = workload_of(render_pod(policy, settings, snapshot, pinned(), types[T4]).pod, T4_4D)
    fixed["metadata"]["name"] = "pod-fixed"
    fixed["status"]["admissionChecks"][0]["state"] = "Retry"   # pinned to node-t4-a: no other flavor can do better
    fixed["status"]["admission"]["podSetAssignments"][0]["flavors"] = {"credits.gpustack.ai/nvidia": T4_1D}
    fixed["spec"]["podSets"][0]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "node-t4-a"}
    fixed["spec"]["podSets"][0]["template"]["spec"].pop("affinity")
    resources = fixed["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]
    resources["limits"]["nvidia.com/gpu"] = resources["requests"]["nvidia.com/gpu"] = "4"   # more than node-t4-a has
    assert ac.check_workload(policy, Snapshot.from_objects(list(snapshot) + [fixed]), fixed).state == "Retry"
    spec = policy.ruleset.get("AuditPolicy")
    snap = Snapshot.from_objects(list(snapshot) + [looping, fixed])
    [result] = retry_loop_results(policy, snap, spec)
    assert (result.policy, result.rule, result.result) == ("admission-check", "flavor-retry-loop", "warn")
    assert result.resource.name == "pod-pinned-demo-6c1e2"
    assert result.message == (
        f"the check answers Retry on flavor {T4_1D}, while flavor {T4_4D} of pool {T4} holds node node-t4-b, "
        "which can take this Workload: its placement does not steer Kueue to that flavor, so it loops "
        "(a pin needs the flavors' label keys)")


def test_a_pin_edited_while_stopped_is_rendered_anew(policy, seed):
    """Stopping deletes the Pod; the Instance started again with another pin gets that node's term."""
    snapshot, settings, types = seed
    queue = snapshot.get("ClusterQueue", T4)
    restarted = pinned("node-t4-a")
    restarted["metadata"]["finalizers"] = ["worker.gpustack.ai/instance"]
    plan = plan_instance(policy, settings, snapshot, restarted, None, types[T4], queue)
    [(verb, pod)] = plan.actions
    assert verb == "create-pod"
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "node-t4-a"}
    flavors = {f["metadata"]["name"]: f for f in snapshot.list("ResourceFlavor")}
    assert assign_flavor(pod["spec"], queue, flavors) == T4_1D
