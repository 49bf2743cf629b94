"""Incremental derive (docs/performance.md "A pass proportional to what changed"): ``derive(..., memo=DeriveMemo())`` (and the controller's plan
with the same memo) equals a full derive after any sequence of node edits, and an edit of one node
re-derives only what that node feeds.

The edits replace the edited object with a new one and keep every other object as it was, as the
controller's watch cache does (runtime/engine/pools/incremental.py keys by object identity).
"""
from __future__ import annotations

import base64
import copy
import random
from collections import Counter

import pytest

from benchmarks.derive import generate
from runtime.engine.plan import plan
from runtime.engine.pools.derive import derive
from runtime.engine.pools.deviceset import label_index, move_in_index
from runtime.engine.pools.incremental import DeriveMemo
from runtime.engine.snapshot import Snapshot, check_object
from runtime.report.tables import render, resolve_kind
from runtime.snapshots import load_snapshot
from tests.seedfiles import FIXTURES, seed_table

MANAGED = "gpustack.ai/managed"
SEED_STEPS = ["step1", "step2-unmanaged", "step2-readmitted", "step3-sliced-demo", "step4-deleted-type",
              "step5-aware"]
SEED_TABLES = ["step1-instancetype.txt", "step2-after-unmanage.txt", "step2-after-readmit.txt",
               "step3-after-sliced-demo.txt", "step4-after-delete-custom-type.txt", "step5-after-aware.txt"]


def _find(objects: list[dict], kind: str, name: str) -> int:
    return next(i for i, o in enumerate(objects) if o["kind"] == kind and o["metadata"]["name"] == name)


def _replace(objects: list[dict], kind: str, name: str, edit) -> None:
    """Replace one object by an edited deep copy (the others keep their identity)."""
    i = _find(objects, kind, name)
    new = copy.deepcopy(objects[i])
    edit(new)
    objects[i] = new


def _flip_managed(policy, rng, objects, node):
    _replace(objects, "NodeFeature", f"{node}-gpustack-worker", lambda nf: nf["spec"]["labels"].update(
        {MANAGED: "false" if nf["spec"]["labels"].get(MANAGED) == "true" else "true"}))


def _ledger_row(policy, rng, objects, node):
    def edit(devices):
        row = rng.choice(devices["status"]["groups"][0]["accelerators"])
        for key in ("mode", "allocated", "remaining", "allocatedSlices", "allocatedProfiles"):
            row.pop(key, None)
        row.update(rng.choice([{"mode": 0, "remaining": 1_600_000}, {"mode": 1, "allocated": 1_600_000},
                               {"mode": 2, "allocated": 320_000, "remaining": 1_280_000},
                               {"mode": 1, "remaining": -5}]))  # the last: out of range (decision 19)
    _replace(objects, "Devices", node, edit)


def _unhealthy(policy, rng, objects, node):
    def edit(devices):
        acc = rng.choice(devices["spec"]["groups"][0]["accelerators"])
        acc["status"]["unhealthy"] = not acc["status"].get("unhealthy")
    _replace(objects, "Devices", node, edit)


def _bad_count(policy, rng, objects, node):
    def edit(nf):
        labels = nf["spec"]["labels"]
        key = next(k for k in labels if k.endswith(".count"))
        labels[key] = rng.choice(["x", "0", "4", "8"])
    _replace(objects, "NodeFeature", f"{node}-gpustack-device-manager", edit)


def _node_annotation(policy, rng, objects, node):
    _replace(objects, "Node", node, lambda n: n["metadata"]["annotations"].update(
        {"feature.gpustack.ai/cpu-name": rng.choice(["AMD EPYC 7R32", "Intel(R) Xeon(R) Gold 6348"])}))


def _delete_node(policy, rng, objects, node):
    objects[:] = [o for o in objects if not (o["metadata"]["name"] in (node, f"{node}-gpustack-worker",
                                                                         f"{node}-gpustack-device-manager"))]


