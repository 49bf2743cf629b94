"""The controller's Instance and Setting-view plans (runtime/controller/instances.py, settingsview.py):
pure, on the seed's step-4 snapshot (docs/concepts/instances.md "Life cycle" and "The Instance's Pod", docs/concepts/settings.md "Settings")."""
from __future__ import annotations

import base64
import json

import pytest

from runtime.controller.instances import plan_instances
from runtime.controller.settingsview import plan_settings
from runtime.engine.ownership import owned, owned_by_instance
from runtime.engine.pools.derive import derive
from runtime.engine.instances.podstatus import allocations_from_pod
from runtime.engine.snapshot import Snapshot
from runtime.snapshots import load_snapshot
from tests import builders
from tests.seedfiles import FIXTURES

FIN = "worker.gpustack.ai/instance"
OWNER = {"apiVersion": "worker.gpustack.ai/v1", "kind": "Instance", "name": "custom-demo", "uid": "u-3",
         "controller": True, "blockOwnerDeletion": True}


@pytest.fixture(scope="module")
def base():
    return load_snapshot([FIXTURES / "seed" / "step4-custom-type"])


def instance(**meta):
    inst = {"apiVersion": "worker.gpustack.ai/v1", "kind": "Instance",
            "metadata": {"name": "custom-demo", "namespace": "default", "uid": "u-3",
                         "creationTimestamp": "2026-11-29T10:00:00Z", "finalizers": [FIN]},
            "spec": {"type": "a10g-12c128g", "image": "ubuntu:24.04",
                     "resources": {"accelerator": "1", "cpu": "12", "ram": "128Gi", "localStorage": "15Gi"},
                     "volume": {"ephemeral": {"capacity": "1Gi"}}}}
    inst["metadata"].update(meta)
    return inst


def pod(owner=OWNER, **meta):
    """The Instance's Pod custom-demo, owned by ``owner`` (no ownerReferences when None)."""
    return builders.pod("custom-demo", uid="p-1", created="2026-11-29T10:00:01Z", owner=owner or None,
                        image="ubuntu:24.04", **meta)


def planned(policy, base, *objects, drop_type=False):
    objs = [o for o in base if not (drop_type and o.get("kind") == "InstanceType"
                                    and o["metadata"]["name"] == "a10g-12c128g")]
    snapshot = Snapshot.from_objects(objs + list(objects))
    state = derive(policy, snapshot)
    return plan_instances(policy, state, snapshot)


def verbs(actions):
    return [(a.verb, a.kind) for a in actions]


def test_new_instance_gets_finalizer_then_pod(policy, base):
    out = planned(policy, base, instance(finalizers=[]))
    assert verbs(out.actions) == [("add-finalizer", "Instance"), ("create", "Pod")]
    body = out.actions[1].body
    assert body["metadata"]["ownerReferences"] == [OWNER]
    assert "nodeName" not in body["spec"]
    assert out.requeue == 0 and out.foreign == []


def test_drain_writes_stopping_first_then_stop_then_deletes_the_pod(policy, base):
    out = planned(policy, base, instance(), pod(), drop_type=True)
    assert verbs(out.actions) == [("apply-status", "Instance"), ("patch", "Instance"), ("delete", "Pod")]
    assert out.actions[0].body["status"] == {"phase": "Stopping"}
    assert out.actions[1].body == {"spec": {"stop": True},   # the controller says it stopped it
                                   "metadata": {"annotations": {"worker.gpustack.ai/stopped-by": "controller"}}}
    assert out.requeue == 2.0


def test_a_foreign_pod_is_neither_deleted_nor_created_over(policy, base):
    stranger = pod(owner={**OWNER, "uid": "someone-else"})
    out = planned(policy, base, instance(), stranger)
    assert out.foreign == ["default/custom-demo"]
    assert [a for a in out.actions if a.kind == "Pod"] == []
    deleting = planned(policy, base, instance(deletionTimestamp="2026-11-29T11:00:00Z"), pod(owner=None))
    assert verbs(deleting.actions) == [("apply-status", "Instance"), ("remove-finalizer", "Instance")]


def test_unchanged_status_is_not_written_again(policy, base):
    inst = instance()
    inst["status"] = {"phase": "Scheduling"}
    assert planned(policy, base, inst, pod()).actions == []


