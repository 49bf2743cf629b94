"""Kueue's resource charging (docs/concepts/pools-and-flavors.md "Kueue's resource charging") and what it implies for Instance Pods and the CPU view
(docs/concepts/instances.md "The Instance's Pod", docs/concepts/pools-and-flavors.md "InstanceType status"): the Configuration fragment, Kueue's request arithmetic, the
charges of a whole, a shared and a sliced request, the CPU-only Pod's flavor affinity, the CPU view."""
from __future__ import annotations

import copy
import shutil
from decimal import Decimal

import pytest

from runtime.engine.admission import AdmissionEngine, admission_view, parse_review, review_for
from runtime.engine.pools.derive import derive
from runtime.engine.instances.instancepods import pool_flavors, render_pod
from runtime.engine.pools.kueueconfig import KueueConfigurationError, kueue_configuration
from runtime.engine.policy import Policy
from runtime.engine.snapshot import Snapshot
from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules
from runtime.snapshots import load_snapshot
from tests.builders import container, pod
from tests.kueuecharging import pod_requests, workload_requests
from tests.seedfiles import FIXTURES

T4 = "gpustack--nvidia-tesla-t4-linux-amd64"
A10G = "gpustack--nvidia-a10g-linux-amd64"
CPU = "gpustack--generic-linux-amd64"
A10G_ENTRANCE = "gpustack-fnv64-c4680bb149644f1c"   # seed step 1 (docs/concepts/pools-and-flavors.md "InstanceType status")


def _t(base: str, credits_id: str, partition: bool) -> list[dict]:
    """The expected rows of one manufacturer, spelled out (docs/concepts/pools-and-flavors.md "Kueue's resource charging" table)."""
    out = "credits.gpustack.ai/" + credits_id
    rows = [{"input": base, "strategy": "Replace", "outputs": {out: "1600k"}},
            {"input": base + ".shared", "strategy": "Replace", "outputs": {out: "160k"}},
            {"input": base + ".sliced.units", "strategy": "Replace", "multiplyBy": base + ".sliced",
             "outputs": {out: "1"}},
            {"input": base + ".sliced", "strategy": "Replace"}]
    if partition:
        rows += [{"input": base + ".partitioned.units", "strategy": "Replace", "outputs": {out: "1"}},
                 {"input": base + ".partitioned", "strategy": "Replace"}]
    return rows


EXPECTED = {
    "apiVersion": "config.kueue.x-k8s.io/v1beta2",
    "kind": "Configuration",
    "resources": {
        "excludeResourcePrefixes": [
            "cpu", "memory", "ephemeral-storage", "device.gpustack.ai/",
            "amd.com/gpu.sliced.memory-", "amd.com/gpu.sliced.cores-",
            "huawei.com/npu.sliced.memory-", "huawei.com/npu.sliced.cores-",
            "cambricon.com/mlu.sliced.memory-", "cambricon.com/mlu.sliced.cores-",
            "hygon.com/dcu.sliced.memory-", "hygon.com/dcu.sliced.cores-", "hygon.com/dcu.partitioned.mig-",
            "iluvatar.com/gpu.sliced.memory-", "iluvatar.com/gpu.sliced.cores-",
            "metax-tech.com/gpu.sliced.memory-", "metax-tech.com/gpu.sliced.cores-",
            "mthreads.com/gpu.sliced.memory-", "mthreads.com/gpu.sliced.cores-",
            "nvidia.com/gpu.sliced.memory-", "nvidia.com/gpu.sliced.cores-", "nvidia.com/gpu.partitioned.mig-",
            "habana.ai/gaudi.sliced.memory-", "habana.ai/gaudi.sliced.cores-",
            "gpu.intel.com/i915.sliced.memory-", "gpu.intel.com/i915.sliced.cores-",
            "alibabacloud.com/ppu.sliced.memory-", "alibabacloud.com/ppu.sliced.cores-",
            "alibabacloud.com/ppu.partitioned.mig-",
        ],
        "transformations": (
            _t("amd.com/gpu", "amd", False) + _t("huawei.com/npu", "ascend", False)
            + _t("cambricon.com/mlu", "cambricon", False) + _t("hygon.com/dcu", "hygon", True)
            + _t("iluvatar.com/gpu", "iluvatar", False) + _t("metax-tech.com/gpu", "metax", False)
            + _t("mthreads.com/gpu", "mthreads", False) + _t("nvidia.com/gpu", "nvidia", True)
            + _t("habana.ai/gaudi", "habana", False) + _t("gpu.intel.com/i915", "intel", False)
            + _t("alibabacloud.com/ppu", "thead", True)
        ),
    },
}


