"""Accelerators out of service on a live cluster (docs/concepts/out-of-service.md): the seed walkthrough
(testing/localcluster/walkthrough.py: kwok Nodes, the agents with the recorded-facts backend, the controller and
admission processes, the device-plugin stand-in) on a control plane of this module's own with kube-scheduler,
kwok, nfd-master and Kueue, so Instances really queue, run and charge the ledger.

The agents read a copy of probes/recorded/ (a test changes node-t4-b's facts there and its agent reads them
again) and every process a copy of rules/ whose clean period is 12 s (rules/health.yaml ``cleanSeconds``), so
a recovery takes seconds. In order:

1. one T4 of node-t4-b fails (XID 79) under a running 3-accelerator Instance: no ResourceFlavor is renamed,
   Kueue's usage of the ``…-4d`` flavor does not change, the T4 row's EX capacity goes 5 -> 4 and the
   ClusterQueue's quota 6400k -> 4800k, one ``AllocationConflict`` Event; the XID gone, the rows come back
   after the clean period;
2. an AcceleratorMaintenance on node-a10g's A10G: the A10G row reads ``0/0 0/0 0/0 0/0``, and at the expiry
   the seed row is back without anyone acting;
3. node-t4-b cordoned: the T4 row offers nothing of it; a 2-accelerator Instance waits Pending with the
   check's Retry naming the cordon; uncordoned, the seed rows.
"""
from __future__ import annotations

import json
import shutil
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from testing.localcluster import LocalCluster, MissingBinariesError
from testing.localcluster.testing import FULL_COMPONENTS, wait_for, with_crds
from testing.localcluster.walkthrough import RECORDED_FACTS, Walkthrough

REPO = Path(__file__).resolve().parents[2]
NS = "default"
T4_POOL, A10G_POOL = "gpustack--nvidia-tesla-t4-linux-amd64", "gpustack--nvidia-a10g-linux-amd64"
T4_4D = "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-4d"
T4_1D = "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-1d"
SEED_T4, SEED_A10G = "4/5 40/50 100/500 0/0", "1/1 10/10 100/100 0/0"
ALLOCATION = "device.gpustack.ai/accelerator.allocated"
TIMEOUT = 300.0   # the machine is shared and slow: never a timing assertion
CLEAN_SECONDS = 12


def _wait(fetch, predicate, what: str, timeout: float = TIMEOUT):
    """The value once ``predicate`` holds (each fetch runs kubectl: polled every half second)."""
    return wait_for(fetch, predicate, timeout, what, interval=0.5)[1]


@pytest.fixture(scope="module")
def walk(tmp_path_factory):
    from runtime.engine.policy import Policy
    from runtime.engine.pools.kueueconfig import kueue_configuration
    from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules

    base = tmp_path_factory.mktemp("out-of-service")
    rules, facts = base / "rules", base / "facts"
    shutil.copytree(DEFAULT_RULES_DIR, rules)
    health = rules / "health.yaml"
    health.write_text(health.read_text().replace("cleanSeconds: 600", f"cleanSeconds: {CLEAN_SECONDS}"))
    shutil.copytree(RECORDED_FACTS, facts)
    policy = Policy(load_rules(rules))
    assert policy.ruleset.get("AcceleratorHealth").cleanSeconds == CLEAN_SECONDS
    try:
        cluster, _ = with_crds(LocalCluster(scheduler=True, controller_manager=True, components=FULL_COMPONENTS,
                                            kueue_configuration=kueue_configuration(policy)).start())
    except MissingBinariesError as e:
        pytest.fail(str(e), pytrace=False)
    w = Walkthrough(cluster.kubeconfig, workdir=base / "walkthrough", rules_dir=rules, policy=policy,
                    facts_dir=facts, agent_interval=2.0)
    try:
        w.start()
        w.facts = facts
        _wait(lambda: (_row(w, T4_POOL), _row(w, A10G_POOL)), lambda r: r == (SEED_T4, SEED_A10G), "the seed rows")
        yield w
    finally:
        w.stop()
        cluster.stop()


def _get(walk, *args) -> dict:
    out = walk.kubectl.stdout("get", *args, "-o", "json", check=False)
    return json.loads(out) if out.strip() else {}


def _row(walk, pool: str) -> str:
    return ((_get(walk, "instancetype", pool).get("status") or {}).get("summary") or {}).get("accelerator", "")


def _capacity(walk, pool: str) -> str:
    return ((_get(walk, "instancetype", pool).get("status") or {}).get("accelerator") or {}).get("capacity", "")


def _quota(walk, pool: str) -> dict[str, str]:
    queue = _get(walk, "clusterqueue", pool)
    return {f["name"]: f["resources"][0]["nominalQuota"] for g in (queue.get("spec") or {}).get("resourceGroups") or []
            for f in g["flavors"]}


