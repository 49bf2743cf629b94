"""The admission process (issue 21 items 1-2; runtime/controller/admission.py) against the scripted API:
it watches only what admission reads, answers reviews from a view rebuilt off the review path, is ready
once its caches listed and a view exists, and stays ready and answering while a cache relists."""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from runtime.controller.admission import AdmissionServer, BuiltAdmissionView, admission_watched
from runtime.engine.policy import Policy
from runtime.kube.cache import ClusterCache, WatchedKind
from runtime.rules.loader import load_rules
from testing.localcluster.testing import wait_for
from tests.controller.test_pass_writes import seed_api
from tests.controller.test_readiness import _a10g_pod

POLICY = Policy(load_rules())


def test_it_watches_only_what_admission_reads():
    assert admission_watched(POLICY, "gpustack-system") == [
        WatchedKind("ClusterQueue"), WatchedKind("Devices"), WatchedKind("InstanceType"), WatchedKind("LocalQueue"),
        WatchedKind("Namespace"), WatchedKind("Node"), WatchedKind("NodeFeature"), WatchedKind("ResourceFlavor"),
        WatchedKind("Secret", namespace="gpustack-system", field_selector="metadata.name=gpustack-settings")]


@pytest.fixture
def server():
    api = seed_api()
    server = AdmissionServer(api, POLICY, Path("unused"), Path("unused"), "gpustack-system", refresh_seconds=0.2,
                             watch_rules_seconds=0)
    yield api, server
    api.stop.set()
    server.view.stop()
    server.cache.stop()


def _readyz(server) -> tuple[int, str]:
    answer = TestClient(server.app).get("/readyz")
    return answer.status_code, answer.text


def test_ready_once_listed_and_a_view_built_then_answering_from_it(server):
    api, server = server
    assert _readyz(server) == (503, "not ready: rules or cluster view not loaded")
    server.start(sync_timeout=10)
    assert _readyz(server) == (200, "ok")
    assert server.view.rebuilds == 1
    client = TestClient(server.app)
    answer = client.post("/mutate-pods", json=_a10g_pod("one")).json()["response"]
    assert answer["allowed"] is True and answer["uid"] == "u-one"
    metrics = client.get("/metrics").text
    assert 'accelpolicy_cache_objects{kind="Node"} 4.0' in metrics
    assert "accelpolicy_admission_view_rebuilds_total 1.0" in metrics
    assert 'accelpolicy_watch_cache_stale_seconds{kind="Devices"} 0.0' in metrics


def test_a_review_never_waits_for_a_rebuild(server):
    """An event makes the view stale: reviews go on with the last view at once; the builder thread
    rebuilds within the refresh period, and the staleness is readable meanwhile."""
    api, server = server
    server.start(sync_timeout=10)
    view = server.view
    served = view()
    view.build = _slow(view.build, 1.0)   # a rebuild that takes a second
    node = dict(server.cache["Node"].get("node-cpu"))
    node["metadata"] = {**node["metadata"], "labels": {**node["metadata"]["labels"], "x": "1"},
                        "resourceVersion": "999999"}
    server.cache["Node"].observe(node)
    server._on_event("Node", "MODIFIED", node)
    t0 = time.monotonic()
    assert view() is served and time.monotonic() - t0 < 0.1
    assert TestClient(server.app).post("/mutate-pods", json=_a10g_pod("meanwhile")).json()["response"]["allowed"]
    assert view.lag() > 0
    wait_for(lambda: view(), lambda v: v is not served, timeout=10, what="the builder's rebuild")
    assert view.lag() == 0.0


def _slow(build, seconds):
    def slow():
        time.sleep(seconds)
        return build()
    return slow


def test_ready_and_answering_while_a_cache_relists(server):
    api, server = server
    server.start(sync_timeout=10)
    api.fail_lists.add("Node")
    api.expire.add("Node")
    wait_for(server.cache.unsynced, lambda kinds: "Node" in kinds, timeout=10, what="Node relisting")
    assert _readyz(server) == (200, "ok")
    assert TestClient(server.app).post("/mutate-pods", json=_a10g_pod("relist")).json()["response"]["allowed"]
    api.fail_lists.clear()
    wait_for(server.cache.unsynced, lambda kinds: not kinds, timeout=10, what="caches in sync")


def test_the_first_view_failing_is_the_readiness_answer():
    api = seed_api()
    api.objects["Devices"].append({"apiVersion": "worker.gpustack.ai/v1", "kind": "Devices", "metadata": {
        "name": "node-x"}, "spec": {"groups": [{"id": "a10g", "manufacturer": "nvidia",
                                                "accelerators": [{"id": "g", "index": "x"}]}]}})
    cache = ClusterCache(api, admission_watched(POLICY, "gpustack-system"))
    view = BuiltAdmissionView(cache, POLICY, "gpustack-system")
    try:
        cache.start()
        assert cache.wait_synced(10)
        with pytest.raises(Exception, match="must be an integer, got 'x'"):
            view()
        assert view.failures == 1 and "must be an integer" in view.error
    finally:
        api.stop.set()
        cache.stop()


def test_the_incremental_view_equals_the_full_one_through_changes(server):
    """BuiltAdmissionView (CacheSnapshots + derive memo + view_of_state) holds what admission_view of a
    fresh snapshot holds, after a change to one node's facts too."""
    from runtime.engine.admission import admission_view

    api, server = server
    server.start(sync_timeout=10)

    def same() -> None:
        built = server.view.build()
        full = admission_view(POLICY, server.cache.snapshot(server.view.kinds), live=True,
                              settings_namespace="gpustack-system")
        assert sorted(built.snapshot.objects) == sorted(full.snapshot.objects)
        for kind in full.snapshot.objects:
            assert built.snapshot.list(kind) == full.snapshot.list(kind), kind
        assert built.settings == full.settings
    same()
    feature = dict(server.cache["NodeFeature"].get("node-a10g-gpustack-worker", "gpustack-system"))
    feature["metadata"] = {**feature["metadata"], "resourceVersion": "999999"}
    feature["spec"] = {**feature["spec"], "labels": {**feature["spec"]["labels"], "gpustack.ai/managed": "false"}}
    server.cache["NodeFeature"].observe(feature)
    same()