def _clone_node(policy, rng, objects, node):
    name = f"{node}-clone{rng.randrange(1000)}"
    for obj in [o for o in objects if o["metadata"]["name"].startswith(node) and "clone" not in o["metadata"]["name"]]:
        new = copy.deepcopy(obj)
        new["metadata"]["name"] = obj["metadata"]["name"].replace(node, name, 1)
        if new["kind"] == "NodeFeature":
            new["metadata"]["labels"]["nfd.node.kubernetes.io/node-name"] = name
        objects.append(new)


def _deleting_node(policy, rng, objects, node):
    _replace(objects, "Node", node, lambda n: n["metadata"].update({"deletionTimestamp": "2026-01-01T00:00:00Z"}))


def _stray_node_feature(policy, rng, objects, node):
    """A NodeFeature naming ``node`` that decision 20 ignores (another namespace, or a name that is not
    ours: a warning), one moved to name another node, or such a stray one deleted again."""
    strays = [i for i, o in enumerate(objects) if o["kind"] == "NodeFeature" and "stray" in o["metadata"]["name"]]
    if strays and rng.random() < 0.4:
        i = rng.choice(strays)
        if rng.random() < 0.5:
            del objects[i]
        else:
            objects[i] = copy.deepcopy(objects[i])
            objects[i]["metadata"]["labels"]["nfd.node.kubernetes.io/node-name"] = node
        return
    worker = objects[_find(objects, "NodeFeature", f"{node}-gpustack-worker")]
    stray = copy.deepcopy(worker)
    stray["metadata"]["name"] = f"{node}-stray{rng.randrange(100)}"
    stray["metadata"]["namespace"] = rng.choice(["gpustack-system", "default"])
    objects.append(stray)


def _feature_gone(policy, rng, objects, node):
    """One of the node's own NodeFeatures is deleted (the node stays): its keys leave the node."""
    name = rng.choice([f"{node}-gpustack-worker", f"{node}-gpustack-device-manager"])
    objects[:] = [o for o in objects if not (o["kind"] == "NodeFeature" and o["metadata"]["name"] == name)]


def _setting(policy, rng, objects, node):
    value = base64.b64encode(rng.choice([b"true", b"false"])).decode()
    _replace(objects, "Secret", "gpustack-settings", lambda s: s["data"].update(
        {rng.choice(["instance-type-mixed-on-node", "instance-type-aware-cpu-manufacturer"]): value}))


def _fit_labels_written(policy, rng, objects, node):
    """The controller's fit label patch of ``node`` lands (a new Node object), when one is planned."""
    snapshot = Snapshot.from_objects(objects)
    patch = next((a.body for a in plan(policy, derive(policy, snapshot), snapshot)
                  if a.kind == "Node" and a.name == node), None)
    if patch is not None:
        def edit(obj):
            labels = {**obj["metadata"].get("labels", {}), **patch["metadata"]["labels"]}
            obj["metadata"]["labels"] = {k: v for k, v in labels.items() if v is not None}
        _replace(objects, "Node", node, edit)


def _kept_snapshot(objects: list[dict], previous: Snapshot | None) -> Snapshot:
    """The snapshot as the controller builds it (runtime/controller/snapshots.py): the objects
    themselves, and ``previous``'s map of a kind (the same object) while that kind's objects are
    all the same ones."""
    index: dict[str, dict] = {}
    for i, obj in enumerate(objects):
        kind, key = check_object(obj, "<test>", i, [])
        index.setdefault(kind, {})[key] = obj
    for kind, items in index.items():
        old = previous.objects.get(kind) if previous is not None else None
        if old is not None and old.keys() == items.keys() and all(old[k] is v for k, v in items.items()):
            index[kind] = old
    return Snapshot.from_index(index)


EDITS = [_flip_managed, _ledger_row, _unhealthy, _bad_count, _node_annotation, _delete_node, _clone_node,
         _deleting_node, _setting, _fit_labels_written, _fit_labels_written, _stray_node_feature, _feature_gone]


