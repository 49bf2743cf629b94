"""Pools that cannot schedule, live (docs/audit.md "Pools that cannot schedule", docs/concepts/pools-and-flavors.md "Quota follows the usable accelerators"), on a real kube-apiserver + etcd.

The seed cluster reconciled once; then every T4 label stripped from the two T4 Nodes with kubectl
while their NodeFeatures keep them (what an NFD restart or an administrator's ``kubectl label node
... key-`` does). Within the one reconcile that follows: Warning Events ``FlavorSelectsTooFewNodes``
on the T4 InstanceType, the metrics say 0 of 1 nodes selected, and ``accelpolicy audit --kubeconfig``
names the pool. Labels back: Normal Events, metrics back. Then one T4 of node-t4-b goes unhealthy in
its Devices: the ClusterQueue's quota for its flavor drops to 3 accelerators in the same reconcile,
with an ``AcceleratorsUnusable`` Event.
"""
from __future__ import annotations

import json

import yaml
from click.testing import CliRunner
from prometheus_client import CollectorRegistry, generate_latest

from runtime.cli import main
from runtime.controller.metrics import ControllerMetrics
from testing.localcluster.testing import wait_for
from tests.controlplane.test_controller import COMMON, ctl  # noqa: F401 - the seeded controller fixture

POOL = "gpustack--nvidia-tesla-t4-linux-amd64"
T4 = "acceleratable.feature.gpustack.ai/nvidia-tesla-t4"
F1 = "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-1d"
F4 = "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-4d"
NODES = ("node-t4-a", "node-t4-b")
REASONS = ("FlavorSelectsTooFewNodes", "FlavorSelectsItsNodes", "AcceleratorsUnusable", "AcceleratorsUsable")


def _events(kubectl, reason: str) -> list[str]:
    items = json.loads(kubectl.stdout("get", "events", "-n", "default", "-o", "json",
                                      "--field-selector", f"reason={reason},involvedObject.name={POOL}"))["items"]
    return sorted(e["message"] for e in items)


def _node_labels(ctl, name: str) -> dict[str, str]:
    return (ctl.cache.get("Node", name) or {}).get("metadata", {}).get("labels") or {}


def _samples(metrics: ControllerMetrics) -> set[str]:
    return {line for line in generate_latest(metrics.registry).decode().splitlines()
            if line.startswith(("accelpolicy_resourceflavor_", "accelpolicy_instancetype_reach"))}


def _quota(kubectl) -> dict[str, str]:
    queue = json.loads(kubectl.stdout("get", "clusterqueues.kueue.x-k8s.io", POOL, "-o", "json"))
    return {f["name"]: f["resources"][0]["nominalQuota"] for g in queue["spec"]["resourceGroups"] for f in g["flavors"]}


