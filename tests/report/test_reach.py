"""Pools that cannot keep what they promise, offline (docs/audit.md "Pools that cannot schedule", docs/concepts/pools-and-flavors.md "Quota follows the usable accelerators"): `audit`, `explain`, the
ClusterQueue quota, on the audit's seed cluster (tests/fixtures/seed/common + audit/seed-cluster) with

* every T4 label stripped from the two T4 Nodes while their NodeFeatures keep them (an NFD restart, an
  administrator's `kubectl label node ... key-`): the derivation still sees the T4 pool (NodeFeatures
  win), but no Pod of it can land;
* one T4 node's labels stripped and a third T4 node beside it (its flavor selects 1 of 2);
* one of node-t4-b's four T4 accelerators reported unhealthy by its Devices (a driver failure: the
  labels stay, the last good facts), and node-a10g's Devices gone.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from runtime.cli import main
from runtime.engine.policy import Policy
from runtime.engine.pools import derive
from runtime.engine.snapshot import Snapshot
from runtime.rules.loader import load_rules
from runtime.snapshots import load_snapshot

BASE = [Path("tests/fixtures/seed/common"), Path("tests/fixtures/audit/seed-cluster")]
T4 = "acceleratable.feature.gpustack.ai/nvidia-tesla-t4"
POOL = "gpustack--nvidia-tesla-t4-linux-amd64"
F1 = "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-1d"
F4 = "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-4d"


@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy(load_rules())


def _objects() -> list[dict]:
    return [copy.deepcopy(o) for o in load_snapshot(BASE)]


def _strip(objects: list[dict], nodes: set[str], prefix: str = T4) -> list[dict]:
    for obj in objects:
        if obj["kind"] == "Node" and obj["metadata"]["name"] in nodes:
            obj["metadata"]["labels"] = {k: v for k, v in obj["metadata"]["labels"].items() if not k.startswith(prefix)}
    return objects


def _write(tmp_path: Path, objects: list[dict]) -> list[str]:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    return ["--snapshot", str(path)]


def _audit(snapshot: list[str]) -> list[dict]:
    result = CliRunner().invoke(main, ["audit", *snapshot, "-o", "json"])
    assert result.exit_code in (0, 1), result.output
    return [r for r in json.loads(result.output) if r["policy"] == "pool-reach"]


def _lacks(node: str) -> str:
    return (f"{node} lacks {T4}=true, {T4}.count={'1' if node == 'node-t4-a' else '4'}")


def test_the_seed_cluster_has_no_reach_finding():
    assert _audit(["--snapshot", str(BASE[0]), "--snapshot", str(BASE[1])]) == []


def test_audit_names_the_pool_whose_labels_were_stripped(tmp_path):
    """Item 1: on main `audit` reported nothing here (the flavors and the pool derive as before)."""
    found = _audit(_write(tmp_path, _strip(_objects(), {"node-t4-a", "node-t4-b"})))
    assert [(r["result"], r["rule"], r["resource"]["kind"], r["resource"]["name"], r["properties"]["resourceFlavor"])
            for r in found] == [("fail", "flavor-selects-nodes", "InstanceType", POOL, F1),
                                ("fail", "flavor-selects-nodes", "InstanceType", POOL, F4)]
    assert found[0]["message"] == (
        f"ResourceFlavor {F1} selects 0 of its 1 nodes ({_lacks('node-t4-a')}): no Pod of pool {POOL} can land on "
        "it while its NodeFeatures still carry the labels (is nfd-master applying them?)")


def test_a_flavor_that_selects_some_of_its_nodes_is_a_warning(tmp_path):
    objects = _strip(_objects(), {"node-t4-b"})
    third = [copy.deepcopy(o) for o in load_snapshot(BASE)
             if o["kind"] in ("Node", "Devices") and o["metadata"]["name"] == "node-t4-b"]  # labels on the Node
    for obj in third:
        obj["metadata"]["name"] = "node-t4-c"
        obj["metadata"].pop("uid", None)
    third[0]["metadata"]["labels"]["kubernetes.io/hostname"] = "node-t4-c"
    found = _audit(_write(tmp_path, objects + third))
    assert [(r["result"], r["message"]) for r in found] == [
        ("warn", f"ResourceFlavor {F4} selects 1 of its 2 nodes ({_lacks('node-t4-b')}): Pods of pool {POOL} land "
                 "only on the others")]


def test_explain_says_per_node_whether_the_labels_are_applied(tmp_path):
    snapshot = _write(tmp_path, _strip(_objects(), {"node-t4-a"}))
    result = CliRunner().invoke(main, ["explain", "instancetype", POOL, *snapshot])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    start = lines.index("nodes (as the scheduler sees them):")
    assert lines[start + 1:start + 3] == [
        f"  node-t4-a: labels applied: no, missing: {T4}=true, {T4}.count=1",
        "  node-t4-b: labels applied: yes"]
    # the flavors still list the node: the derivation reads its NodeFeatures
    assert f"  {F1}: nodes node-t4-a" in lines


def _unhealthy(objects: list[dict], node: str, index: int) -> list[dict]:
    for obj in objects:
        if obj["kind"] == "Devices" and obj["metadata"]["name"] == node:
            obj["spec"]["groups"][0]["accelerators"][index].setdefault("status", {})["unhealthy"] = True
    return objects


def _quota(state, queue: str) -> dict[str, str]:
    cq = next(q for q in state.cluster_queues if q["metadata"]["name"] == queue)
    return {f["name"]: f["resources"][0]["nominalQuota"] for g in cq["spec"]["resourceGroups"] for f in g["flavors"]}


def test_the_quota_counts_the_accelerators_the_views_count(policy):
    """Item 2: one T4 of node-t4-b unhealthy (its labels still say 4), node-a10g's Devices gone. On main
    the quotas stayed 6400k and 1600k while the views dropped to 4 and 0 accelerators."""
    objects = [o for o in _unhealthy(_objects(), "node-t4-b", 2)
               if not (o["kind"] == "Devices" and o["metadata"]["name"] == "node-a10g")]
    state = derive(policy, Snapshot.from_objects(objects))
    assert _quota(state, POOL) == {F1: "1600k", F4: "4800k"}
    assert _quota(state, "gpustack--nvidia-a10g-linux-amd64") == {
        "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d": "0"}
    views = {it["metadata"]["name"]: it["status"]["accelerator"]["capacity"] for it in state.instance_types}
    assert views[POOL] == "4" and views["gpustack--nvidia-a10g-linux-amd64"] == "0"
    # the flavors are the nodes' labels: unchanged (the seed's ResourceFlavor objects)
    assert {f["metadata"]["name"]: f["metadata"]["labels"].get(f"{T4}.capacity") for f in state.resource_flavors
            if f["metadata"]["name"] in (F1, F4)} == {F1: "1", F4: "4"}
    # healthy again: the seed's quotas
    healthy = derive(policy, Snapshot.from_objects(_objects()))
    assert _quota(healthy, POOL) == {F1: "1600k", F4: "6400k"}


def test_audit_and_explain_report_labels_that_count_more_than_the_devices(tmp_path):
    objects = [o for o in _unhealthy(_objects(), "node-t4-b", 2)
               if not (o["kind"] == "Devices" and o["metadata"]["name"] == "node-a10g")]
    snapshot = _write(tmp_path, objects)
    found = _audit(snapshot)
    a10g_flavor = "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d"
    # the A10G flavor is in two pools of this cluster: the collapsed one and a stale aware type
    assert sorted((r["result"], r["rule"], r["resource"]["name"], r["properties"].get("node"), r["message"])
                  for r in found) == [
        ("warn", "labels-exceed-devices", "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64", "node-a10g",
         "node node-a10g is labelled with 1 nvidia-a10g accelerators, its Devices can use 0 (no Devices object): the "
         f"quota of pool gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64 counts 0 for it in ResourceFlavor {a10g_flavor}"),
        ("warn", "labels-exceed-devices", "gpustack--nvidia-a10g-linux-amd64", "node-a10g",
         "node node-a10g is labelled with 1 nvidia-a10g accelerators, its Devices can use 0 (no Devices object): the "
         f"quota of pool gpustack--nvidia-a10g-linux-amd64 counts 0 for it in ResourceFlavor {a10g_flavor}"),
        ("warn", "labels-exceed-devices", POOL, "node-t4-b",
         "node node-t4-b is labelled with 4 nvidia-tesla-t4 accelerators, its Devices can use 3 (1 unhealthy): the "
         f"quota of pool {POOL} counts 3 for it in ResourceFlavor {F4}")]
    result = CliRunner().invoke(main, ["explain", "instancetype", POOL, *snapshot])
    assert "  node-t4-b: labels applied: yes; accelerators usable: 3 of 4 nvidia-tesla-t4 (1 unhealthy)" in \
        result.output.splitlines()
