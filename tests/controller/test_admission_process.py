"""The admission process (runtime/controller/admission.py) against the scripted API:
it watches only what admission reads, answers reviews from a view rebuilt off the review path, is ready
once its caches listed and a view exists, and stays ready and answering while a cache relists."""
from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from runtime.controller.admission import AdmissionServer, BuiltAdmissionView, admission_watched
from runtime.controller.reconciler import Controller
from runtime.engine.policy import Policy
from runtime.kube.cache import WatchedKind
from runtime.kube.clustercache import ClusterCache
from runtime.rules.loader import load_rules
from testing.localcluster.testing import wait_for
from tests.controller.test_pass_writes import seed_api
from tests.controller.test_readiness import _a10g_pod, _two_families

POLICY = Policy(load_rules())


def test_it_watches_only_what_admission_reads():
    assert admission_watched(POLICY, "gpustack-system") == [
        WatchedKind("ClusterQueue"), WatchedKind("InstanceType"), WatchedKind("LocalQueue"), WatchedKind("Node"),
        WatchedKind("PolicyException"), WatchedKind("ResourceFlavor"),
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
    answer = TestClient(server.server.app).get("/readyz")
    return answer.status_code, answer.text


def test_ready_once_listed_and_a_view_built_then_answering_from_it(server):
    api, server = server
    _published(api)
    assert _readyz(server) == (503, "not ready: rules or cluster view not loaded")
    server.start(sync_timeout=10)
    assert _readyz(server) == (200, "ok")
    assert server.view.rebuilds == 1
    client = TestClient(server.server.app)
    answer = client.post("/mutate-pods", json=_a10g_pod("one")).json()["response"]
    assert answer["allowed"] is True and answer["uid"] == "u-one"
    # the fronting InstanceType the controller published answers for the queue: rule 1 of pods.yaml
    two = client.post("/validate-pods", json=_two_families("gpustack-fnv64-c4680bb149644f1c")).json()["response"]
    assert two["status"]["details"]["causes"][0]["message"] == (
        "Forbidden: a Pod may request only one accelerator family, found [exclusive shared]")
    metrics = client.get("/metrics").text
    assert 'accelpolicy_cache_objects{kind="Node"} 4.0' in metrics and 'kind="Devices"' not in metrics
    assert "accelpolicy_admission_view_rebuilds_total 1.0" in metrics
    assert 'accelpolicy_watch_cache_stale_seconds{kind="InstanceType"} 0.0' in metrics


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
    assert TestClient(server.server.app).post("/mutate-pods", json=_a10g_pod("meanwhile")).json()["response"]["allowed"]
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
    assert TestClient(server.server.app).post("/mutate-pods", json=_a10g_pod("relist")).json()["response"]["allowed"]
    api.fail_lists.clear()
    wait_for(server.cache.unsynced, lambda kinds: not kinds, timeout=10, what="caches in sync")


def test_the_first_view_failing_is_the_readiness_answer():
    api = seed_api()
    api.objects["Node"].append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-x", "labels": {
        "gpustack.ai/managed": True}}})   # a label value that is not a string
    cache = ClusterCache(api, admission_watched(POLICY, "gpustack-system"))
    view = BuiltAdmissionView(cache, POLICY, "gpustack-system")
    try:
        cache.start()
        assert cache.wait_synced(10)
        with pytest.raises(Exception, match="label gpustack.ai/managed must be a string, got True"):
            view()
        assert view.failures == 1 and view.error == (
            "SnapshotError: <watch cache>: Node node-x: metadata.labels: label gpustack.ai/managed must be a "
            "string, got True (quote it in YAML)")
    finally:
        api.stop.set()
        cache.stop()


def _published(api) -> None:
    """The seed cluster as the controller publishes it (its passes' writes in the scripted store)."""
    controller = Controller(api, POLICY, env={}, fit_coalesce_seconds=0, tune_gc=False).start_caches(10)
    try:
        for _ in range(3):
            controller.reconcile()
        assert controller.reconcile().planned == []
    finally:
        controller.cache.stop()