def test_a_pending_instance_says_why_the_node_devices_check_holds_it_back(policy, base):
    """docs/concepts/out-of-service.md "Cordoned and tainted nodes": the check's Retry message on the Pod's
    Workload becomes the phaseMessage while the Pod waits."""
    retry = "no node of flavor f can hold the request now: node node-a10g is cordoned"
    workload = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                "metadata": {"name": "pod-custom-demo-1a2b3", "namespace": "default", "uid": "w-1",
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "custom-demo",
                                                  "uid": "p-1", "controller": True}]},
                "spec": {"queueName": "q", "podSets": []},
                "status": {"admissionChecks": [{"name": "gpustack-node-devices", "state": "Retry",
                                                "message": retry, "lastTransitionTime": "2026-11-29T10:00:02Z"}]}}
    gated = pod()
    gated["status"] = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
         "message": "Scheduling is blocked due to non-empty scheduling gates"}]}
    out = planned(policy, base, instance(), gated, workload)
    assert [a.body["status"] for a in out.actions if a.verb == "apply-status"] == [
        {"phase": "Pending", "phaseMessage": retry}]
    workload["status"]["admissionChecks"][0]["state"] = "Ready"
    out = planned(policy, base, instance(), gated, workload)
    assert [a.body["status"] for a in out.actions if a.verb == "apply-status"] == [
        {"phase": "Pending", "phaseMessage": "Scheduling is blocked due to non-empty scheduling gates"}]


def test_allocations_merge_containers_by_group(policy):
    acc = lambda i, n: {"id": f"GPU-{i}", "index": i, "mode": 3, "allocated": n}  # noqa: E731
    text = json.dumps({"main": [{"id": "a10g", "manufacturer": "nvidia", "accelerators": [acc(0, 5)]},
                                {"id": "t4", "manufacturer": "nvidia", "accelerators": [acc(1, 7)]}],
                       "sshd": [{"id": "a10g", "manufacturer": "nvidia", "accelerators": [acc(2, 9)]}]})
    got = allocations_from_pod(policy, {"metadata": {"annotations": {policy.key("allocation"): text}}})
    assert got == [{"id": "a10g", "manufacturer": "nvidia", "accelerators": [acc(0, 5), acc(2, 9)]},
                   {"id": "t4", "manufacturer": "nvidia", "accelerators": [acc(1, 7)]}]
    assert allocations_from_pod(policy, {"metadata": {"annotations": {policy.key("allocation"): "{not json"}}}) == []
    assert allocations_from_pod(policy, {"metadata": {}}) == []


# -- Setting view -------------------------------------------------------------------------------------
NS = "gpustack-system"


def secret(**values):
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "gpustack-settings", "namespace": NS},
            "data": {k.replace("_", "-"): base64.b64encode(v.encode()).decode() for k, v in values.items()}}


def setting(name, generation, observed, value=None, status_value="false"):
    obj = {"apiVersion": "gpustack.ai/v1", "kind": "Setting",
           "metadata": {"name": name, "namespace": NS, "generation": generation}}
    if value is not None:
        obj["spec"] = {"value": value}
    if observed:
        obj["status"] = {"description": "gate for taking spec.privileged on Instances", "editable": True,
                         "sensitive": False, "value": status_value, "observedGeneration": observed}
    return obj


def settings_plan(policy, *objects):
    return plan_settings(policy.settings, NS, Snapshot.from_objects(list(objects)))


def test_every_setting_is_created_with_status_showing_the_secret_or_default(policy):
    actions = settings_plan(policy, secret(instance_privileged_allowed="true"))
    assert len(actions) == 22 and verbs(actions) == [("create", "Setting"), ("apply-status", "Setting")] * 11
    by_name = {a.name: a.body["status"] for a in actions if a.verb == "apply-status"}
    assert by_name["instance-privileged-allowed"] == {
        "description": "gate for taking spec.privileged on Instances", "editable": True, "sensitive": False,
        "value": "true", "observedGeneration": 1}
    assert by_name["instance-ssh-server-image"]["value"] == "gpustack/ssh-server:v1.3.0"   # missing key: default
    assert "spec" not in actions[0].body


