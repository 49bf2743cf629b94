"""Decision 19 (docs/node-facts-robustness.md "A malformed fact costs only its node (decision 19)" and "Snapshot files"): a malformed node fact costs only the node that carries it.

The seed's T4 pool has node-t4-a (1 T4) and node-t4-b (4 T4s): ``4/5 40/50 100/500 0/0``. Every
case below spoils one fact of node-t4-b; the T4 pool must then read node-t4-a alone, every other pool
exactly as in the seed, and derive/get/admit must answer (no exit 1, no traceback).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from runtime.cli import main
from runtime.engine.devices.factcheck import FactProblem
from runtime.engine.pools.derive import derive
from runtime.engine.policy import Policy
from runtime.rules.loader import load_rules
from runtime.snapshots import load_snapshot
from tests.engine.test_bad_input import _edit_docs as _edit
from tests.engine.test_bad_input import _seed_copy as _copy

SEED = Path(__file__).resolve().parents[1] / "fixtures" / "seed" / "common"
T4_COUNT = "acceleratable.feature.gpustack.ai/nvidia-tesla-t4.count"
CPU_COUNT = "general.feature.gpustack.ai/amd-epyc-7r13.count"
T4_POOL = "gpustack--nvidia-tesla-t4-linux-amd64"
SEED_SUMMARIES = {  # docs/getting-started.md "Getting started: the seed walkthrough" Step 1 (mixing on)
    "gpustack--generic-linux-amd64": "0/0 0/0 0/0 0/0",
    "gpustack--nvidia-a10g-linux-amd64": "1/1 10/10 100/100 0/0",
    T4_POOL: "4/5 40/50 100/500 0/0",
}
T4_A_ONLY = "1/1 10/10 100/100 0/0"


@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy(load_rules())


def _set_node_label(root: Path, key: str, value: str, node: str = "node-t4-b") -> None:
    """``key`` := ``value`` wherever ``node`` (its Node, its NodeFeatures) carries it."""
    def edit(doc):
        for labels in ((doc.get("spec") or {}).get("labels"), doc["metadata"].get("labels")):
            if labels and key in labels and node in doc["metadata"]["name"]:
                labels[key] = value
    _edit(root / "nodefeatures.yaml", edit)
    _edit(root / "nodes.yaml", edit)


def _summaries(state) -> dict[str, str]:
    return {it["metadata"]["name"]: it["status"]["summary"]["accelerator"] for it in state.instance_types}


@pytest.mark.parametrize("value, reason", [
    ("9223372036854775808", "outOfRange"),   # 2^63: CEL's int64 overflowed and every policy crashed
    ("1048577", "outOfRange"),               # one above factChecks.countMax
    ("-1", "outOfRange"),
    ("0", "outOfRange"),
    ("4.0", "notInteger"),
    ("\uff14", "notInteger"),                # a full-width 4: str.isdigit says yes, a count it is not
    ("4Gi", "notInteger"),
])
def test_a_bad_count_label_costs_only_its_node(policy, tmp_path, value, reason):
    root = _copy(tmp_path)
    _set_node_label(root, T4_COUNT, value)
    state = derive(policy, load_snapshot([root]))
    expected_text = {
        "outOfRange": f"Node node-t4-b: label {T4_COUNT}={value!r} is outside 1..1048576; "
                      "the node contributes no device flavor for nvidia-tesla-t4",
        "notInteger": f"Node node-t4-b: label {T4_COUNT}={value!r} is not an integer; "
                      "the node contributes no device flavor for nvidia-tesla-t4",
    }[reason]
    assert state.fact_problems == [FactProblem(node="node-t4-b", key=T4_COUNT, value=value, message=expected_text)]
    assert state.warnings == [expected_text]
    assert _summaries(state) == {**SEED_SUMMARIES, T4_POOL: T4_A_ONLY}
    flavors = [f["metadata"]["name"] for f in state.resource_flavors]
    assert not any(name.endswith("-4d") for name in flavors)
    # node-t4-b's CPU flavor is unaffected (only the T4 key was bad)
    assert "gpustack--intel-xeon-platinum-8259cl-linux-amd64-48c" in flavors


def test_a_bad_cpu_count_costs_only_that_nodes_cpu_flavor(policy, tmp_path):
    root = _copy(tmp_path)
    _set_node_label(root, CPU_COUNT, "-16", node="node-cpu")
    state = derive(policy, load_snapshot([root]))
    assert [p.message for p in state.fact_problems] == [
        f"Node node-cpu: label {CPU_COUNT}='-16' is outside 1..1048576; the node contributes no CPU flavor"]
    cpu = {it["metadata"]["name"]: it["status"]["summary"]["cpu"] for it in state.instance_types}
    assert cpu["gpustack--generic-linux-amd64"] == "48/56"  # 72 less node-cpu's 16
    assert _summaries(state) == SEED_SUMMARIES


def _t4_b_ledger(root: Path, **row) -> None:
    def edit(doc):
        if doc["metadata"]["name"] == "node-t4-b":
            doc["status"] = {"groups": [{"manufacturer": "nvidia", "id": "tesla-t4", "accelerators": [
                {"id": "GPU-3f6e8b21-90c4-4d7a-b5e2-1a9c8d7e6f00", "index": 0, **row}]}]}
    _edit(root / "devices.yaml", edit)


@pytest.mark.parametrize("row, field, shown, high", [
    ({"mode": 2, "remaining": -5, "allocated": 0}, "remaining", "-5", 1600000),
    ({"mode": 2, "remaining": 10 ** 20, "allocated": 0}, "remaining", str(10 ** 20), 1600000),
    ({"mode": 9, "remaining": 0, "allocated": 1600000}, "mode", "9", 4),
    ({"mode": 3, "remaining": 0, "allocated": 0, "allocatedSlices": -1}, "allocatedSlices", "-1", 1048576),
])
def test_an_out_of_range_ledger_takes_its_devices_out_of_every_view(policy, tmp_path, row, field, shown, high):
    """node-t4-b's Devices count in no view: the T4 views read node-t4-a's one free T4. Before, -5
    read as nothing free and 1e20 inflated SH to 624999999999999."""
    root = _copy(tmp_path)
    _t4_b_ledger(root, **row)
    state = derive(policy, load_snapshot([root]))
    path = f"status.groups[0].accelerators[0].{field}"
    low = 0
    assert [(p.node, p.key, p.value) for p in state.fact_problems] == [("node-t4-b", path, shown)]
    assert state.warnings == [f"Devices node-t4-b: {path}={int(shown)!r} is outside {low}..{high}; "
                              "the node's Devices count in no view"]
    (t4,) = [it for it in state.instance_types if it["metadata"]["name"] == T4_POOL]
    assert t4["status"]["summary"]["accelerator"] == T4_A_ONLY
    assert {k: v for k, v in _summaries(state).items() if k != T4_POOL} == \
        {k: v for k, v in SEED_SUMMARIES.items() if k != T4_POOL}
    # the Devices object itself is still listed as the cluster holds it
    assert [d["metadata"]["name"] for d in state.devices].count("node-t4-b") == 1


def test_get_and_admit_answer_with_a_2_pow_63_count(tmp_path):
    """Before: `get`/`admit` exited 1 with ``ValueError: overflow`` from CEL."""
    root = _copy(tmp_path)
    _set_node_label(root, T4_COUNT, str(2 ** 63))
    result = CliRunner().invoke(main, ["get", "instancetypes", "--snapshot", str(root)])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    assert f"{T4_POOL}   gpustack-fnv64-6b371caa2da0b799   8/32Gi/100Gi            {T4_A_ONLY}" in result.output
    setting = tmp_path / "setting.yaml"
    setting.write_text("apiVersion: gpustack.ai/v1\nkind: Setting\nmetadata: {name: workload-fit-affinity, "
                       "namespace: gpustack-system}\nspec: {value: 'true'}\n")
    result = CliRunner().invoke(main, ["admit", "-f", str(setting), "--snapshot", str(root)])
    assert "Traceback" not in result.output
    review = json.loads(result.stdout)
    assert review["response"].get("status", {}).get("reason") != "InternalError"


# -- decision 20: NodeFeature trust (docs/node-facts-robustness.md "NodeFeature trust (decision 20)") -----
def _nodefeature(name: str, namespace: str, node: str, labels: dict[str, str]) -> str:
    return yaml.safe_dump({"apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeature",
                           "metadata": {"name": name, "namespace": namespace,
                                        "labels": {"nfd.node.kubernetes.io/node-name": node}},
                           "spec": {"labels": labels}})


@pytest.mark.parametrize("name, namespace, warning", [
    ("node-t4-b-gpustack-device-manager", "team-a",
     "NodeFeature team-a/node-t4-b-gpustack-device-manager: ignored: only NodeFeatures in namespace "
     "gpustack-system feed the {prefixes} keys of Node node-t4-b"),
    ("extra-t4", "gpustack-system",
     "NodeFeature gpustack-system/extra-t4: ignored: its name is not node-t4-b-gpustack-worker or "
     "node-t4-b-gpustack-device-manager for Node node-t4-b"),
])
def test_only_our_nodefeatures_feed_our_keys(policy, tmp_path, name, namespace, warning):
    """A NodeFeature in a user namespace (or misnamed in the system one) claiming 8 T4s and 64 cores
    on node-t4-b changed the pools before; now it is ignored with a warning naming it."""
    root = _copy(tmp_path)
    (root / "zz-forged.yaml").write_text(_nodefeature(name, namespace, "node-t4-b", {
        T4_COUNT: "8", "general.feature.gpustack.ai/intel-xeon-platinum-8259cl.count": "64"}))
    state = derive(policy, load_snapshot([root]))
    prefixes = ", ".join(policy.labels.propagatedPrefixes)
    assert state.warnings == [warning.format(prefixes=prefixes)]
    assert _summaries(state) == SEED_SUMMARIES
    baseline = derive(policy, load_snapshot([SEED]))
    assert [f["metadata"]["name"] for f in state.resource_flavors] == \
        [f["metadata"]["name"] for f in baseline.resource_flavors]
    cpu = {it["metadata"]["name"]: it["status"]["summary"]["cpu"] for it in state.instance_types}
    assert cpu == {it["metadata"]["name"]: it["status"]["summary"]["cpu"] for it in baseline.instance_types}


def test_a_foreign_nodefeature_without_our_keys_is_not_reported(policy, tmp_path):
    """NFD's own worker writes a NodeFeature per node in its namespace: none of our business."""
    root = _copy(tmp_path)
    (root / "zz-nfd.yaml").write_text(_nodefeature("node-t4-b", "node-feature-discovery", "node-t4-b",
                                                   {"feature.node.kubernetes.io/cpu-cpuid.AVX512F": "true"}))
    assert derive(policy, load_snapshot([root])).warnings == []


