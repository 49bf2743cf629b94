"""`kubectl get` prints the seed's tables (docs/getting-started.md "Step 1: read the initial pools", seed/tables/*.txt).

For each table the test makes the cluster hold exactly that table's objects: seed objects where the
seed has them (with the row's printed status values), minimal objects otherwise, with the status
the row shows. The printed text must then equal the seed table column-exact (trailing spaces
ignored; AGE columns ignored); catalog and devices tables compare as sets of rows, because kubectl
lists in name order while the seed's capture did not (DECISION 9).
"""

from __future__ import annotations

import copy
import json

import pytest

from testing.localcluster.testing import parse_table, seed_tables, shared_dir, shared_missing_reason


def _tables_with(first_header_word: str, second: str):
    d = shared_dir()
    if d is None:
        return [pytest.param(None, marks=pytest.mark.skip(reason=shared_missing_reason()), id="no-seed")]
    out = []
    for stem, text in seed_tables(d).items():
        headers, _ = parse_table(text)
        if headers[:1] == [first_header_word] and (second in headers if second else headers == ["NAME"]):
            out.append(pytest.param(stem, id=stem))
    assert out, f"no seed table with header {second!r}"
    return out


def lines(text: str) -> list[str]:
    return [ln.rstrip() for ln in text.splitlines() if ln.strip()]


def replace_all(kubectl, resource: str, objects: list[tuple[dict, dict | None]]) -> None:
    """Delete every ``resource`` object, then create ``objects`` (body, status) and write statuses."""
    kubectl("delete", resource, "--all", "--wait=true")
    for body, status in objects:
        body = {k: v for k, v in body.items() if k != "status"}
        kubectl("apply", "--validate=strict", "-f", "-", input=json.dumps(body))
        if status is not None:
            kubectl("patch", resource, body["metadata"]["name"], "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": status}))


def _seed_by(seed, kind):
    return {o.name: o.body for o in seed if o.kind == kind}


@pytest.mark.parametrize("table", _tables_with("NAME", "ENTRANCE"))
def test_instancetype_table(kubectl, seed, tables, table):
    text = tables[table]
    _, rows = parse_table(text)
    seeded = _seed_by(seed, "InstanceType")
    objects = []
    for row in rows:
        cpu, ram, storage = row["UNIT(CPU/RAM)/STORAGE"].split("/")
        if row["NAME"] in seeded:
            body = copy.deepcopy(seeded[row["NAME"]])
            status = copy.deepcopy(body.get("status", {}))
        else:
            body = {"apiVersion": "worker.gpustack.ai/v1", "kind": "InstanceType",
                    "metadata": {"name": row["NAME"]},
                    "spec": {"acceleratable": row["ACCELERATOR(EX/SH/SL/PT)"] != "0/0 0/0 0/0 0/0",
                             "os": "linux", "arch": "amd64",
                             "unitResources": {"cpu": cpu, "ram": ram}, "localStorage": storage}}
            status = {}
        status.update(entrance=row["ENTRANCE"], phase=row["PHASE"],
                      summary={"unit": row["UNIT(CPU/RAM)/STORAGE"], "accelerator": row["ACCELERATOR(EX/SH/SL/PT)"],
                               "cpu": row["CPU"], "partitions": ""})
        objects.append((body, status))
    replace_all(kubectl, "instancetypes", objects)
    assert lines(kubectl.stdout("get", "instancetypes")) == lines(text)
    # the short name and the category reach the same objects
    assert lines(kubectl.stdout("get", "instype")) == lines(text)
    wide = lines(kubectl.stdout("get", "instancetypes", "-o", "wide"))
    assert wide[0].split()[-2:] == ["PHASE", "PARTITIONS"]


