"""The controller's plan (runtime/engine/plan.py) on the seed fixtures, without a server.

An in-memory cluster (:class:`MemCluster`) executes the planned actions the way the API server
would for our purposes (apply replaces our fields, status through its own path, create-only,
deletes). A plan executed and re-planned must be empty: that is the controller's idempotence.
"""
from __future__ import annotations

import copy
from collections import Counter

import pytest

from runtime.engine.plan import plan
from runtime.engine.pools.derive import derive
from runtime.engine.snapshot import Snapshot, name_of
from runtime.snapshots import load_snapshot
from tests.seedfiles import FIXTURES

A10G_FLAVOR = "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d"
A10G_CPU_FLAVOR = "gpustack--amd-epyc-7r32-linux-amd64-4c"


def _merge(target: dict, patch: dict) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


class MemCluster:
    """Objects by (kind, namespace, name); ``writes`` counts executed actions."""

    def __init__(self, objects):
        self.objects = {}
        for obj in objects:
            self.put(copy.deepcopy(obj))
        self.writes = 0

    def key(self, obj):
        return obj["kind"], obj["metadata"].get("namespace") or "", name_of(obj)

    def put(self, obj):
        self.objects[self.key(obj)] = obj

    def snapshot(self) -> Snapshot:
        return Snapshot.from_objects(copy.deepcopy(list(self.objects.values())))

    def execute(self, actions):
        for a in actions:
            self.writes += 1
            key = (a.kind, a.namespace, a.name)
            live = self.objects.get(key)
            if a.verb in ("apply", "recreate"):
                body = copy.deepcopy({k: v for k, v in a.body.items() if k != "status"})
                if live is not None and a.verb == "apply":
                    merged = copy.deepcopy(live)
                    _merge(merged, body)
                    merged["spec"] = body.get("spec", merged.get("spec"))
                    body = merged
                self.put(body)
            elif a.verb == "create":
                assert live is None, f"create of an existing {key}"
                self.put(copy.deepcopy({k: v for k, v in a.body.items() if k != "status"}))
            elif a.verb == "apply-status":
                self.objects[key]["status"] = copy.deepcopy(a.body["status"])
            elif a.verb == "patch":
                _merge(live, a.body)
            elif a.verb == "delete":
                del self.objects[key]
            elif a.verb == "remove-finalizer":
                live["metadata"]["finalizers"].remove("gpustack.ai/controlled")
            else:
                raise AssertionError(a.verb)


def converge(policy, cluster: MemCluster, rounds: int = 3):
    """Plan and execute until the plan is empty; returns the actions of each round."""
    history = []
    for _ in range(rounds):
        snapshot = cluster.snapshot()
        actions = plan(policy, derive(policy, snapshot, live=True), snapshot, now="2026-01-01T00:00:00Z")
        history.append(actions)
        if not actions:
            return history
        cluster.execute(actions)
    return history


def common_objects():
    return list(load_snapshot([FIXTURES / "seed" / "common"]))


def counts(actions):
    return Counter((a.verb, a.kind) for a in actions)


def test_first_reconcile_of_the_seed_creates_every_pool_object(policy):
    snapshot = Snapshot.from_objects(common_objects())
    actions = plan(policy, derive(policy, snapshot, live=True), snapshot, now="2026-01-01T00:00:00Z")
    assert counts(actions) == Counter({
        ("apply", "ResourceFlavor"): 7, ("apply", "AdmissionCheck"): 1, ("apply-status", "AdmissionCheck"): 1,
        ("create", "InstanceType"): 3, ("apply", "ClusterQueue"): 3, ("create", "LocalQueue"): 3,
        ("apply-status", "InstanceType"): 3, ("apply", "InstanceTypeFlavor"): 3, ("patch", "Node"): 3})
    # dependency order: flavors before queues, queues before their LocalQueues, types before status
    verbs = [(a.verb, a.kind) for a in actions]
    assert verbs.index(("apply", "ClusterQueue")) > verbs.index(("apply", "ResourceFlavor"))
    assert verbs.index(("create", "LocalQueue")) > verbs.index(("apply", "ClusterQueue"))
    assert verbs.index(("apply-status", "InstanceType")) > verbs.index(("create", "InstanceType"))
    # a created type's status is the very next write, not after every queue (docs/performance.md "A pass proportional to what changed")
    for i, action in enumerate(actions):
        if action.verb == "create" and action.kind == "InstanceType":
            after = actions[i + 1]
            assert (after.verb, after.kind, after.name) == ("apply-status", "InstanceType", action.name)
    created = [a.body for a in actions if a.verb == "create" and a.kind == "InstanceType"]
    assert all("status" not in body for body in created)
    status = {a.name: a.body["status"] for a in actions if a.verb == "apply-status" and a.kind == "InstanceType"}
    assert status["gpustack--generic-linux-amd64"]["summary"]["cpu"] == "48/72"
    assert status["gpustack--nvidia-a10g-linux-amd64"]["summary"]["accelerator"] == "1/1 10/10 100/100 0/0"
    # live mode: no Kueue status yet -> Activating (snapshot mode would say Active)
    assert {s["phase"] for s in status.values()} == {"Activating"}