def test_configuration_for_the_repository_manufacturers(policy):
    got = kueue_configuration(policy)
    assert got == EXPECTED
    assert len(got["resources"]["transformations"]) == 11 * 4 + 3 * 2
    # the nvidia rows exactly as an operator reads them
    nvidia = [t for t in got["resources"]["transformations"] if t["input"].startswith("nvidia.com/")]
    assert nvidia == [
        {"input": "nvidia.com/gpu", "strategy": "Replace", "outputs": {"credits.gpustack.ai/nvidia": "1600k"}},
        {"input": "nvidia.com/gpu.shared", "strategy": "Replace", "outputs": {"credits.gpustack.ai/nvidia": "160k"}},
        {"input": "nvidia.com/gpu.sliced.units", "strategy": "Replace", "multiplyBy": "nvidia.com/gpu.sliced",
         "outputs": {"credits.gpustack.ai/nvidia": "1"}},
        {"input": "nvidia.com/gpu.sliced", "strategy": "Replace"},
        {"input": "nvidia.com/gpu.partitioned.units", "strategy": "Replace", "outputs": {"credits.gpustack.ai/nvidia": "1"}},
        {"input": "nvidia.com/gpu.partitioned", "strategy": "Replace"},
    ]


def test_outputs_are_the_queues_covered_resource(policy):
    """The credits a Pod is charged are exactly what the seed's accelerated queue covers (docs/concepts/pools-and-flavors.md "Queues and the entrance")."""
    state = derive(policy, load_snapshot([FIXTURES / "seed" / "step1"]))
    covered = {r for q in state.cluster_queues for g in q["spec"]["resourceGroups"] for r in g["coveredResources"]}
    assert covered == {"credits.gpustack.ai/nvidia", "cpu"}
    outputs = {o for t in kueue_configuration(policy)["resources"]["transformations"] for o in t.get("outputs", {})}
    assert "credits.gpustack.ai/nvidia" in outputs and "cpu" not in outputs


# --- Kueue's arithmetic (pkg/workload/workload.go) ------------------------------------------------------
def _pod(*resources, init=(), overhead=None) -> dict:
    """A Pod ``p`` without a namespace whose containers ``c0, c1, ...`` hold ``resources``; ``init`` its
    initContainers, ``overhead`` its spec.overhead."""
    spec: dict = {"containers": [container(f"c{i}", resources=r) for i, r in enumerate(resources)]}
    if init:
        spec["initContainers"] = [dict(c) for c in init]
    if overhead:
        spec["overhead"] = overhead
    return pod("p", namespace=None, spec=spec)


