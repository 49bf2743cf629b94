"""InstancePersistentVolume -> PersistentVolumeClaim (docs/concepts/instances.md "Persistent volumes"): exact claims and status."""
from __future__ import annotations

from runtime.controller.instances import plan_persistent_volumes
from runtime.engine.snapshot import Snapshot

IPV = {"apiVersion": "worker.gpustack.ai/v1", "kind": "InstancePersistentVolume",
       "metadata": {"name": "datasets", "namespace": "default", "uid": "ipv-1"},
       "spec": {"type": "standard", "capacity": "50Gi", "accessMode": "ReadWriteMany"}}
OWNER = [{"apiVersion": "worker.gpustack.ai/v1", "kind": "InstancePersistentVolume", "name": "datasets",
          "uid": "ipv-1", "controller": True, "blockOwnerDeletion": True}]


def test_a_new_instance_persistent_volume_gets_its_claim(policy):
    (action,) = plan_persistent_volumes(policy, Snapshot.from_objects([IPV]))
    assert (action.verb, action.kind, action.name, action.namespace) == ("create", "PersistentVolumeClaim",
                                                                        "datasets", "default")
    assert action.body == {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                           "metadata": {"name": "datasets", "namespace": "default", "ownerReferences": OWNER},
                           "spec": {"resources": {"requests": {"storage": "50Gi"}}, "storageClassName": "standard",
                                    "accessModes": ["ReadWriteMany"]}}


def test_the_default_capacity_comes_from_the_rules(policy):
    ipv = {**IPV, "spec": {"type": "standard", "accessMode": "ReadWriteOnce"}}
    (action,) = plan_persistent_volumes(policy, Snapshot.from_objects([ipv]))
    assert action.body["spec"]["resources"] == {"requests": {"storage": "20Gi"}}


def test_status_mirrors_its_claim_once_and_ignores_a_foreign_claim(policy):
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": "datasets", "namespace": "default", "ownerReferences": OWNER},
           "spec": {"volumeName": "pv-7"}, "status": {"phase": "Bound"}}
    (action,) = plan_persistent_volumes(policy, Snapshot.from_objects([IPV, pvc]))
    assert (action.verb, action.kind) == ("apply-status", "InstancePersistentVolume")
    assert action.body["status"] == {"phase": "Bound", "volume": "pv-7"}
    mirrored = {**IPV, "status": {"phase": "Bound", "volume": "pv-7"}}
    assert plan_persistent_volumes(policy, Snapshot.from_objects([mirrored, pvc])) == []
    foreign = {**pvc, "metadata": {"name": "datasets", "namespace": "default"}}
    assert plan_persistent_volumes(policy, Snapshot.from_objects([IPV, foreign])) == []