def _accelerated(objects: list[dict]) -> list[str]:
    return sorted(o["metadata"]["name"] for o in objects if o["kind"] == "Devices" and any(
                      n["kind"] == "NodeFeature" and n["metadata"]["name"] == f"{o['metadata']['name']}-gpustack-worker"
                      for n in objects) and
                  any(n["kind"] == "NodeFeature" and n["metadata"]["name"] == f"{o['metadata']['name']}-gpustack-device-manager"
                      for n in objects))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_node_edits_derive_as_a_full_derive(policy, seed):
    rng = random.Random(seed)
    objects = generate(40, seed=seed, aware=seed == 3)
    memos = {False: DeriveMemo(), True: DeriveMemo()}  # snapshot mode and live mode (the controller's)
    kept_memo, kept = DeriveMemo(), None  # live mode on the controller's snapshots (unchanged kinds: same map)
    applied, reused, warned = [], Counter(), False
    for step in range(30):
        snapshot = Snapshot.from_objects(objects)
        kept = _kept_snapshot(objects, kept)
        for live, memo, snap in ((False, memos[False], snapshot), (True, memos[True], snapshot),
                                 (True, kept_memo, kept)):
            full = derive(policy, snapshot, live=live)
            state = derive(policy, snap, live=live, memo=memo)
            assert state == full, (seed, step, applied)
            warned = warned or any("stray" in w for w in full.warnings)
            assert plan(policy, state, snap, memo=memo) == plan(policy, full, snapshot), (seed, step, applied)
            reused += memo.reused
        edit = rng.choice(EDITS)
        edit(policy, rng, objects, rng.choice(_accelerated(objects)))
        applied.append(edit.__name__)
    assert all(reused[store] > 0 for store in ("node", "flavors", "notes", "ledger", "status", "fitpatch", "select",
                                               "nodeset", "flavorset", "deviceset")), reused
    assert warned, applied  # decision 20's warnings were compared too


def test_an_edit_of_one_node_re_derives_only_that_node_and_its_pool(policy):
    objects = generate(200, seed=5)
    memo = DeriveMemo()
    derive(policy, Snapshot.from_objects(objects), memo=memo)
    types = memo.computed["status"]
    assert memo.computed["node"] == 200 and types > 2
    node = _accelerated(objects)[0]
    _ledger_row(policy, random.Random(0), objects, node)
    state = derive(policy, Snapshot.from_objects(objects), memo=memo)
    assert state == derive(policy, Snapshot.from_objects(objects))
    assert (memo.computed["node"], memo.reused["node"]) == (0, 200)
    assert (memo.computed["ledger"], memo.computed["status"]) == (1, 1)  # the node's Devices, its one pool
    _flip_managed(policy, random.Random(0), objects, node)
    state = derive(policy, Snapshot.from_objects(objects), memo=memo)
    assert state == derive(policy, Snapshot.from_objects(objects))
    assert (memo.computed["node"], memo.computed["flavors"]) == (1, 1)
    assert memo.computed["status"] < types