def test_stripped_labels_and_unusable_accelerators_are_said_within_one_reconcile(ctl, kubectl, control_plane):
    cluster, _ = control_plane
    # Events of these reasons that an earlier module's controller made (test_labels_vanish_live strips
    # labels too) are not this test's
    for reason in REASONS:
        kubectl("delete", "events", "-n", "default", "--field-selector", f"reason={reason}")
    metrics = ControllerMetrics(CollectorRegistry()).bind(ctl)
    assert ctl.reconcile().errors == []
    assert ctl.reconcile().errors == []
    assert _events(kubectl, "FlavorSelectsTooFewNodes") == []
    assert f'accelpolicy_resourceflavor_selected_nodes{{resourceflavor="{F4}"}} 1.0' in _samples(metrics)
    assert _quota(kubectl) == {F1: "1600k", F4: "6400k"}

    nodes = {d["metadata"]["name"]: d for d in yaml.safe_load_all((COMMON / "nodes.yaml").read_text()) if d}
    for name in NODES:
        kubectl("label", "node", name, *[f"{k}-" for k in nodes[name]["metadata"]["labels"] if k.startswith(T4)])
    wait_for(lambda: [k for n in NODES for k in _node_labels(ctl, n) if k.startswith(T4)],
             lambda left: not left, what="T4 labels gone from the cache")
    assert ctl.reconcile().errors == []  # the one reconcile that sees it
    lacks = {"node-t4-a": f"node-t4-a lacks {T4}=true, {T4}.count=1", "node-t4-b": f"node-t4-b lacks {T4}=true, {T4}.count=4"}
    assert _events(kubectl, "FlavorSelectsTooFewNodes") == [
        f"ResourceFlavor {flavor} selects 0 of its 1 nodes ({lacks[node]}): no Pod of pool {POOL} can land on it "
        "while its NodeFeatures still carry the labels (is nfd-master applying them?)"
        for flavor, node in ((F1, "node-t4-a"), (F4, "node-t4-b"))]
    samples = _samples(metrics)
    assert f'accelpolicy_resourceflavor_selected_nodes{{resourceflavor="{F4}"}} 0.0' in samples
    assert f'accelpolicy_resourceflavor_nodes{{resourceflavor="{F4}"}} 1.0' in samples
    assert f'accelpolicy_instancetype_reach_findings{{instancetype="{POOL}",rule="flavor-selects-nodes"}} 2.0' in samples
    live = CliRunner().invoke(main, ["audit", "--kubeconfig", str(cluster.kubeconfig), "-o", "json"])
    assert live.exit_code == 1, live.output
    found = [(r["result"], r["rule"], r["resource"]["kind"], r["resource"]["name"], r["properties"]["resourceFlavor"])
             for r in json.loads(live.output) if r["policy"] == "pool-reach"]
    assert found == [("fail", "flavor-selects-nodes", "InstanceType", POOL, F1),
                     ("fail", "flavor-selects-nodes", "InstanceType", POOL, F4)]

    kubectl("apply", "-f", str(COMMON / "nodes.yaml"))  # the labels come back
    wait_for(lambda: [n for n in NODES if f"{T4}.count" not in _node_labels(ctl, n)],
             lambda missing: not missing, what="T4 labels back in the cache")
    assert ctl.reconcile().errors == []
    assert _events(kubectl, "FlavorSelectsItsNodes") == [
        f"ResourceFlavor {flavor} of pool {POOL} selects all its nodes again" for flavor in (F1, F4)]
    assert not any("reach_findings{" in s for s in _samples(metrics))

    # item 2: a driver failure; the labels stay, the Devices says one T4 is unhealthy
    patch = [{"op": "replace", "path": "/spec/groups/0/accelerators/2/status/unhealthy", "value": True}]
    kubectl("patch", "devices.worker.gpustack.ai", "node-t4-b", "--type=json", "-p", json.dumps(patch))
    wait_for(lambda: ctl.cache.get("Devices", "node-t4-b")["spec"]["groups"][0]["accelerators"][2]["status"],
             lambda status: status.get("unhealthy") is True, what="the unhealthy T4 in the cache")
    assert ctl.reconcile().errors == []
    assert _quota(kubectl) == {F1: "1600k", F4: "4800k"}
    assert _events(kubectl, "AcceleratorsUnusable") == [
        "node node-t4-b is labelled with 4 nvidia-tesla-t4 accelerators, its Devices can use 3 (1 unhealthy): the "
        f"quota of pool {POOL} counts 3 for it in ResourceFlavor {F4}"]
    assert f'accelpolicy_resourceflavor_accelerators{{resourceflavor="{F4}",source="devices"}} 3.0' in _samples(metrics)
    patch[0]["value"] = False
    kubectl("patch", "devices.worker.gpustack.ai", "node-t4-b", "--type=json", "-p", json.dumps(patch))
    wait_for(lambda: ctl.cache.get("Devices", "node-t4-b")["spec"]["groups"][0]["accelerators"][2]["status"],
             lambda status: status.get("unhealthy") is False, what="the T4 healthy again in the cache")
    assert ctl.reconcile().errors == []
    assert _quota(kubectl) == {F1: "1600k", F4: "6400k"}
    assert len(_events(kubectl, "AcceleratorsUsable")) == 1