def test_second_plan_is_empty(policy):
    cluster = MemCluster(common_objects())
    history = converge(policy, cluster)
    assert len(history) == 2 and history[-1] == []
    assert len(history[0]) == 27  # 7 + 2 + 3 + 3 + 3 + 3 + 3 + 3 fit-label patches (node-cpu has none)


def test_snapshot_mode_is_unchanged_by_the_live_flag(policy):
    snapshot = load_snapshot([FIXTURES / "seed" / "step1"])
    phases = {name_of(it): it["status"]["phase"] for it in derive(policy, snapshot).instance_types}
    assert set(phases.values()) == {"Active"}
    live = {name_of(it): it["status"]["phase"] for it in derive(policy, snapshot, live=True).instance_types}
    assert set(live.values()) == {"Activating"}


def test_queue_with_active_condition_reads_active_in_live_mode(policy):
    cluster = MemCluster(common_objects())
    converge(policy, cluster)
    for key, obj in cluster.objects.items():
        if key[0] == "ClusterQueue":
            obj["status"] = {"conditions": [{"type": "Active", "status": "True", "reason": "Ready", "message": ""}]}
    history = converge(policy, cluster)
    assert counts(history[0]) == Counter({("apply-status", "InstanceType"): 3})
    assert {cluster.objects[k]["status"]["phase"] for k in cluster.objects if k[0] == "InstanceType"} == {"Active"}


def _unmanage(cluster: MemCluster):
    nf = cluster.objects[("NodeFeature", "gpustack-system", "node-a10g-gpustack-worker")]
    nf["spec"]["labels"]["gpustack.ai/managed"] = "false"


def test_unmanaged_node_deletes_its_flavors_and_empties_its_pool(policy):
    cluster = MemCluster(common_objects())
    converge(policy, cluster)
    _unmanage(cluster)
    history = converge(policy, cluster)
    first = history[0]
    assert sorted(a.name for a in first if a.verb == "delete") == sorted(
        [A10G_FLAVOR, A10G_CPU_FLAVOR, "gpustack--nvidia-a10g"])
    assert {a.name for a in first if (a.verb, a.kind) == ("apply", "ClusterQueue")} == {
        "gpustack--generic-linux-amd64", "gpustack--nvidia-a10g-linux-amd64"}
    assert history[-1] == []
    types = {k[2]: o for k, o in cluster.objects.items() if k[0] == "InstanceType"}
    assert types["gpustack--nvidia-a10g-linux-amd64"]["status"]["summary"]["accelerator"] == "0/0 0/0 0/0 0/0"
    assert types["gpustack--generic-linux-amd64"]["status"]["summary"]["cpu"] == "48/68"
    assert len([k for k in cluster.objects if k[0] == "ResourceFlavor"]) == 5
    # the type itself stays (never deleted); its queue stays with empty groups
    queue = cluster.objects[("ClusterQueue", "", "gpustack--nvidia-a10g-linux-amd64")]
    assert queue["spec"]["resourceGroups"] == []


def test_administrator_type_gets_status_only(policy):
    admin = {"apiVersion": "worker.gpustack.ai/v1", "kind": "InstanceType",
             "metadata": {"name": "a10g-12c128g", "labels": {"team": "ml"}},
             "spec": {"acceleratable": True, "acceleratorGroup": "nvidia-a10g", "generalGroup": "generic",
                      "os": "linux", "arch": "amd64", "unitResources": {"cpu": "12", "ram": "128Gi"},
                      "localStorage": "200Gi"}}
    cluster = MemCluster(common_objects() + [admin])
    history = converge(policy, cluster)
    touching = [a for actions in history for a in actions if a.kind == "InstanceType" and a.name == "a10g-12c128g"]
    assert [a.verb for a in touching] == ["apply-status"]
    live = cluster.objects[("InstanceType", "", "a10g-12c128g")]
    assert live["metadata"] == admin["metadata"] and live["spec"] == admin["spec"]
    assert live["status"]["entrance"] == "gpustack-fnv64-d4c0e6cd72686015"
    # its queue and LocalQueue are ours; deleting the type deletes them, never the other way round
    del cluster.objects[("InstanceType", "", "a10g-12c128g")]
    actions = converge(policy, cluster)[0]
    assert {(a.verb, a.kind, a.name) for a in actions} == {
        ("delete", "ClusterQueue", "a10g-12c128g"), ("delete", "LocalQueue", "gpustack-fnv64-d4c0e6cd72686015")}


