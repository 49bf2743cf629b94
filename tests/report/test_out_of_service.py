"""Accelerators out of service, said (docs/concepts/out-of-service.md): `explain instancetype` and `audit` (table,
JSON, HTML, PolicyReports) list per node the accelerators out of service with the reason (the health fact and
rule, the maintenance object with its owner and expiry, the cordon) and the Pods still on them; `get
instancetypes` keeps its shape.

Cluster: the seed (tests/fixtures/seed/common) with node-t4-b cordoned, one of its T4s unhealthy under a
running Pod (XID 79, clean period ending), and node-a10g's A10G in maintenance.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from runtime.cli import main
from runtime.snapshots import load_snapshot

BASE = [Path("tests/fixtures/seed/common")]
T4B2 = "GPU-3f6e8b21-90c4-4d7a-b5e2-1a9c8d7e6f02"
A10G = "GPU-e0587d2e-127c-4fb8-e2c1-6e517529f575"
ALLOCATION = "device.gpustack.ai/accelerator.allocated"
UNHEALTHY = (f"accelerator {T4B2} (index 2) of node node-t4-b is unhealthy: xid 79 (rule fatal-xid); back in "
             "service at 2026-11-29T21:10:30Z if no fact is read meanwhile; Pods still on it: default/t4-demo")
MAINTENANCE = (f"accelerator {A10G} (index 0) of node node-a10g is in maintenance a10g-fan until 2026-11-29T22:00:00Z "
               "(owner gpu-team@example.com): fan replacement; Pods still on it: none")
CORDONED = ("node node-t4-b is cordoned: its 4 accelerator(s) count as capacity and quota, never as remaining or "
            "once-max")


def _accelerator(objects: list[dict], node: str, index: int) -> dict:
    (devices,) = [o for o in objects if o["kind"] == "Devices" and o["metadata"]["name"] == node]
    return devices["spec"]["groups"][0]["accelerators"][index]


def cluster(tmp_path: Path, cordon: bool = True) -> list[str]:
    objects = [copy.deepcopy(o) for o in load_snapshot(BASE)]
    _accelerator(objects, "node-t4-b", 2)["status"].update(unhealthy=True, health={
        "fact": "xid 79", "rule": "fatal-xid", "lastFailure": "2026-11-29T21:00:00Z", "until": "2026-11-29T21:10:30Z",
        "strikes": 1})
    _accelerator(objects, "node-a10g", 0)["status"]["maintenance"] = {
        "name": "a10g-fan", "reason": "fan replacement", "owner": "gpu-team@example.com",
        "expiry": "2026-11-29T22:00:00Z"}
    for obj in objects:
        if cordon and obj["kind"] == "Node" and obj["metadata"]["name"] == "node-t4-b":
            obj.setdefault("spec", {})["unschedulable"] = True
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "t4-demo", "namespace": "default", "creationTimestamp": "2026-11-29T20:00:00Z",
        "annotations": {ALLOCATION: json.dumps({"main": [{"id": "tesla-t4", "manufacturer": "nvidia", "accelerators": [
            {"id": f"GPU-3f6e8b21-90c4-4d7a-b5e2-1a9c8d7e6f0{i}", "index": i, "mode": 1} for i in range(3)]}]})}},
        "spec": {"nodeName": "node-t4-b", "containers": [{"name": "main", "image": "x"}]}, "status": {"phase": "Running"}}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(objects + [pod], sort_keys=False))
    return ["--snapshot", str(path)]


def test_explain_lists_the_pools_accelerators_out_of_service(tmp_path):
    snap = cluster(tmp_path)
    out = CliRunner().invoke(main, ["explain", "instancetype", "gpustack--nvidia-tesla-t4-linux-amd64", *snap])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    at = lines.index("out of service:")
    assert lines[at + 1:at + 3] == [f"  {CORDONED}", f"  {UNHEALTHY}"]
    a10g = CliRunner().invoke(main, ["explain", "instancetype", "gpustack--nvidia-a10g-linux-amd64", *snap])
    assert f"out of service:\n  {MAINTENANCE}\n" in a10g.output


def test_audit_reports_each_one_with_the_pods_still_on_it(tmp_path):
    snap = cluster(tmp_path)
    out = CliRunner().invoke(main, ["audit", *snap, "-o", "json"])
    found = [(r["rule"], r["result"], r["resource"]["kind"], r["resource"]["name"], r["message"], r["properties"])
             for r in json.loads(out.output) if r["policy"] == "accelerators-out-of-service"]
    assert found == [
        ("maintenance", "warn", "Devices", "node-a10g", MAINTENANCE,
         {"node": "node-a10g", "accelerator": A10G, "index": "0", "pods": ""}),
        ("unhealthy", "warn", "Devices", "node-t4-b", UNHEALTHY,
         {"node": "node-t4-b", "accelerator": T4B2, "index": "2", "pods": "default/t4-demo"}),
        ("closed-node", "warn", "Node", "node-t4-b", CORDONED, {"node": "node-t4-b"})]
    reports = list(yaml.safe_load_all(CliRunner().invoke(main, ["audit", *snap, "-o", "yaml"]).output))
    results = [r for rep in reports if rep for r in rep.get("results") or []
               if r.get("policy") == "accelerators-out-of-service"]
    assert sorted(r["message"] for r in results) == sorted([MAINTENANCE, CORDONED, UNHEALTHY])
    html = CliRunner().invoke(main, ["audit", *snap, "-o", "html"]).output
    assert "accelerators-out-of-service" in html and "fan replacement" in html and "default/t4-demo" in html


def test_get_instancetypes_keeps_its_shape(tmp_path):
    plain = CliRunner().invoke(main, ["get", "instancetypes", "--snapshot", str(BASE[0])]).output.splitlines()
    out = CliRunner().invoke(main, ["get", "instancetypes", *cluster(tmp_path)]).output.splitlines()
    assert out[0] == plain[0] == ("NAME                                    ENTRANCE                          "
                                  "UNIT(CPU/RAM)/STORAGE   ACCELERATOR(EX/SH/SL/PT)   CPU     PHASE")
    rows = {line.split()[0]: line.split()[3:7] for line in out[1:]}
    assert rows["gpustack--nvidia-a10g-linux-amd64"] == ["0/0", "0/0", "0/0", "0/0"]
    assert rows["gpustack--nvidia-tesla-t4-linux-amd64"] == ["1/1", "10/10", "100/100", "0/0"]
    uncordoned = CliRunner().invoke(main, ["get", "instancetypes", *cluster(tmp_path, cordon=False)]).output
    t4 = next(line for line in uncordoned.splitlines() if line.startswith("gpustack--nvidia-tesla-t4"))
    # node-t4-b's three in-service T4s are offered again (the fixture's ledger holds none of them)
    assert t4.split()[3:7] == ["3/4", "30/40", "100/400", "0/0"]
