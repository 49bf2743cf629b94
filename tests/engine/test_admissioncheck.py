"""The ``gpustack-node-devices`` verdicts (docs/concepts/pools-and-flavors.md "The AdmissionCheck `gpustack-node-devices`") on the seed and MIG ledgers.

Snapshots: the seed cluster (tests/fixtures/seed/step1: node-a10g one free A10G, node-t4-a one T4,
node-t4-b four T4s) and the MIG node (tests/fixtures/mig, docs/concepts/four-views.md "The partitioned side"), plus the ResourceFlavors the
controller derives from them (Kueue's assigned flavors exist in a real cluster). Ledgers are edited
per test where a case needs a held accelerator. Messages are the rule file's
(rules/pools/queues.yaml ``admissionCheck``), written out here in full.
"""
from __future__ import annotations

import copy
from datetime import datetime, timezone
from pathlib import Path

import pytest

from runtime.engine import admissioncheck as ac
from runtime.engine.pools.derive import derive
from runtime.engine.policy import Policy
from runtime.engine.snapshot import Snapshot
from runtime.snapshots import load_snapshot

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SEED = FIXTURES / "seed" / "step1"
MIG = FIXTURES / "mig"
A10G_FLAVOR = "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d"
T4_1D = "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-1d"
T4_4D = "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-4d"
H100_FLAVOR = "gpustack--intel-xeon-platinum-8468--nvidia-h100-80gb-hbm3-linux-amd64-8d"
A10G_GPU = "GPU-e0587d2e-127c-4fb8-e2c1-6e517529f575"
T4B = [f"GPU-3f6e8b21-90c4-4d7a-b5e2-1a9c8d7e6f0{i}" for i in range(4)]
H100 = [f"GPU-9b1f3c5e-4d2a-4e8b-a1c7-5d3e2f1a0b0{i}" for i in range(8)]
NOW = datetime(2026, 11, 29, 21, 0, 0, tzinfo=timezone.utc)


def snapshot(policy: Policy, paths: list[Path], edit=None) -> Snapshot:
    """The fixture objects (``edit(objects)`` may change them) plus their derived ResourceFlavors."""
    objects = [copy.deepcopy(o) for o in load_snapshot(paths)]
    if edit is not None:
        edit(objects)
    flavors = derive(policy, Snapshot.from_objects(objects)).resource_flavors
    return Snapshot.from_objects(objects + flavors)


def ledger_row(objects: list[dict], node: str, index: int) -> dict:
    """The Devices ``status`` row of accelerator ``index`` on ``node`` (to edit in place)."""
    (devices,) = [o for o in objects if o["kind"] == "Devices" and o["metadata"]["name"] == node]
    (row,) = [a for g in devices["status"]["groups"] for a in g["accelerators"] if a["index"] == index]
    return row


def workload(flavor: str, requests: dict, node_selector: dict | None = None, affinity: dict | None = None,
             check_state: str = "Pending") -> dict:
    """A Workload as Kueue leaves it after reserving quota: one PodSet ``main``, the check Pending."""
    spec = {"containers": [{"name": "main", "image": "busybox", "resources": {"requests": requests, "limits": requests}}]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    if affinity:
        spec["affinity"] = affinity
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": "pod-demo-1a2b3", "namespace": "default", "uid": "0d8c6f0e-1111-2222-3333-444455556666"},
            "spec": {"queueName": "gpustack-fnv64-c4680bb149644f1c",
                     "podSets": [{"name": "main", "count": 1, "template": {"spec": spec}}]},
            "status": {"admission": {"clusterQueue": "q", "podSetAssignments": [
                {"name": "main", "flavors": {"credits.gpustack.ai/nvidia": flavor}, "count": 1}]},
                "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                                "message": "Quota reserved in ClusterQueue q",
                                "lastTransitionTime": "2026-11-29T20:59:59Z"}],
                "admissionChecks": [{"name": "gpustack-node-devices", "state": check_state, "message": "",
                                     "lastTransitionTime": "2026-11-29T20:59:59Z"}]}}


@pytest.fixture(scope="module")
def seed(policy) -> Snapshot:
    return snapshot(policy, [SEED])


def ready(node: str) -> str:
    return f"node {node} can hold the request"


def retry(flavor: str) -> str:
    return f"no node of flavor {flavor} can hold the request now"