def test_node_labels_change_recreates_the_flavor(policy):
    cluster = MemCluster(common_objects())
    converge(policy, cluster)
    flavor = cluster.objects[("ResourceFlavor", "", A10G_FLAVOR)]
    flavor["spec"]["nodeLabels"]["extra"] = "x"
    actions = converge(policy, cluster)[0]
    assert [(a.verb, a.name) for a in actions] == [("recreate", A10G_FLAVOR)]
    assert "extra" not in cluster.objects[("ResourceFlavor", "", A10G_FLAVOR)]["spec"]["nodeLabels"]


def test_stale_note_is_pruned_and_foreign_labels_kept(policy):
    cluster = MemCluster(common_objects())
    converge(policy, cluster)
    flavor = cluster.objects[("ResourceFlavor", "", A10G_FLAVOR)]
    flavor["metadata"]["annotations"]["note.gpustack.ai/old"] = "x"
    flavor["metadata"]["labels"]["team"] = "ml"
    actions = converge(policy, cluster)[0]
    assert [(a.verb, a.name) for a in actions] == [("apply", A10G_FLAVOR), ("patch", A10G_FLAVOR)]
    live = cluster.objects[("ResourceFlavor", "", A10G_FLAVOR)]
    assert "note.gpustack.ai/old" not in live["metadata"]["annotations"]
    assert live["metadata"]["labels"]["team"] == "ml"


def test_foreign_objects_are_never_deleted(policy):
    foreign = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "team-a"}, "spec": {}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "spot"}, "spec": {}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": "q", "namespace": "default"}, "spec": {"clusterQueue": "team-a"}},
    ]
    cluster = MemCluster(common_objects() + foreign)
    history = converge(policy, cluster)
    assert not [a for actions in history for a in actions if a.name in ("team-a", "spot", "q")]
    assert history[-1] == []


def test_deleting_type_loses_its_queue_then_its_finalizer(policy):
    cluster = MemCluster(common_objects())
    converge(policy, cluster)
    it = cluster.objects[("InstanceType", "", "gpustack--nvidia-a10g-linux-amd64")]
    assert it["metadata"]["finalizers"] == ["gpustack.ai/controlled"]
    it["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    history = converge(policy, cluster)
    flat = [(a.verb, a.kind, a.name) for actions in history for a in actions]
    assert ("delete", "ClusterQueue", "gpustack--nvidia-a10g-linux-amd64") in flat
    assert ("remove-finalizer", "InstanceType", "gpustack--nvidia-a10g-linux-amd64") in flat
    assert flat.index(("remove-finalizer", "InstanceType", "gpustack--nvidia-a10g-linux-amd64")) > \
        flat.index(("delete", "ClusterQueue", "gpustack--nvidia-a10g-linux-amd64"))
    assert it["status"]["phase"] == "Inactive"


@pytest.mark.parametrize("aware", ["true"])
def test_awareness_flip_adds_aware_pools_and_keeps_collapsed_types(policy, aware):
    import base64
    cluster = MemCluster(common_objects())
    converge(policy, cluster)
    secret = cluster.objects[("Secret", "gpustack-system", "gpustack-settings")]
    secret["data"]["instance-type-aware-cpu-manufacturer"] = base64.b64encode(aware.encode()).decode()
    history = converge(policy, cluster)
    assert history[-1] == []
    types = sorted(k[2] for k in cluster.objects if k[0] == "InstanceType")
    assert len(types) == 8 and "gpustack--nvidia-a10g-linux-amd64" in types
    catalog = sorted(k[2] for k in cluster.objects if k[0] == "InstanceTypeFlavor")
    assert len(catalog) == 5 and "gpustack--nvidia-a10g" not in catalog


def test_settings_secret_in_another_namespace(policy):
    import base64
    objects = [o for o in common_objects() if o["kind"] != "Secret"]
    objects.append({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "gpustack-settings", "namespace": "ops"},
                    "data": {"instance-type-aware-cpu-manufacturer": base64.b64encode(b"true").decode()}})
    snapshot = Snapshot.from_objects(objects)
    assert len(derive(policy, snapshot, live=True).created_instance_types) == 3
    aware = derive(policy, snapshot, live=True, settings_namespace="ops")
    assert len(aware.created_instance_types) == 5