def test_the_system_namespace_follows_the_settings_namespace(policy, tmp_path):
    """With KUBERNETES_POD_NAMESPACE=accel (derive's ``settings_namespace``), gpustack-system's
    NodeFeatures are the foreign ones."""
    root = _copy(tmp_path)
    state = derive(policy, load_snapshot([root]), settings_namespace="accel")
    assert all(w.startswith("NodeFeature gpustack-system/") and "only NodeFeatures in namespace accel" in w
               for w in state.warnings if w.startswith("NodeFeature"))
    assert sum(w.startswith("NodeFeature") for w in state.warnings) == 7


@pytest.mark.parametrize("suffix, value, text", [
    (".memory", "lots", "is not a quantity"),
    (".memory", "0", "is outside 1Mi..16777216Mi"),
    (".memory", "-16Gi", "is outside 1Mi..16777216Mi"),
    (".memory", "1Ei", "is outside 1Mi..16777216Mi"),
    (".cores", "many", "is not an integer"),
    (".cores", "-1", "is outside 0..1048576"),
])
def test_an_unreadable_descriptor_costs_only_its_node(policy, tmp_path, suffix, value, text):
    """A derived InstanceType copies ``.memory``/``.cores`` into its spec, create-only: a bad value
    would stay for good (``memory: lots``). Now node-t4-b contributes no T4 flavor instead."""
    root = _copy(tmp_path)
    key = T4_COUNT.replace(".count", suffix)
    _set_node_label(root, key, value)
    state = derive(policy, load_snapshot([root]))
    assert state.warnings == [f"Node node-t4-b: label {key}={value!r} {text}; "
                              "the node contributes no device flavor for nvidia-tesla-t4"]
    assert _summaries(state) == {**SEED_SUMMARIES, T4_POOL: T4_A_ONLY}
    (t4,) = [it for it in state.instance_types if it["metadata"]["name"] == T4_POOL]
    assert (t4["spec"]["memory"], t4["spec"]["cores"]) == ("16Gi", "2560")