# --- exclusive -----------------------------------------------------------------------------------------
def test_one_whole_a10g_is_ready(policy, seed):
    verdict = ac.check_workload(policy, seed, workload(A10G_FLAVOR, {"nvidia.com/gpu": "1"}))
    assert verdict == ac.Verdict("Ready", "node node-a10g can hold the request",
                                 placements=(ac.Placement("main", "node-a10g", (A10G_GPU,)),))


def test_two_whole_on_the_a10g_flavor_retry(policy, seed):
    verdict = ac.check_workload(policy, seed, workload(A10G_FLAVOR, {"nvidia.com/gpu": "2"}))
    assert verdict == ac.Verdict(
        "Retry", "no node of flavor gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d can hold the request now",
        flavor=A10G_FLAVOR, pod_set="main", requeue_after_seconds=30)


def test_four_whole_t4_only_on_the_4d_flavor(policy, seed):
    assert ac.check_workload(policy, seed, workload(T4_4D, {"nvidia.com/gpu": "4"})).placements == (
        ac.Placement("main", "node-t4-b", tuple(T4B)),)
    # the 1d flavor's nodeLabels select node-t4-a alone (count 1)
    assert ac.check_workload(policy, seed, workload(T4_1D, {"nvidia.com/gpu": "4"})).message == retry(T4_1D)