def test_pod_requests_follow_the_sidecar_formula():
    pod = _pod({"requests": {"cpu": "1"}}, {"limits": {"cpu": "500m", "memory": "1Gi"}},
               init=[{"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "250m"}}},
                     {"name": "setup", "resources": {"requests": {"cpu": "3", "memory": "512Mi"}}}],
               overhead={"cpu": "100m"})
    got = pod_requests(pod["spec"])
    # app 1 + 0.5 (limit defaults the request) + sidecar 0.25 = 1.75; init 3 + sidecar 0.25 = 3.25 wins; + 0.1
    assert got["cpu"] == Decimal("3.35")
    assert got["memory"] == 2**30


def test_transformations_replace_retain_and_multiply():
    config = {"resources": {"excludeResourcePrefixes": ["memory"], "transformations": [
        {"input": "x.io/a", "strategy": "Replace", "outputs": {"credits/x": "3"}},
        {"input": "x.io/b", "strategy": "Retain", "multiplyBy": "x.io/n", "outputs": {"credits/x": "10"}},
        {"input": "x.io/n", "strategy": "Replace"}]}}
    pod = _pod({"requests": {"x.io/a": "2", "x.io/b": "5", "x.io/n": "4", "memory": "1Gi", "cpu": "1500m"}})
    # a: 2 x 3 = 6; b: 5 x 4 = 20 -> 20 x 10 = 200, retained as 20; n: dropped; memory excluded
    assert workload_requests(config, pod) == {"cpu": 1500, "credits/x": 206, "x.io/b": 20}
    untouched = _pod({"requests": {"y.io/z": "1", "cpu": "250m"}})
    assert workload_requests(config, untouched) == {"cpu": 250, "y.io/z": 1}


# --- the three charges of docs/concepts/pools-and-flavors.md "Kueue's resource charging" -----------------
@pytest.fixture(scope="module")
def seed(policy):
    snapshot = load_snapshot([FIXTURES / "seed" / "step1"])
    state = derive(policy, snapshot)
    return snapshot, state, {it["metadata"]["name"]: it for it in state.instance_types}


def _instance(type_name: str, cpu: str, ram: str, accelerator: str | None = None, **extra) -> dict:
    res = {"cpu": cpu, "ram": ram, "localStorage": "15Gi"}
    if accelerator is not None:
        res["accelerator"] = accelerator
    res.update(extra)
    return {"apiVersion": "worker.gpustack.ai/v1", "kind": "Instance",
            "metadata": {"name": "demo", "namespace": "default", "uid": "u-1"},
            "spec": {"type": type_name, "image": "ubuntu:24.04", "resources": res,
                     "volume": {"ephemeral": {"capacity": "1Gi"}}}}


def _after_pod_webhooks(policy, snapshot, pod) -> dict:
    """The Pod as Kueue's pod integration sees it: after our mutating webhook (the .units fold)."""
    engine = AdmissionEngine(policy)
    outcome = engine.admit(parse_review(review_for(pod)), admission_view(policy, snapshot))
    assert outcome.allowed, outcome
    return outcome.mutated or pod


def test_whole_shared_and_sliced_are_charged_1600000_160000_320000(policy, seed):
    snapshot, state, types = seed
    config = kueue_configuration(policy)
    whole = render_pod(policy, state.settings, snapshot, _instance(A10G, "12", "128Gi", "1"), types[A10G]).pod
    sliced = render_pod(policy, state.settings, snapshot,
                        _instance(A10G, "1", "12Gi", "1", acceleratorSlicedMemoryPercentage=20,
                                  acceleratorSlicedCoresPercentage=100), types[A10G]).pod
    # Instances have no shared form (docs/concepts/instances.md "The Instance's Pod"); a shared request is a plain Pod of the queue
    shared = copy.deepcopy(whole)
    shared["spec"]["containers"][0]["resources"] = {
        "limits": {"cpu": "1", "memory": "4Gi", "nvidia.com/gpu.shared": "1"},
        "requests": {"cpu": "100m", "memory": "512Mi", "nvidia.com/gpu.shared": "1"}}
    charged = {name: workload_requests(config, _after_pod_webhooks(policy, snapshot, pod))
               for name, pod in (("whole", whole), ("shared", shared), ("sliced", sliced))}
    assert charged == {"whole": {"credits.gpustack.ai/nvidia": 1600000},
                       "shared": {"credits.gpustack.ai/nvidia": 160000},
                       "sliced": {"credits.gpustack.ai/nvidia": 320000}}
    # the sliced Pod Kueue reads: the webhook's fold, then one credit per unit times .sliced (1)
    main = _after_pod_webhooks(policy, snapshot, sliced)["spec"]["containers"][0]["resources"]["requests"]
    assert {k: v for k, v in main.items() if k.startswith("nvidia")} == {
        "nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "20",
        "nvidia.com/gpu.sliced.cores-percentage": "100", "nvidia.com/gpu.sliced.units": "320k"}


def test_a_partitioned_pod_is_charged_its_units_and_a_cpu_only_pod_nothing(policy, seed):
    config = kueue_configuration(policy)
    partition = _pod({"requests": {"cpu": "1", "nvidia.com/gpu.partitioned": "1",
                                   "nvidia.com/gpu.partitioned.mig-3g.40gb": "1",
                                   "nvidia.com/gpu.partitioned.units": "800k"}})
    assert workload_requests(config, partition) == {"credits.gpustack.ai/nvidia": 800000}
    snapshot, state, types = seed
    cpu_pod = render_pod(policy, state.settings, snapshot, _instance(CPU, "4", "8Gi"), types[CPU],
                         flavors=state.resource_flavors).pod
    assert workload_requests(config, cpu_pod) == {}
    with_ssh = copy.deepcopy(cpu_pod)
    with_ssh["spec"]["containers"].append({"name": "sshd", "resources": {
        "limits": {"device.gpustack.ai/nvidia.visibility": "1"}, "requests": {"device.gpustack.ai/nvidia.visibility": "1"}}})
    assert workload_requests(config, with_ssh) == {}


# --- CPU-only Instance Pods: flavor affinity ------------------------------------------------------------
def _term(gkey: str, count: str) -> dict:
    return {"matchExpressions": [
        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
        {"key": "gpustack.ai/managed", "operator": "In", "values": ["true"]},
        {"key": f"general.feature.gpustack.ai/{gkey}", "operator": "In", "values": ["true"]},
        {"key": f"general.feature.gpustack.ai/{gkey}.count", "operator": "In", "values": [count]}]}


GENERIC_TERMS = [_term("amd-epyc-7r32", "4"), _term("intel-xeon-platinum-8259cl", "4"),
                 _term("amd-epyc-7r13", "16"), _term("intel-xeon-platinum-8259cl", "48")]


def test_cpu_only_pod_gets_one_term_per_flavor_of_the_generic_pool(policy, seed):
    snapshot, state, types = seed
    derived = Snapshot.from_objects(list(snapshot) + state.cluster_queues + state.resource_flavors)
    pod = render_pod(policy, state.settings, derived, _instance(CPU, "4", "8Gi"), types[CPU]).pod
    assert pod["spec"]["affinity"] == {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": GENERIC_TERMS}}}
    # the controller passes the derived flavors; same terms, and accelerated Pods get none
    queue = next(q for q in state.cluster_queues if q["metadata"]["name"] == CPU)
    passed = render_pod(policy, state.settings, snapshot, _instance(CPU, "4", "8Gi"), types[CPU],
                        pool_flavors(queue, state.resource_flavors)).pod
    assert passed["spec"]["affinity"] == pod["spec"]["affinity"]
    whole = render_pod(policy, state.settings, derived, _instance(A10G, "12", "128Gi", "1"), types[A10G]).pod
    assert "affinity" not in whole["spec"]


def test_cpu_only_pod_crosses_flavor_terms_with_a_bound_claim(policy, seed):
    snapshot, state, types = seed
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": "default"},
           "spec": {"volumeName": "pv-1"}, "status": {"phase": "Bound"}}
    host = {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-t4-b"]}
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-1"},
          "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [host]}]}}}}
    inst = _instance(CPU, "4", "8Gi")
    inst["spec"]["volume"] = {"persistent": {"name": "data"}}
    objects = list(snapshot) + state.cluster_queues + state.resource_flavors + [pvc, pv]
    pod = render_pod(policy, state.settings, Snapshot.from_objects(objects), inst, types[CPU]).pod
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": t["matchExpressions"] + [host]} for t in GENERIC_TERMS]


def test_cpu_only_pod_of_a_pool_without_flavors_is_blocked(policy, seed):
    snapshot, state, types = seed
    plan = render_pod(policy, state.settings, snapshot, _instance(CPU, "4", "8Gi"), types[CPU], flavors=[])
    assert plan.pod is None
    assert plan.blocked == ("instance type gpustack--generic-linux-amd64 has no flavors: no managed node offers "
                            "its pool, so its Pod cannot be placed")


# --- the CPU view counts running Instance Pods ----------------------------------------------------------
def _running(pod: dict, node: str = "node-t4-b", phase: str = "Running", name: str = "cpu-demo") -> dict:
    pod = copy.deepcopy(pod)
    pod["metadata"]["name"] = name
    pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": phase}
    return pod


def _cpu_summary(policy, objects) -> str:
    state = derive(policy, Snapshot.from_objects(objects))
    return next(it for it in state.instance_types if it["metadata"]["name"] == CPU)["status"]["summary"]["cpu"]


def test_cpu_view_after_a_running_4_core_instance_pod(policy, seed):
    snapshot, state, types = seed
    pod = render_pod(policy, state.settings, snapshot, _instance(CPU, "4", "8Gi"), types[CPU], flavors=[
        f for f in state.resource_flavors if f["metadata"]["name"].endswith("-48c")]).pod
    assert pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "3200m"   # overcommit on
    assert _cpu_summary(policy, list(snapshot)) == "48/72"
    assert _cpu_summary(policy, list(snapshot) + [_running(pod)]) == "48/68"
    full = _instance(CPU, "48", "64Gi")
    big = render_pod(policy, state.settings, snapshot, full, types[CPU], flavors=state.resource_flavors).pod
    assert _cpu_summary(policy, list(snapshot) + [_running(pod), _running(big, name="big")]) == "20/20"
    # not bound, terminated, or not an Instance's: not counted
    pending = copy.deepcopy(pod)
    pending["status"] = {"phase": "Pending"}
    foreign = _running(pod, name="foreign")
    foreign["metadata"]["ownerReferences"] = []
    assert _cpu_summary(policy, list(snapshot) + [pending, _running(pod, phase="Succeeded"),
                                                  _running(pod, name="failed", phase="Failed"), foreign]) == "48/72"


def test_cpu_view_reads_fractional_limits_per_the_overcommit_setting(policy, seed):
    snapshot, state, types = seed
    halves = []
    for i in range(2):
        p = render_pod(policy, state.settings, snapshot, _instance(CPU, "2500m", "8Gi"), types[CPU],
                       flavors=state.resource_flavors).pod
        halves.append(_running(p, name=f"half-{i}"))
    # overcommit on: each Pod requested 800m x 3 = 2400m, read back as 3 cores -> 6 reserved
    assert _cpu_summary(policy, list(snapshot) + halves) == "48/66"
    off = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "gpustack-settings", "namespace": "gpustack-system"},
           "stringData": {"instance-general-resources-overcommit": "false"}}
    # overcommit off: requests = limits, reserved = ceil(5000m) = 5
    assert _cpu_summary(policy, list(snapshot) + halves + [off]) == "48/67"


