"""The controller's snapshots kept from the watch caches' changes (docs/performance.md "A pass proportional to what changed"): ``KindCache.changes``
reports exactly the keys touched since a version, and every ``CacheSnapshots.snapshot()`` equals a
snapshot of copies of every cached object, copying only what changed."""
from __future__ import annotations

import copy
import random

import pytest

from runtime.controller.snapshots import CacheSnapshots
from runtime.engine.snapshot import Snapshot, SnapshotError
from runtime.kube.cache import KindCache, WatchedKind
from runtime.kube.clustercache import ClusterCache
from tests.fakeapi import FakeApi

KINDS = {"Node": ("v1", "nodes", False), "Devices": ("worker.gpustack.ai/v1", "devices", False),
         "Pod": ("v1", "pods", True)}


def no_server() -> FakeApi:
    """The in-memory API serving KINDS, for caches that are only written through (never started)."""
    return FakeApi(kinds=KINDS)


def obj(kind: str, name: str, rv: int, namespace: str = "", **labels) -> dict:
    meta = {"name": name, "resourceVersion": str(rv), "labels": labels}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": KINDS[kind][0], "kind": kind, "metadata": meta}


def test_changes_name_the_keys_touched_after_a_version_newest_first():
    cache = KindCache(no_server(), WatchedKind("Node"))
    assert cache.changes(0) == (0, [])
    cache.observe(obj("Node", "a", 1))
    cache.observe(obj("Node", "b", 2))
    version, keys = cache.changes(0)
    assert (version, keys) == (2, [("", "b"), ("", "a")])
    cache.observe(obj("Node", "a", 3))
    cache.observe(obj("Node", "a", 2))  # older than what is held: not stored, not a change
    assert cache.changes(version) == (3, [("", "a")])
    cache.forget("b")
    cache.forget("zz")  # not held: not a change
    assert cache.changes(version) == (4, [("", "b"), ("", "a")])
    assert cache.changes(4) == (4, [])
    assert cache.changes(0)[1] == [("", "b"), ("", "a")]  # a key appears once, at its last touch


def test_changes_of_keys_long_gone_are_forgotten_and_read_as_unknown():
    cache = KindCache(no_server(), WatchedKind("Node"))
    cache.observe(obj("Node", "kept", 1))
    version = cache.changes(0)[0]
    for i in range(1100):  # created and deleted: more gone keys than 2 x held + 1024
        cache.observe(obj("Node", f"n{i}", 10 + i))
        cache.forget(f"n{i}")
    now, keys = cache.changes(version)
    assert keys is None and now == version + 2200
    assert cache.changes(now) == (now, [])
    assert cache.keys() == [("", "kept")]


@pytest.fixture
def caches():
    cluster = ClusterCache(no_server(), [WatchedKind(kind) for kind in KINDS])
    return cluster, CacheSnapshots(cluster)


def _full(cluster: ClusterCache) -> Snapshot:
    return Snapshot.from_objects([copy.deepcopy(o) for cache in cluster.caches.values() for o in cache.objects()])


def _versions(objects) -> dict:
    return {key: o["metadata"]["resourceVersion"] for key, o in (objects or {}).items()}


def test_each_snapshot_equals_one_of_every_cached_object_and_copies_only_the_changes(caches):
    cluster, snapshots = caches
    rng = random.Random(4)
    rv = 0
    for step in range(60):
        for _ in range(rng.choice([0, 1, 3])):
            kind = rng.choice(list(KINDS))
            name = f"{kind.lower()}-{rng.randrange(6)}"
            namespace = "default" if kind == "Pod" else ""
            rv += 1
            if rng.random() < 0.25:
                cluster[kind].forget(name, namespace)
            else:
                cluster[kind].observe(obj(kind, name, rv, namespace, step=str(step)))
        before = {kind: cluster[kind].changes(0)[0] for kind in KINDS}
        snapshot = snapshots.snapshot()
        assert snapshot == _full(cluster), step
        if step:
            changed_kept = {k for k in ("Node", "Devices") if before[k] != seen[k]}
            for kind in ("Node", "Devices"):
                now, then = snapshot.objects.get(kind), previous.objects.get(kind)
                if kind not in changed_kept:
                    assert now is then, (step, kind)
                elif _versions(now) != _versions(then):  # (not: created and deleted again since)
                    assert now is not then, (step, kind)
            pods = cluster["Pod"].objects()
            assert snapshots.copied <= len(pods) + rv - seen_rv  # Pods every pass, the others when changed
        previous, seen, seen_rv = snapshot, before, rv


def test_a_refused_object_fails_every_pass_until_fixed(caches):
    cluster, snapshots = caches
    cluster["Node"].observe(obj("Node", "a", 1, role="x"))
    first = snapshots.snapshot()
    bad = obj("Node", "a", 2)
    bad["metadata"]["labels"]["size"] = 3
    cluster["Node"].observe(bad)
    cluster["Devices"].observe(obj("Devices", "a", 3))
    for _ in range(2):
        with pytest.raises(SnapshotError, match="Node a: metadata.labels: label size must be a string, got 3"):
            snapshots.snapshot()
    cluster["Node"].observe(obj("Node", "a", 4, size="3"))
    snapshot = snapshots.snapshot()
    assert snapshot == _full(cluster)
    assert snapshot.get("Node", "a")["metadata"]["labels"] == {"size": "3"}
    assert snapshot.objects["Node"] is not first.objects["Node"]
    assert snapshot.get("Node", "a") is not cluster["Node"].get("a")  # a copy, not the cache's dict