def test_whole_held_a10g_retries(policy):
    def hold(objects):
        row = ledger_row(objects, "node-a10g", 0)
        row.update({"mode": 1, "allocated": 1600000})
        row.pop("remaining")
    snap = snapshot(policy, [SEED], hold)
    for requests in ({"nvidia.com/gpu": "1"}, {"nvidia.com/gpu.shared": "1"},
                     {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": "320k"}):
        verdict = ac.check_workload(policy, snap, workload(A10G_FLAVOR, requests))
        assert (verdict.state, verdict.message) == ("Retry", retry(A10G_FLAVOR)), requests


# --- shared ------------------------------------------------------------------------------------------------
def test_shared_needs_distinct_accelerators_with_a_free_share(policy):
    def held(objects):
        ledger_row(objects, "node-t4-b", 0).update({"mode": 1, "allocated": 1600000, "remaining": 0})
        ledger_row(objects, "node-t4-b", 1).update({"mode": 3, "allocated": 320000, "remaining": 1280000,
                                                    "allocatedSlices": 1})
        ledger_row(objects, "node-t4-b", 3).update({"mode": 2, "allocated": 1440000, "remaining": 160000})
    snap = snapshot(policy, [SEED], held)
    # index 2 free, index 3 Shared with exactly one share left: 2 distinct accelerators, not 3
    verdict = ac.check_workload(policy, snap, workload(T4_4D, {"nvidia.com/gpu.shared": "2"}))
    assert verdict == ac.Verdict("Ready", ready("node-t4-b"), placements=(ac.Placement("main", "node-t4-b", (T4B[2], T4B[3])),))
    verdict = ac.check_workload(policy, snap, workload(T4_4D, {"nvidia.com/gpu.shared": "3"}))
    assert (verdict.state, verdict.message) == ("Retry", retry(T4_4D))


def test_shared_on_the_idle_seed(policy, seed):
    assert ac.check_workload(policy, seed, workload(T4_4D, {"nvidia.com/gpu.shared": "4"})).message == ready("node-t4-b")
    assert ac.check_workload(policy, seed, workload(T4_4D, {"nvidia.com/gpu.shared": "5"})).message == retry(T4_4D)
    assert ac.check_workload(policy, seed, workload(A10G_FLAVOR, {"nvidia.com/gpu.shared": "1"})).message == ready("node-a10g")


# --- sliced -----------------------------------------------------------------------------------------------
SLICE_20 = {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "20",
            "nvidia.com/gpu.sliced.cores-percentage": "100", "nvidia.com/gpu.sliced.units": "320k"}


def test_sliced_prefers_the_fullest_accelerator_on_a_node(policy):
    def sliced(objects):
        ledger_row(objects, "node-t4-b", 1).update({"mode": 3, "allocated": 1440000, "remaining": 160000,
                                                    "allocatedSlices": 3})   # too little left for 320k
        ledger_row(objects, "node-t4-b", 2).update({"mode": 3, "allocated": 1120000, "remaining": 480000,
                                                    "allocatedSlices": 2})   # the fullest that fits
    snap = snapshot(policy, [SEED], sliced)
    verdict = ac.check_workload(policy, snap, workload(T4_4D, SLICE_20))
    assert verdict == ac.Verdict("Ready", ready("node-t4-b"), placements=(ac.Placement("main", "node-t4-b", (T4B[2],)),))
    # 40 % (640k) no longer fits index 2: the next fullest is a free one, index 0
    big = {**SLICE_20, "nvidia.com/gpu.sliced.memory-percentage": "40", "nvidia.com/gpu.sliced.units": "640k"}
    assert ac.check_workload(policy, snap, workload(T4_4D, big)).placements == (ac.Placement("main", "node-t4-b", (T4B[0],)),)


def _second_a10g_node(objects: list[dict]) -> None:
    """Clone node-a10g as node-a10g-2 (same model and CPU: the same flavor), its A10G 60 % sliced."""
    clones = []
    for obj in objects:
        name = obj["metadata"]["name"]
        if obj["kind"] == "Node" and name == "node-a10g":
            clone = copy.deepcopy(obj)
            clone["metadata"]["name"] = "node-a10g-2"
            clone["metadata"]["labels"]["kubernetes.io/hostname"] = "node-a10g-2"
            clones.append(clone)
        elif obj["kind"] == "NodeFeature" and name.startswith("node-a10g-"):
            clone = copy.deepcopy(obj)
            clone["metadata"]["name"] = name.replace("node-a10g", "node-a10g-2", 1)
            clone["metadata"]["labels"]["nfd.node.kubernetes.io/node-name"] = "node-a10g-2"
            clones.append(clone)
        elif obj["kind"] == "Devices" and name == "node-a10g":
            clone = copy.deepcopy(obj)
            clone["metadata"]["name"] = "node-a10g-2"
            for side in ("spec", "status"):
                clone[side]["groups"][0]["accelerators"][0]["id"] = "GPU-a10g-second"
            clone["status"]["groups"][0]["accelerators"][0].update(
                {"mode": 3, "allocated": 960000, "remaining": 640000, "allocatedSlices": 1})
            clones.append(clone)
    objects.extend(clones)


def test_sliced_prefers_the_fullest_node_of_the_flavor(policy):
    snap = snapshot(policy, [SEED], _second_a10g_node)
    assert "node-a10g-2" in {n for n in ac.managed_nodes(policy, snap).labels}
    verdict = ac.check_workload(policy, snap, workload(A10G_FLAVOR, SLICE_20))
    assert verdict == ac.Verdict("Ready", "node node-a10g-2 can hold the request",
                                 placements=(ac.Placement("main", "node-a10g-2", ("GPU-a10g-second",)),))
    # a whole accelerator only fits the free node-a10g
    assert ac.check_workload(policy, snap, workload(A10G_FLAVOR, {"nvidia.com/gpu": "1"})).message == ready("node-a10g")


def test_sliced_needs_a_free_slice(policy):
    def full(objects):
        ledger_row(objects, "node-a10g", 0).update({"mode": 3, "allocated": 320000, "remaining": 1280000,
                                                    "allocatedSlices": 128})
    snap = snapshot(policy, [SEED], full)
    assert ac.check_workload(policy, snap, workload(A10G_FLAVOR, SLICE_20)).message == retry(A10G_FLAVOR)


# --- partition (docs/concepts/four-views.md "The partitioned side") -------------------------------------
def mig_workload(profile: str) -> dict:
    return workload(H100_FLAVOR, {"nvidia.com/gpu.partitioned": "1", f"nvidia.com/gpu.partitioned.mig-{profile}": "1",
                                  "nvidia.com/gpu.partitioned.units": "800k"})


def test_mig_partition_reads_remaining_profiles(policy):
    snap = snapshot(policy, [MIG / "common", MIG / "config3-mixed-used"])
    # GPU 0 holds a 3g.40gb: one more 3g.40gb fits there, a 7g.80gb only on GPU 1
    assert ac.check_workload(policy, snap, mig_workload("3g.40gb")) == ac.Verdict(
        "Ready", "node node-h100 can hold the request", placements=(ac.Placement("main", "node-h100", (H100[0],)),))
    assert ac.check_workload(policy, snap, mig_workload("7g.80gb")).placements == (ac.Placement("main", "node-h100", (H100[1],)),)
    # logical side of the same node: GPU 5 (50 % slice held) is the fullest for 20 %; 60 % needs a free one
    assert ac.check_workload(policy, snap, workload(H100_FLAVOR, SLICE_20)).placements == (
        ac.Placement("main", "node-h100", (H100[5],)),)
    sixty = {**SLICE_20, "nvidia.com/gpu.sliced.units": "960k"}
    assert ac.check_workload(policy, snap, workload(H100_FLAVOR, sixty)).placements == (ac.Placement("main", "node-h100", (H100[3],)),)
    # whole accelerators: GPUs 3, 4, 6, 7 are free (0-2 partitioned, 5 sliced)
    assert ac.check_workload(policy, snap, workload(H100_FLAVOR, {"nvidia.com/gpu": "4"})).placements == (
        ac.Placement("main", "node-h100", (H100[3], H100[4], H100[6], H100[7])),)
    assert ac.check_workload(policy, snap, workload(H100_FLAVOR, {"nvidia.com/gpu": "5"})).message == retry(H100_FLAVOR)


def test_mig_partition_retries_when_no_profile_is_left(policy):
    def carved(objects):
        for index in (1, 2):
            row = ledger_row(objects, "node-h100", index)
            row.update({"mode": 4, "allocated": 1600000, "remaining": 0,
                        "allocatedProfiles": [{"name": "7g.80gb", "count": 1}]})
            row["remainingProfiles"] = [{"name": p["name"], "count": 0} for p in row["remainingProfiles"]]
    snap = snapshot(policy, [MIG / "common", MIG / "config3-mixed-used"], carved)
    assert ac.check_workload(policy, snap, mig_workload("7g.80gb")).message == retry(H100_FLAVOR)
    assert ac.check_workload(policy, snap, mig_workload("1g.10gb")).placements == (ac.Placement("main", "node-h100", (H100[0],)),)


# --- the PodSet's own node selection -----------------------------------------------------------------------
def test_node_selector_excluding_the_only_feasible_node_retries(policy, seed):
    wl = workload(A10G_FLAVOR, {"nvidia.com/gpu": "1"}, node_selector={"kubernetes.io/hostname": "node-t4-b"})
    assert ac.check_workload(policy, seed, wl) == ac.Verdict(
        "Retry", "no node of flavor gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d can hold the request now",
        flavor=A10G_FLAVOR, pod_set="main", requeue_after_seconds=30)
    not_in = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["node-a10g"]}]}]}}}
    assert ac.check_workload(policy, seed, workload(A10G_FLAVOR, {"nvidia.com/gpu": "1"}, affinity=not_in)).state == "Retry"
    # the Workload fit pin of docs/reference/controller.md "Workload fit pin" (a Gt term) selects the node when the label says so
    gt = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "acceleratable.feature.gpustack.ai/nvidia-tesla-t4.count", "operator": "Gt",
                               "values": ["1"]}]}]}}}
    assert ac.check_workload(policy, seed, workload(T4_4D, {"nvidia.com/gpu.shared": "2"}, affinity=gt)).message == \
        ready("node-t4-b")