# --- policy, not code ------------------------------------------------------------------------------------
def _rules_copy(tmp_path, old: str, new: str):
    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules)
    path = rules / "pools" / "kueue.yaml"
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new))
    return Policy(load_rules(rules))


def test_without_the_cpu_exclusion_kueue_keeps_charging_cpu(tmp_path, seed):
    policy = _rules_copy(tmp_path, "global: [cpu, memory,", "global: [memory,")
    assert kueue_configuration(policy)["resources"]["excludeResourcePrefixes"][:3] == [
        "memory", "ephemeral-storage", "device.gpustack.ai/"]
    snapshot, state, types = seed
    derived = Snapshot.from_objects(list(snapshot) + state.cluster_queues + state.resource_flavors)
    pod = render_pod(policy, state.settings, derived, _instance(CPU, "4", "8Gi"), types[CPU]).pod
    assert "affinity" not in pod["spec"]
    assert workload_requests(kueue_configuration(policy), pod) == {"cpu": 3200}
    # the view reads the queue's flavorsReservation again, not the Pods: 3200m / 800 = 4
    queue = copy.deepcopy(next(q for q in state.cluster_queues if q["metadata"]["name"] == CPU))
    queue["status"] = {"flavorsReservation": [{"name": "gpustack--intel-xeon-platinum-8259cl-linux-amd64-48c",
                                               "resources": [{"name": "cpu", "total": "3200m"}]}]}
    assert _cpu_summary(policy, list(snapshot) + [_running(pod)]) == "48/72"
    assert _cpu_summary(policy, list(snapshot) + [queue]) == "48/68"


def test_a_row_that_stops_naming_its_family_is_refused(tmp_path):
    policy = _rules_copy(tmp_path, 'input: "{base}.shared", family: shared', 'input: "{base}.shard", family: shared')
    with pytest.raises(KueueConfigurationError, match=r"transformations\[1\]\.input '\{base\}\.shard' gives "
                                                      r"'amd.com/gpu.shard' for manufacturer amd, which classifies as none, not shared"):
        kueue_configuration(policy)


def test_credits_must_be_a_positive_integer(tmp_path):
    policy = _rules_copy(tmp_path, "credits: constants.creditsPerAccelerator}", "credits: \"0 - 1\"}")
    with pytest.raises(KueueConfigurationError, match=r"transformations\[0\]\.credits \(0 - 1\) must give a positive integer, got -1"):
        kueue_configuration(policy)
