"""What the watch caches hold (docs/performance.md "Fast to start, light to hold"): the object less managedFields (and a Node's
status.images), strings shared, the same derivation as from the API server's objects; the bytes per
kind as a metric."""
from __future__ import annotations

import copy
import json
import sys

from prometheus_client import CollectorRegistry, generate_latest

from benchmarks.derive import generate
from runtime.engine.pools import derive
from runtime.engine.snapshot import Snapshot
from runtime.kube.cache import KindCache, WatchedKind
from runtime.kube.held import CacheBytesCollector, held, held_bytes
from tests.fakeapi import FakeApi


def _served(obj: dict, rv: int = 1) -> dict:
    """``obj`` as the API server serves it: resourceVersion, uid and a managedFields entry."""
    out = copy.deepcopy(obj)
    meta = out.setdefault("metadata", {})
    meta.update(resourceVersion=str(rv), uid=f"uid-{meta['name']}", creationTimestamp="2026-12-01T00:00:00Z")
    fields = {f"f:{k}": {} for k in (meta.get("labels") or {})}
    meta["managedFields"] = [{"manager": "bench", "operation": "Update", "apiVersion": out.get("apiVersion", "v1"),
                              "time": "2026-12-01T00:00:00Z", "fieldsType": "FieldsV1",
                              "fieldsV1": {"f:metadata": {"f:labels": {".": {}, **fields}}}}]
    if out["kind"] == "Node":
        out.setdefault("status", {})["images"] = [{"names": [f"registry.local/app@sha256:{i:064x}"], "sizeBytes": 1 << 20}
                                                  for i in range(5)]
    return out


def _without(obj: dict) -> dict:
    out = copy.deepcopy(obj)
    out["metadata"].pop("managedFields", None)
    if out["kind"] == "Node":
        out["status"].pop("images", None)
    return out


def test_held_drops_only_managed_fields_and_node_images():
    for obj in generate(40):
        served = _served(obj)
        before = json.dumps(served, sort_keys=True)
        kept = held(served["kind"], served)
        assert kept == _without(served)
        assert json.dumps(served, sort_keys=True) == before  # the object given is not changed
        assert kept is not served and kept["metadata"] is not served["metadata"]
        assert list(kept) == list(served)  # key order kept


def test_strings_are_shared_between_held_objects():
    a, b = [held("NodeFeature", _served(o)) for o in generate(30) if o["kind"] == "NodeFeature"][:2]
    key_a = next(k for k in a["metadata"] if k == "namespace")
    key_b = next(k for k in b["metadata"] if k == "namespace")
    assert key_a is key_b
    assert a["metadata"]["namespace"] is b["metadata"]["namespace"]
    long_text = "x" * 200
    assert held("Node", {"kind": "Node", "metadata": {"name": "n", "annotations": {"a": long_text}}}
                )["metadata"]["annotations"]["a"] == long_text


def test_the_derivation_from_held_objects_is_the_derivation_from_served_ones(policy):
    served = [_served(o) for o in generate(300)]
    snapshot_served = Snapshot.from_objects(copy.deepcopy(served))
    snapshot_held = Snapshot.from_objects([held(o["kind"], o) for o in served])
    state_served = derive(policy, snapshot_served, live=True)
    state_held = derive(policy, snapshot_held, live=True)
    assert state_held.instance_types == state_served.instance_types
    assert state_held.warnings == state_served.warnings
    for kind in ("ResourceFlavor", "ClusterQueue", "LocalQueue", "InstanceType", "InstanceTypeFlavor"):
        assert state_held.view(policy, kind, snapshot_held) == state_served.view(policy, kind, snapshot_served)


def test_a_kind_cache_holds_the_held_form_and_counts_its_bytes():
    nodes = [_served(o, rv=i + 1) for i, o in enumerate(generate(20)) if o["kind"] == "Node"]
    session = FakeApi(lists=[{"apiVersion": "v1", "metadata": {"resourceVersion": "100"}, "items": nodes}],
                          watches=[])
    cache = KindCache(session, WatchedKind("Node"))
    cache._list()
    assert all("managedFields" not in o["metadata"] and "images" not in o["status"] for o in cache.objects())
    collector = CacheBytesCollector(lambda: {"Node": cache})
    registry = CollectorRegistry()
    registry.register(collector)

    def scraped() -> float:
        for line in generate_latest(registry).decode().splitlines():
            if line.startswith('accelpolicy_watch_cache_bytes{kind="Node"}'):
                return float(line.split()[-1])
        raise AssertionError("no sample")

    first = scraped()
    assert first == sum(held_bytes(o) for o in cache.objects())
    assert first < sum(len(json.dumps(o)) for o in nodes)  # less than the served objects' JSON
    bigger = copy.deepcopy(nodes[0])
    bigger["metadata"]["resourceVersion"] = "200"
    bigger["metadata"]["annotations"]["note"] = "y" * 1000
    cache._handle({"type": "MODIFIED", "object": bigger})
    assert scraped() == first - held_bytes(held("Node", nodes[0])) + held_bytes(held("Node", bigger))
    cache._handle({"type": "DELETED", "object": bigger})
    assert scraped() == sum(held_bytes(o) for o in cache.objects())


def test_held_bytes_counts_containers_numbers_and_long_strings_only():
    assert held_bytes({}) == sys.getsizeof({})
    obj = {"a": "short", "b": [1, 10**6], "c": "z" * 100}
    assert held_bytes(obj) == (sys.getsizeof(obj) + sys.getsizeof(obj["b"]) + sys.getsizeof(10**6)
                               + sys.getsizeof("z" * 100))