def test_unmanaged_node_is_no_candidate(policy):
    def unmanage(objects):
        for obj in objects:
            if obj["kind"] == "NodeFeature" and obj["metadata"]["name"] == "node-a10g-gpustack-worker":
                obj["spec"]["labels"]["gpustack.ai/managed"] = "false"
    snap = snapshot(policy, [SEED], unmanage)
    snap = Snapshot.from_objects(list(snap) + [f for f in derive(policy, snapshot(policy, [SEED])).resource_flavors
                                               if f["metadata"]["name"] == A10G_FLAVOR])
    assert ac.check_workload(policy, snap, workload(A10G_FLAVOR, {"nvidia.com/gpu": "1"})).message == retry(A10G_FLAVOR)


# --- which Workloads are answered, and the status write ---------------------------------------------------
def test_due_only_with_quota_and_a_pending_or_old_retry(policy):
    wl = workload(A10G_FLAVOR, {"nvidia.com/gpu": "1"})
    assert ac.seconds_until_due(policy, wl, NOW) == 0.0
    no_quota = copy.deepcopy(wl)
    no_quota["status"]["conditions"][0]["status"] = "False"
    assert ac.seconds_until_due(policy, no_quota, NOW) is None
    evicted = copy.deepcopy(wl)
    evicted["status"]["conditions"].append({"type": "Evicted", "status": "True"})
    assert ac.seconds_until_due(policy, evicted, NOW) is None
    answered = workload(A10G_FLAVOR, {"nvidia.com/gpu": "1"}, check_state="Ready")
    assert ac.seconds_until_due(policy, answered, NOW) is None
    young = workload(A10G_FLAVOR, {"nvidia.com/gpu": "1"}, check_state="Retry")
    young["status"]["admissionChecks"][0]["lastTransitionTime"] = "2026-11-29T20:59:50Z"
    assert ac.seconds_until_due(policy, young, NOW) == 20.0
    young["status"]["admissionChecks"][0]["lastTransitionTime"] = "2026-11-29T20:59:30Z"
    assert ac.seconds_until_due(policy, young, NOW) == 0.0