def only(actions, name):
    return [a for a in actions if a.name in (name, "gpustack-settings") and a.verb != "create"]


def test_a_new_spec_value_goes_to_the_secret_then_observed_generation(policy):
    name = "instance-privileged-allowed"
    actions = only(settings_plan(policy, secret(instance_privileged_allowed="false"),
                                 setting(name, 2, 1, value="true")), name)
    assert verbs(actions) == [("patch", "Secret"), ("apply-status", "Setting")]
    assert actions[0].body == {"data": {name: base64.b64encode(b"true").decode()}}
    assert actions[1].body["status"]["value"] == "true" and actions[1].body["status"]["observedGeneration"] == 2


def test_a_stale_spec_value_is_not_reapplied_and_the_status_mirrors_the_secret(policy):
    name = "instance-privileged-allowed"
    actions = only(settings_plan(policy, secret(instance_privileged_allowed="false"),
                                 setting(name, 2, 2, value="true", status_value="true")), name)
    assert verbs(actions) == [("apply-status", "Setting")]
    assert actions[0].body["status"]["value"] == "false" and actions[0].body["status"]["observedGeneration"] == 2


def test_the_value_the_secret_holds_is_a_no_op_and_no_secret_defers_the_write(policy):
    name = "instance-privileged-allowed"
    same = only(settings_plan(policy, secret(instance_privileged_allowed="true"),
                              setting(name, 2, 1, value="true", status_value="true")), name)
    assert verbs(same) == [("apply-status", "Setting")] and same[0].body["status"]["observedGeneration"] == 2
    deferred = only(settings_plan(policy, setting(name, 2, 1, value="true")), name)
    assert deferred == []   # observedGeneration stays 1 until the Secret exists


def test_only_pods_an_instance_controls_count_as_ours(policy):
    assert owned(policy, pod()) and owned_by_instance(pod(), "u-3")
    assert not owned_by_instance(pod(), "u-4")
    assert not owned(policy, pod(owner=None))
    assert not owned(policy, pod(owner={**OWNER, "controller": False}))
    assert not owned(policy, pod(owner={**OWNER, "kind": "ReplicaSet", "apiVersion": "apps/v1"}))
    assert not owned(policy, pod(owner={**OWNER, "apiVersion": "example.com/v1"}))


def test_the_retry_message_outlives_kueues_reset_to_pending(policy, base):
    """Kueue resets a Retry to Pending when it evicts (``Reset to Pending after eviction. Previously:
    Retry``): the controller remembers the message for the Pod until the check answers Ready."""
    from runtime.controller.instances import RetryMessages
    from runtime.engine.admissioncheck import Verdict
    workload = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                "metadata": {"name": "pod-custom-demo-1a2b3", "namespace": "default", "uid": "w-1",
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "custom-demo", "uid": "p-1"}]},
                "spec": {"queueName": "q", "podSets": []},
                "status": {"admissionChecks": [{"name": "gpustack-node-devices", "state": "Pending",
                                                "message": "Reset to Pending after eviction. Previously: Retry"}]}}
    retry = "no node of flavor f can hold the request now: node node-a10g is cordoned"
    remembered = RetryMessages()
    snap = Snapshot.from_objects(list(base) + [workload])
    remembered.update(snap, {("default", "pod-custom-demo-1a2b3"): Verdict("Retry", retry)})
    assert remembered.by_pod == {("default", "custom-demo"): retry}
    gated = pod()
    gated["status"] = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated", "message": "gated"}]}
    state = derive(policy, Snapshot.from_objects(list(base) + [instance(), gated, workload]))
    out = plan_instances(policy, state, Snapshot.from_objects(list(base) + [instance(), gated, workload]), remembered.by_pod)
    assert [a.body["status"] for a in out.actions if a.verb == "apply-status"] == [
        {"phase": "Pending", "phaseMessage": retry}]
    remembered.update(snap, {("default", "pod-custom-demo-1a2b3"): Verdict("Ready", "node node-a10g can hold the request")})
    assert remembered.by_pod == {}
    remembered.update(snap, {("default", "pod-custom-demo-1a2b3"): Verdict("Retry", retry)})
    remembered.update(Snapshot.from_objects(list(base)), {})            # the Workload is gone
    assert remembered.by_pod == {}