def _usage(walk, pool: str) -> dict[str, str]:
    """Kueue's usage per flavor of the ClusterQueue (status.flavorsUsage), credits only."""
    queue = _get(walk, "clusterqueue", pool)
    return {f["name"]: r["total"] for f in (queue.get("status") or {}).get("flavorsUsage") or []
            for r in f.get("resources") or [] if r["name"].startswith("credits.")}


def _flavors(walk) -> list[str]:
    return sorted(walk.kubectl.stdout("get", "resourceflavors", "-o", "name").split())


def _instance(walk, name: str, accelerators: str, node: str | None = None) -> None:
    spec = {"type": T4_POOL, "image": "ubuntu:24.04", "command": ["sleep", "86400"],
            "resources": {"accelerator": accelerators}, "volume": {"ephemeral": {"capacity": "1Gi"}}}
    if node:
        spec["nodeName"] = node
    walk.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "worker.gpustack.ai/v1", "kind": "Instance",
                                                       "metadata": {"name": name, "namespace": NS}, "spec": spec}))


def _delete_instance(walk, name: str) -> None:
    walk.kubectl("delete", "instance", name, "-n", NS, "--ignore-not-found", "--wait=true", timeout=TIMEOUT)
    _wait(lambda: _get(walk, "pod", name, "-n", NS), lambda p: not p, f"Pod {name} gone")


def _events(walk, reason: str) -> list[tuple[str, int]]:
    items = json.loads(walk.kubectl.stdout("get", "events", "-n", "default", "-o", "json",
                                           "--field-selector", f"reason={reason}"))["items"]
    return sorted((e["message"], e.get("count", 1)) for e in items)


def _set_health(walk, node: str, uuid: str, health: dict | None) -> None:
    """Rewrite ``node``'s recorded facts with ``health`` on accelerator ``uuid`` (None: none); its agent reads
    the file again on its next pass."""
    path = walk.facts / f"{node}.yaml"
    doc = yaml.safe_load(path.read_text())
    for acc in doc["accelerators"]:
        if acc["uuid"] == uuid:
            acc.pop("health", None)
            if health is not None:
                acc["health"] = health
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def _accelerator(walk, node: str, uuid: str) -> dict:
    devices = _get(walk, "devices.worker.gpustack.ai", node)
    return next((a for g in (devices.get("spec") or {}).get("groups") or [] for a in g["accelerators"]
                 if a["id"] == uuid), {})


def test_a_failed_t4_under_a_running_instance_moves_views_and_quota_only_and_recovers(walk):
    _instance(walk, "three-t4", "3")
    pod = _wait(lambda: _get(walk, "pod", "three-t4", "-n", NS),
                lambda p: ALLOCATION in (p.get("metadata") or {}).get("annotations", {})
                and (p.get("status") or {}).get("phase") == "Running", "the 3-T4 Instance's Pod running")
    assert pod["spec"]["nodeName"] == "node-t4-b"
    held = [a["id"] for g in json.loads(pod["metadata"]["annotations"][ALLOCATION])["main"] for a in g["accelerators"]]
    assert len(held) == 3
    _wait(lambda: _row(walk, T4_POOL), lambda r: r == "1/2 10/20 100/200 0/0", "the T4 row with the Instance")
    flavors, usage = _flavors(walk), _wait(lambda: _usage(walk, T4_POOL), lambda u: u.get(T4_4D) == "4800k",
                                           "Kueue's usage of the 4d flavor")
    assert _quota(walk, T4_POOL) == {T4_1D: "1600k", T4_4D: "6400k"} and _capacity(walk, T4_POOL) == "5"

    failed = held[0]
    _set_health(walk, "node-t4-b", failed, {"xids": [79]})
    _wait(lambda: _accelerator(walk, "node-t4-b", failed).get("status", {}).get("unhealthy"), bool,
          "the T4 unhealthy in its Devices")
    _wait(lambda: (_capacity(walk, T4_POOL), _quota(walk, T4_POOL)),
          lambda v: v == ("4", {T4_1D: "1600k", T4_4D: "4800k"}), "EX capacity 4 and the quota 4800k")
    assert _flavors(walk) == flavors                                   # no flavor renamed (decision 26)
    assert _usage(walk, T4_POOL) == usage                              # Kueue still books the Workload on 4d
    labels = _get(walk, "node", "node-t4-b")["metadata"]["labels"]
    assert labels["acceleratable.feature.gpustack.ai/nvidia-tesla-t4.count"] == "4"
    conflict = _wait(lambda: _events(walk, "AllocationConflict"), lambda e: len(e) == 1, "one AllocationConflict")
    assert f"accelerator {failed} " in conflict[0][0] and "is unhealthy" in conflict[0][0]
    time.sleep(6)   # three more agent passes: the Event is not repeated
    assert _events(walk, "AllocationConflict") == [(conflict[0][0], 1)]
    index = next(a["index"] for a in yaml.safe_load((walk.facts / "node-t4-b.yaml").read_text())["accelerators"]
                 if a["uuid"] == failed)
    [(unhealthy, count)] = _events(walk, "AcceleratorUnhealthy")
    assert unhealthy.startswith(f"accelerator {failed} (index {index}) of node node-t4-b is unhealthy: xid 79 (rule "
                                "fatal-xid); out of service until at least ") and count == 1
    assert unhealthy.endswith(" (failure 1 in the repeat window)")

    _set_health(walk, "node-t4-b", failed, None)   # the XID is read no more: the clean period starts
    until = _wait(lambda: _accelerator(walk, "node-t4-b", failed).get("status", {}).get("health", {}).get("until"),
                  bool, "the clean period's end")
    assert _accelerator(walk, "node-t4-b", failed)["status"]["unhealthy"] is True
    _wait(lambda: (_capacity(walk, T4_POOL), _quota(walk, T4_POOL)),
          lambda v: v == ("5", {T4_1D: "1600k", T4_4D: "6400k"}), "capacity and quota back after the clean period")
    assert datetime.now(timezone.utc) >= datetime.fromisoformat(until.replace("Z", "+00:00"))
    assert len(_events(walk, "AcceleratorHealthy")) == 1
    _delete_instance(walk, "three-t4")
    _wait(lambda: (_row(walk, T4_POOL), _row(walk, A10G_POOL)), lambda r: r == (SEED_T4, SEED_A10G), "the seed rows")