def _comparable(obj: dict) -> dict:
    """``obj`` without what the API server (uid, resourceVersion) or the create (a LocalQueue's owner,
    filled at execution) adds, which no admission rule reads."""
    meta = {k: v for k, v in obj["metadata"].items()
            if k not in ("uid", "resourceVersion", "namespace", "ownerReferences")}
    return {**obj, "metadata": meta}


def test_the_published_view_is_what_derivation_gives(server):
    """Once the controller reconciled, the objects it published are what admission_view derives from the
    node facts: the admission process judges against the same InstanceTypes (status included),
    ResourceFlavors, ClusterQueues, LocalQueues and settings, without deriving; and a change the
    controller publishes reaches the view."""
    from runtime.engine.admission import admission_view
    from runtime.engine.snapshot import Snapshot

    api, server = server
    _published(api)
    server.start(sync_timeout=10)
    built = server.view()
    full = admission_view(POLICY, Snapshot.from_objects([dict(o) for items in api.objects.values() for o in items]),
                          live=True, settings_namespace="gpustack-system")
    for kind in ("InstanceType", "ResourceFlavor", "ClusterQueue", "LocalQueue"):
        assert [_comparable(o) for o in built.snapshot.list(kind)] == [_comparable(o) for o in full.snapshot.list(kind)], kind
        assert built.snapshot.list(kind), kind
    assert built.settings == full.settings
    assert built.snapshot.count("Devices") == built.snapshot.count("NodeFeature") == 0   # not read here
    status = server.cache["InstanceType"].get("gpustack--nvidia-a10g-linux-amd64")
    changed = {**status, "metadata": {**status["metadata"], "resourceVersion": "999999"},
               "status": {**status["status"], "phase": "Inactive"}}
    server.cache["InstanceType"].observe(changed)
    server._on_event("InstanceType", "MODIFIED", changed)
    wait_for(lambda: server.view().snapshot.get("InstanceType", "gpustack--nvidia-a10g-linux-amd64"),
             lambda it: it["status"]["phase"] == "Inactive", timeout=10, what="the published change in the view")


def test_a_rules_change_serves_once_the_leaders_verdict_on_the_rules_configmap_accepts_it(tmp_path):
    """A replica started with the rules ConfigMap (``accelpolicy admission --rules-configmap``, as the
    chart runs it) tries a changed set on its recent reviews against the published objects, then waits for
    the verdict the controller's leader records in the ConfigMap's annotation (docs/rule-authoring.md "How
    rules change goes live")."""
    from runtime.rules.loader import DEFAULT_RULES_DIR
    from runtime.reload.watcher import content_hash, generation_id
    from tests.controller.test_reload_gate import RULE_1A, _edit

    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules)
    shutil.rmtree(rules / "tests")   # as the chart mounts it: no suites to run
    api = seed_api()
    _published(api)
    configmap = {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "accelpolicy-rules", "namespace": "gpustack-system", "annotations": {}}}
    api.objects["ConfigMap"] = [configmap]
    server = AdmissionServer(api, Policy(load_rules(rules)), Path("unused"), Path("unused"), "gpustack-system",
                             watch_rules_seconds=3600, rules_configmap=("gpustack-system", "accelpolicy-rules"))
    try:
        server.start(sync_timeout=10)
        client = TestClient(server.server.app)
        two = _two_families("gpustack-fnv64-c4680bb149644f1c")
        assert client.post("/validate-pods", json=two).json()["response"]["allowed"] is False
        before = server.state.engine
        _edit(rules / "admission" / "pods.yaml", RULE_1A, "      expression: size(variables.families) <= 2\n")
        assert server.reload.watcher.poll() is False           # tried here, accepted, waiting for the leader
        assert server.reload.pending.trial.accepted and server.state.engine is before
        configmap["metadata"]["annotations"]["rules.accelpolicy.dev/verdict"] = f"accepted:{generation_id(content_hash(rules))}"
        server.reload.settle()
        assert server.state.engine is not before and server.reload.pending is None
        assert client.post("/validate-pods", json=two).json()["response"]["allowed"] is True
    finally:
        api.stop.set()
        server.stop()