def test_check_state_apply_shape_and_idempotence(policy, seed):
    wl = workload(A10G_FLAVOR, {"nvidia.com/gpu": "1"})
    verdict = ac.check_workload(policy, seed, wl)
    body = ac.check_state_apply(policy, wl, verdict, NOW)
    assert body == {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                    "metadata": {"name": "pod-demo-1a2b3", "namespace": "default",
                                 "uid": "0d8c6f0e-1111-2222-3333-444455556666"},
                    "status": {"admissionChecks": [{"name": "gpustack-node-devices", "state": "Ready",
                                                    "message": "node node-a10g can hold the request",
                                                    "lastTransitionTime": "2026-11-29T21:00:00Z"}]}}
    wl["status"]["admissionChecks"] = body["status"]["admissionChecks"]
    assert ac.check_state_apply(policy, wl, verdict, NOW) is None
    two = workload(A10G_FLAVOR, {"nvidia.com/gpu": "2"})
    body = ac.check_state_apply(policy, two, ac.check_workload(policy, seed, two), NOW)
    assert body["status"]["admissionChecks"] == [{
        "name": "gpustack-node-devices", "state": "Retry",
        "message": "no node of flavor gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d can hold the request now",
        "lastTransitionTime": "2026-11-29T21:00:00Z", "requeueAfterSeconds": 30}]


def test_demand_reads_containers_by_family(policy):
    spec = {"initContainers": [{"name": "fetch", "resources": {"limits": {"nvidia.com/gpu": "3"}}},
                               {"name": "side", "restartPolicy": "Always", "resources": {"limits": {"nvidia.com/gpu": "9"}}}],
            "containers": [{"name": "a", "resources": {"requests": {"nvidia.com/gpu": "1", "cpu": "2"}}},
                           {"name": "b", "resources": {"limits": {"nvidia.com/gpu": "1500m"}}}]}
    # app containers summed (1 + ceil(1.5)), the init container's own 3 wins; the sidecar is not read
    assert ac.pod_demand(policy, spec) == [ac.Demand("exclusive", "nvidia.com/gpu", count=3)]
    assert ac.pod_demand(policy, {"containers": [{"name": "c", "resources": {"limits": SLICE_20}}]}) == [
        ac.Demand("sliced", "nvidia.com/gpu", units=320000)]
    with pytest.raises(ac.AdmissionCheckError, match=r"container 'c' resources\[nvidia.com/gpu\]"):
        ac.pod_demand(policy, {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "lots"}}}]},
                      "Workload default/w podSet 'main'")


def test_messages_are_policy(policy, tmp_path):
    """Another copy of rules/ changes the words and the delay, not Python."""
    import shutil

    from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules
    root = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, root)
    path = root / "pools" / "queues.yaml"
    text = path.read_text()
    text = text.replace("""readyMessage: '"node " + node + " can hold the request"'""", """readyMessage: '"fits on " + node'""")
    text = text.replace("retryAfterSeconds: 30", "retryAfterSeconds: 45")
    path.write_text(text)
    other = Policy(load_rules(root))
    snap = snapshot(other, [SEED])
    assert ac.check_workload(other, snap, workload(A10G_FLAVOR, {"nvidia.com/gpu": "1"})).message == "fits on node-a10g"
    assert ac.check_workload(other, snap, workload(A10G_FLAVOR, {"nvidia.com/gpu": "2"})).requeue_after_seconds == 45