@pytest.mark.parametrize("table", _tables_with("NAME", "GENERALGROUP"))
def test_instancetypeflavor_table(kubectl, seed, tables, table):
    text = tables[table]
    _, rows = parse_table(text)
    seeded = _seed_by(seed, "InstanceTypeFlavor")
    objects = []
    for row in rows:
        if row["NAME"] in seeded:
            body = copy.deepcopy(seeded[row["NAME"]])
        else:
            spec = {"acceleratable": row["ACCELERATABLE"] == "true"}
            for col, field in [("GENERALGROUP", "generalGroup"), ("ACCELERATORGROUP", "acceleratorGroup"),
                               ("MANUFACTURER", "manufacturer"), ("PRODUCT", "product"),
                               ("MEMORY", "memory"), ("CORES", "cores")]:
                if row[col]:
                    spec[field] = row[col]
            if row["SLICEABLE"]:
                spec["sliceable"] = row["SLICEABLE"] == "true"
            body = {"apiVersion": "worker.gpustack.ai/v1", "kind": "InstanceTypeFlavor",
                    "metadata": {"name": row["NAME"]}, "spec": spec}
        objects.append((body, None))
    replace_all(kubectl, "instancetypeflavors", objects)
    got = lines(kubectl.stdout("get", "instancetypeflavor"))
    want = lines(text)
    assert got[0] == want[0]
    assert sorted(got[1:]) == sorted(want[1:])
    assert got[1:] == sorted(got[1:], key=lambda ln: ln.split()[0])  # name order
    assert lines(kubectl.stdout("get", "instypeflavor")) == got


@pytest.mark.parametrize("table", _tables_with("NAME", None))
def test_devices_table(kubectl, seed, tables, table):
    text = tables[table]
    _, rows = parse_table(text)
    seeded = _seed_by(seed, "Devices")
    objects = []
    for row in rows:
        body = copy.deepcopy(seeded.get(row["NAME"]) or {
            "apiVersion": "worker.gpustack.ai/v1", "kind": "Devices", "metadata": {"name": row["NAME"]}})
        objects.append((body, body.get("status")))
    replace_all(kubectl, "devices", objects)
    got = lines(kubectl.stdout("get", "devices"))
    assert got[0] == "NAME" and sorted(got[1:]) == sorted(lines(text)[1:])
    assert lines(kubectl.stdout("get", "devs")) == got
    wide = lines(kubectl.stdout("get", "devices", "-o", "wide"))
    assert wide[0].split() == ["NAME", "AGE"]


@pytest.mark.parametrize("table", _tables_with("NAME", "AGE"))
def test_resourceflavor_table(kubectl, seed, tables, table):
    """Kueue's own columns: NAME AGE (AGE values ignored)."""
    _, rows = parse_table(tables[table])
    seeded = _seed_by(seed, "ResourceFlavor")
    objects = [(copy.deepcopy(seeded.get(r["NAME"]) or {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": r["NAME"]}}), None)
        for r in rows]
    replace_all(kubectl, "resourceflavors.kueue.x-k8s.io", objects)
    headers, got = parse_table(kubectl.stdout("get", "resourceflavors.v1beta2.kueue.x-k8s.io"))
    assert headers == ["NAME", "AGE"]
    assert [r["NAME"] for r in got] == sorted(r["NAME"] for r in rows)


@pytest.mark.parametrize("table", _tables_with("NAME", "COHORT"))
def test_clusterqueue_table(kubectl, seed, tables, table):
    """Kueue's own columns: NAME COHORT PENDING WORKLOADS, column-exact."""
    text = tables[table]
    _, rows = parse_table(text)
    seeded = _seed_by(seed, "ClusterQueue")
    objects = []
    for r in rows:
        body = copy.deepcopy(seeded.get(r["NAME"]) or {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": r["NAME"]},
            "spec": {}})
        objects.append((body, {"pendingWorkloads": int(r["PENDING WORKLOADS"])}))
    replace_all(kubectl, "clusterqueues.kueue.x-k8s.io", objects)
    assert lines(kubectl.stdout("get", "clusterqueues.v1beta2.kueue.x-k8s.io")) == lines(text)
