"""The webhooks' ``/readyz`` (docs/webhook-hardening.md "Readiness", docs/availability.md "Serving while a watch cache relists"): 503 until every watch cache listed
once and a cluster view was built; from then on 200, also while a cache relists (slowly, or failing)
or a rebuild of the view fails: the last good objects and the last good view serve reviews, and the
cache's age is a metric. Against a scripted API (lists per kind, watches that idle), the real
Controller, ClusterCache, LiveAdmissionView and Starlette app."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from runtime.controller.reconciler import Controller
from runtime.controller.webhooks import ControllerWebhooks, WebhookTls
from runtime.engine.admission import AdmissionEngine, review_for
from runtime.engine.policy import Policy
from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules
from runtime.snapshots import load_snapshot
from testing.localcluster.testing import wait_for
from tests.builders import pod
from tests.fakeapi import FakeApi

SEED = Path(__file__).resolve().parents[1] / "fixtures" / "seed" / "common"


@pytest.fixture
def webhooks():
    snapshot = load_snapshot([SEED])
    objects: dict[str, list[dict]] = {}
    for obj in snapshot:
        objects.setdefault(obj["kind"], []).append(obj)
    api = FakeApi(objects)
    controller = Controller(api, Policy(load_rules()), env={})
    hooks = ControllerWebhooks(controller, WebhookTls(Path("unused"), Path("unused"), b""),
                               register_configurations=False)
    yield api, controller, hooks
    api.stop.set()
    controller.cache.stop()


def _readyz(hooks) -> tuple[int, str]:
    answer = TestClient(hooks.server.app).get("/readyz")
    return answer.status_code, answer.text


def _synced_and_ready(controller, hooks) -> None:
    controller.cache.start()
    assert controller.cache.wait_synced(10)
    hooks.ready()
    assert _readyz(hooks) == (200, "ok")


def test_not_ready_until_synced_then_ready(webhooks):
    api, controller, hooks = webhooks
    assert _readyz(hooks) == (503, "not ready: rules or cluster view not loaded")
    hooks.ready()  # called too early: the caches never listed
    status, text = _readyz(hooks)
    assert status == 503 and text.startswith("not ready: caches not synced: Node, NodeFeature, Devices,")
    controller.cache.start()
    assert controller.cache.wait_synced(10)
    assert _readyz(hooks) == (200, "ok")


def _a10g_pod(name: str, queue: str = "gpustack-fnv64-c4680bb149644f1c") -> dict:
    """A review of a Pod asking for a whole A10G on the seed's A10G queue."""
    return review_for(pod(name, queue=queue, image="x", limits={"nvidia.com/gpu": "1"}), uid=f"u-{name}")


def _stale_seconds(hooks, kind: str) -> float | None:
    from runtime.controller.metrics import CacheCollector
    for family in CacheCollector(hooks.controller.cache).collect():
        for sample in family.samples:
            if sample.name == "accelpolicy_watch_cache_stale_seconds" and sample.labels == {"kind": kind}:
                return sample.value
    return None


@pytest.mark.parametrize("relist", ["failing", "slow"])
def test_ready_and_serving_the_last_objects_while_a_cache_relists(webhooks, relist):
    api, controller, hooks = webhooks
    _synced_and_ready(controller, hooks)
    client = TestClient(hooks.server.app)
    before = client.post("/validate-pods", json=_a10g_pod("before")).json()["response"]
    devices = controller.cache["Devices"]
    held = sorted(o["metadata"]["name"] for o in devices.objects())
    assert held == ["node-a10g", "node-t4-a", "node-t4-b"] and _stale_seconds(hooks, "Devices") == 0.0
    if relist == "failing":
        api.fail_lists.add("Devices")
    else:
        api.slow_lists["Devices"] = 30.0
    api.expire.add("Devices")  # its watch expires; the relist fails, or takes 30 s
    wait_for(controller.cache.unsynced, lambda kinds: "Devices" in kinds, timeout=10, what="Devices relisting")
    wait_for(lambda: _stale_seconds(hooks, "Devices"), lambda age: age and age > 0.3, timeout=10,
             what="the Devices cache aging")
    assert _readyz(hooks) == (200, "ok")
    assert sorted(o["metadata"]["name"] for o in devices.objects()) == held
    during = client.post("/validate-pods", json=_a10g_pod("during")).json()["response"]
    assert during == {**before, "uid": "u-during"}
    assert devices.age() > 0.3 and controller.cache.caches["Node"].age() == 0.0
    api.fail_lists.clear()
    api.slow_lists.clear()
    api.stop.set()  # a slow list returns now
    wait_for(controller.cache.unsynced, lambda kinds: not kinds, timeout=10, what="caches in sync")
    assert _stale_seconds(hooks, "Devices") == 0.0 and _readyz(hooks) == (200, "ok")