def test_every_webhook_answers_and_readyz_is_true_with_a_2_pow_63_count(policy, tmp_path):
    """Before: with this snapshot every webhook (the Ignore Workload one and Settings too) answered
    InternalError ``overflow`` while ``/readyz`` said 200. Now each judges as on the seed."""
    from starlette.testclient import TestClient

    from runtime.engine.admission import AdmissionEngine, admission_view, review_for
    from runtime.webhook.app import WebhookState, build_app

    root = _copy(tmp_path)
    _set_node_label(root, T4_COUNT, str(2 ** 63))
    queue = {"kueue.x-k8s.io/queue-name": "gpustack-fnv64-c4680bb149644f1c"}
    sliced = {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "20"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default", "labels": queue},
           "spec": {"containers": [{"name": "c", "resources": {"limits": sliced}}]}}
    workload = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "w", "namespace": "default"},
                "spec": {"queueName": queue["kueue.x-k8s.io/queue-name"], "podSets": [
                    {"name": "main", "count": 1, "template": {"spec": {"containers": [
                        {"name": "c", "resources": {"limits": sliced}}]}}}]}}
    setting = {"apiVersion": "gpustack.ai/v1", "kind": "Setting",
               "metadata": {"name": "workload-fit-affinity", "namespace": "gpustack-system"}, "spec": {"value": "true"}}
    instance = {"apiVersion": "worker.gpustack.ai/v1", "kind": "Instance", "metadata": {"name": "i", "namespace": "default"},
                "spec": {"type": T4_POOL, "image": "ubuntu:24.04", "resources": {"accelerator": "1"},
                         "volume": {"ephemeral": {"capacity": "1Gi"}}}}
    state = WebhookState()
    state.set_ready(AdmissionEngine(policy), admission_view(policy, load_snapshot([root])))
    client = TestClient(build_app(state, {s.path: n for n, s in state.engine.policies.items()}))
    try:
        assert client.get("/readyz").status_code == 200
        answers = {path: client.post(path, json=review_for(obj, uid="u")).json()["response"]
                   for path, obj in [("/mutate-pods", pod), ("/validate-pods", pod), ("/mutate-workloads", workload),
                                     ("/validate-settings", setting), ("/mutate-instances", instance),
                                     ("/validate-instances", instance)]}
    finally:
        state.close()
    assert {path: a["allowed"] for path, a in answers.items()} == dict.fromkeys(answers, True)
    assert "patch" in answers["/mutate-pods"] and "patch" in answers["/mutate-instances"]