def test_a_ledger_edit_on_the_controllers_snapshots_reuses_every_node_result_whole(policy):
    """Nodes and NodeFeatures unchanged (their maps the same objects): the node facts, flavors and
    fit labels are reused whole, without a look at each node; the one Devices and its pool are new."""
    objects = generate(200, seed=5)
    memo = DeriveMemo()
    snapshot = _kept_snapshot(objects, None)
    plan(policy, derive(policy, snapshot, live=True, memo=memo), snapshot, memo=memo)
    _replace(objects, "Devices", _accelerated(objects)[0], lambda d: d["status"]["groups"][0]["accelerators"][0].update(
        {"mode": 1, "allocated": 1_600_000, "remaining": 0}))  # one accelerator taken whole: a sound ledger row
    snapshot = _kept_snapshot(objects, snapshot)
    state = derive(policy, snapshot, live=True, memo=memo)
    actions = plan(policy, state, snapshot, memo=memo)
    assert state == derive(policy, Snapshot.from_objects(objects), live=True)
    assert actions == plan(policy, state, Snapshot.from_objects(objects))
    assert (memo.reused["nodeset"], memo.computed["node"], memo.reused["node"]) == (1, 0, 0)
    assert (memo.reused["deviceset"], memo.computed["ledger"], memo.computed["status"]) == (1, 1, 1)  # one replaced
    assert memo.reused["flavorset"] == 1  # a ledger row is no Devices spec: no flavor note moves
    assert memo.computed["fitpatch"] == 1 and memo.reused["fitpatch"] == 0  # the one node's, no look at the others
    state = derive(policy, snapshot, live=True, memo=memo)  # the same snapshot again: an idle pass
    assert plan(policy, state, snapshot, memo=memo) == actions
    assert sum(memo.computed.values()) == 0, memo.computed
    _flip_managed(policy, random.Random(0), objects, _accelerated(objects)[0])
    snapshot = _kept_snapshot(objects, snapshot)
    assert derive(policy, snapshot, live=True, memo=memo) == derive(policy, Snapshot.from_objects(objects), live=True)
    assert (memo.computed["node"], memo.reused["node"]) == (1, 0)  # only the flipped node is read again
    _node_annotation(policy, random.Random(0), objects, _accelerated(objects)[1])  # no managed mark moves
    snapshot = _kept_snapshot(objects, snapshot)
    assert derive(policy, snapshot, live=True, memo=memo) == derive(policy, Snapshot.from_objects(objects), live=True)
    assert (memo.computed["node"], memo.reused["deviceset"]) == (1, 1)  # the Devices are not looked at
    node = _accelerated(objects)[2]
    row = {"mode": 1, "allocated": 1_600_000}
    for edit, rebuilt in (({**row, "remaining": -5}, 1), ({**row, "remaining": 0}, 1), ({"example.com/rack": "r1"}, 0)):
        # refused (decision 19), sound again: the lists change shape; a label added: the index moves
        _replace(objects, "Devices", node, lambda d, edit=edit: (d["metadata"]["labels"] if "mode" not in edit
                                                                else d["status"]["groups"][0]["accelerators"][0]).update(edit))
        snapshot = _kept_snapshot(objects, snapshot)
        state = derive(policy, snapshot, live=True, memo=memo)
        assert state == derive(policy, Snapshot.from_objects(objects), live=True), edit
        assert (memo.computed["deviceset"], memo.reused["deviceset"]) == (rebuilt, 1 - rebuilt), edit


def test_seed_steps_through_one_memo_print_the_seed_tables(policy):
    memo = DeriveMemo()
    table = resolve_kind("instancetypes")
    for step, expected in zip(SEED_STEPS, SEED_TABLES):
        snapshot = load_snapshot([FIXTURES / "seed" / step])
        state = derive(policy, snapshot, memo=memo)
        assert state == derive(policy, snapshot)
        assert render(table, state.view(policy, table.kind, snapshot)) == seed_table(expected)


def test_a_moved_label_moves_its_position_in_the_label_index():
    objects = [{"metadata": {"name": f"n{i}", "labels": {"a": str(i % 2), "b": "x"}}} for i in range(5)]
    index = label_index(objects)
    kept = {item: list(positions) for item, positions in index.items()}
    new = {"metadata": {"name": "n2", "labels": {"a": "1", "c": "y"}}}
    moved = dict(index)
    move_in_index(moved, 2, objects[2]["metadata"]["labels"], new["metadata"]["labels"])
    objects[2] = new
    assert moved == label_index(objects)
    assert moved[("a", "1")] == [1, 2, 3] and ("c", "y") in moved
    assert index == kept  # the lists of the index it was copied from are not changed