def test_not_ready_until_a_view_was_built_then_the_last_good_view_serves(webhooks):
    api, controller, hooks = webhooks
    broken = {"apiVersion": "worker.gpustack.ai/v1", "kind": "Devices", "metadata": {"name": "node-x"},
              "spec": {"groups": [{"id": "a10g", "manufacturer": "nvidia", "accelerators": [{"id": "g", "index": "x"}]}]}}
    reason = ("not ready: cluster view cannot be built: SnapshotError: <watch cache>: Devices node-x: "
              "spec.groups[0].accelerators[0].index: must be an integer, got 'x'")
    api.objects["Devices"].append(broken)  # no view can be built from the first list
    controller.cache.start()
    assert controller.cache.wait_synced(10)
    hooks.ready()
    assert _readyz(hooks) == (503, reason)
    client = TestClient(hooks.server.app)
    failed = client.post("/validate-pods", json=_a10g_pod("none")).json()["response"]
    assert (failed["allowed"], failed["status"]["code"]) == (False, 500)
    controller.cache["Devices"].forget("node-x")
    controller._on_event("Devices", "DELETED", broken)
    assert _readyz(hooks) == (200, "ok")
    good = client.post("/validate-pods", json=_a10g_pod("good")).json()["response"]
    # broken again: the rebuild fails, the last good view answers, /readyz stays 200
    controller.cache["Devices"].observe(broken)
    controller._on_event("Devices", "ADDED", broken)
    assert _readyz(hooks) == (200, "ok")
    assert hooks.view.error == reason.removeprefix("not ready: cluster view cannot be built: ")
    failures = hooks.view.failures
    kept = client.post("/validate-pods", json=_a10g_pod("kept")).json()["response"]
    assert kept == {**good, "uid": "u-kept"}
    assert hooks.view.failures == failures  # not tried again before the next event
    controller.cache["Devices"].forget("node-x")
    controller._on_event("Devices", "DELETED", broken)
    assert _readyz(hooks) == (200, "ok") and hooks.view.error is None


def _two_families(queue: str) -> dict:
    two = pod("two", queue=queue, image="x", limits={"nvidia.com/gpu": "1", "nvidia.com/gpu.shared": "2"})
    return review_for(two, uid="u-two")


def test_a_hot_reload_swaps_the_engine_and_the_live_view_together(webhooks, tmp_path):
    """ControllerWebhooks.swap (the controller's rules reload): the next review is judged by the new
    engine against a view derived with the new policy (its queue names), never a mix; the old view
    stops listening."""
    api, controller, hooks = webhooks
    _synced_and_ready(controller, hooks)
    client = TestClient(hooks.server.app)
    before = client.post("/validate-pods", json=_two_families("gpustack-fnv64-c4680bb149644f1c")).json()["response"]
    assert before["status"]["details"]["causes"][0]["message"] == (
        "Forbidden: a Pod may request only one accelerator family, found [exclusive shared]")
    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules)
    for file, old, new in [("admission/pods.yaml", "'a Pod may request only one accelerator family, found ['",
                            "'one accelerator family per Pod, please; found ['"),
                           ("pools/derivation.yaml", "entrancePrefix: gpustack-fnv64-", "entrancePrefix: pool-")]:
        path = rules / file
        assert old in path.read_text()
        path.write_text(path.read_text().replace(old, new))
    policy = Policy(load_rules(rules))
    old_view = hooks.view
    hooks.swap(policy, AdmissionEngine(policy))
    assert old_view.on_event not in controller.listeners and hooks.view.on_event in controller.listeners
    after = client.post("/validate-pods", json=_two_families("pool-c4680bb149644f1c")).json()["response"]
    assert (after["allowed"], after["status"]["details"]["causes"][0]["message"]) == (
        False, "Forbidden: one accelerator family per Pod, please; found [exclusive shared]")
    assert hooks.state.served.view_source is hooks.view and hooks.view.policy is policy


def test_the_live_view_is_at_hand_only_while_no_event_made_it_stale(webhooks):
    """What lets a review be judged on the event loop (runtime/webhook/app.py): ``current()`` gives the built
    view at once, and None once an event of a kind the view reads arrived (the next call rebuilds it, in the
    worker pool); an event of a kind it does not read changes nothing."""
    api, controller, hooks = webhooks
    _synced_and_ready(controller, hooks)
    view = hooks.view
    built = view()
    assert view.current() is built
    view.on_event("Pod", "ADDED", {})
    assert view.current() is built
    view.on_event("Node", "MODIFIED", {})
    assert view.current() is None and view.rebuilds == 1
    rebuilt = view()
    assert rebuilt is not built and view.current() is rebuilt and view.rebuilds == 2