def test_an_a10g_in_maintenance_leaves_the_views_and_returns_at_its_expiry(walk):
    expiry = (datetime.now(timezone.utc) + timedelta(seconds=40)).strftime("%Y-%m-%dT%H:%M:%SZ")
    walk.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "worker.gpustack.ai/v1", "kind": "AcceleratorMaintenance", "metadata": {"name": "a10g-fan"},
        "spec": {"node": "node-a10g", "accelerators": ["0"], "reason": "fan replacement",
                 "owner": "gpu-team@example.com", "expiry": expiry}}))
    _wait(lambda: _row(walk, A10G_POOL), lambda r: r == "0/0 0/0 0/0 0/0", "the A10G row out of service")
    assert _quota(walk, A10G_POOL) == {"gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d": "0"}
    table = _wait(lambda: walk.kubectl.stdout("get", "acceleratormaintenances"), lambda t: "InForce" in t,
                  "the maintenance InForce")
    assert table.split("\n")[0].split() == ["NAME", "NODE", "DEVICES", "REASON", "OWNER", "EXPIRY", "STATE"]
    assert table.split("\n")[1].split() == ["a10g-fan", "node-a10g", "0", "fan", "replacement",
                                            "gpu-team@example.com", expiry, "InForce"]
    _wait(lambda: _row(walk, A10G_POOL), lambda r: r == SEED_A10G, "the A10G row back at the expiry",
          timeout=TIMEOUT + 40)
    assert datetime.now(timezone.utc) >= datetime.fromisoformat(expiry.replace("Z", "+00:00"))
    _wait(lambda: (_get(walk, "acceleratormaintenance", "a10g-fan").get("status") or {}).get("state"),
          lambda s: s == "Expired", "the maintenance Expired")
    walk.kubectl("delete", "acceleratormaintenance", "a10g-fan")


def test_a_cordoned_node_offers_nothing_and_a_waiting_instance_says_why(walk):
    walk.kubectl("cordon", "node-t4-b")
    try:
        _wait(lambda: _row(walk, T4_POOL), lambda r: r == "1/1 10/10 100/100 0/0", "the T4 row without node-t4-b")
        assert _capacity(walk, T4_POOL) == "5" and _quota(walk, T4_POOL) == {T4_1D: "1600k", T4_4D: "6400k"}
        _instance(walk, "two-t4", "2")
        status = _wait(lambda: _get(walk, "instance", "two-t4", "-n", NS).get("status") or {},
                       lambda s: "node node-t4-b is cordoned" in s.get("phaseMessage", ""), "the Instance says why")
        assert status["phase"] == "Pending"
        assert status["phaseMessage"] == f"no node of flavor {T4_4D} can hold the request now: node node-t4-b is cordoned"
        _delete_instance(walk, "two-t4")
    finally:
        walk.kubectl("uncordon", "node-t4-b")
    _wait(lambda: (_row(walk, T4_POOL), _row(walk, A10G_POOL)), lambda r: r == (SEED_T4, SEED_A10G), "the seed rows")
