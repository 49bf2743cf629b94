"""The controller's ``/readyz`` tells the truth (issue 13 item 12): 503 while a watch cache is not in
sync (never listed, or relisting after its watch expired) or while the cluster view the webhooks judge
against cannot be built; 200 otherwise. Against a scripted API (lists per kind, watches that idle),
the real Controller, ClusterCache, LiveAdmissionView and Starlette app."""
from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from runtime.controller.reconciler import Controller
from runtime.controller.webhooks import ControllerWebhooks, WebhookTls
from runtime.engine.admission import AdmissionEngine, review_for
from runtime.engine.policy import Policy
from runtime.engine.snapshot import KNOWN_KINDS
from runtime.kube.session import KubeApiError, ResourceRef
from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules
from runtime.snapshots import load_snapshot
from testing.localcluster.testing import wait_for

SEED = Path(__file__).resolve().parents[1] / "fixtures" / "seed" / "common"


class _IdleStream:
    def __init__(self, stop: threading.Event, gone: bool):
        self.stop, self.gone = stop, gone

    def __iter__(self):
        if self.gone:
            yield {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
            return
        self.stop.wait(0.2)
        return

    def close(self):
        pass

    def abort(self):
        pass


class ScriptedApi:
    """Lists every kind from ``objects`` (kind -> items); ``fail_lists`` kinds answer 503; watches
    idle, or end with 410 Gone for the kinds in ``expire``."""

    def __init__(self, objects: dict[str, list[dict]]):
        self.objects = objects
        self.fail_lists: set[str] = set()
        self.expire: set[str] = set()
        self.stop = threading.Event()
        self.version = 1

    def ref(self, kind):
        api_version, namespaced = KNOWN_KINDS.get(kind, ("v1", False))
        return ResourceRef(kind, api_version, kind, namespaced)

    def _kind(self, path: str) -> str:
        return path.rsplit("/", 1)[1]

    def call(self, method, path, query=None, **_):
        kind = self._kind(path)
        if kind in self.fail_lists:
            raise KubeApiError(503, "ServiceUnavailable", "scripted")
        self.version += 1
        return {"apiVersion": "v1", "items": [dict(o) for o in self.objects.get(kind, [])],
                "metadata": {"resourceVersion": str(self.version)}}

    def stream(self, path, query, timeout):
        kind = self._kind(path)
        gone = kind in self.expire
        self.expire.discard(kind)
        return _IdleStream(self.stop, gone)


@pytest.fixture
def webhooks():
    snapshot = load_snapshot([SEED])
    objects: dict[str, list[dict]] = {}
    for obj in snapshot:
        objects.setdefault(obj["kind"], []).append(obj)
    api = ScriptedApi(objects)
    controller = Controller(api, Policy(load_rules()), env={})
    hooks = ControllerWebhooks(controller, WebhookTls(Path("unused"), Path("unused"), b""),
                               register_configurations=False)
    yield api, controller, hooks
    api.stop.set()
    controller.cache.stop()


def _readyz(hooks) -> tuple[int, str]:
    answer = TestClient(hooks.app).get("/readyz")
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


def test_not_ready_while_a_cache_relists(webhooks):
    api, controller, hooks = webhooks
    _synced_and_ready(controller, hooks)
    api.fail_lists.add("Devices")
    api.expire.add("Devices")  # its watch expires; the relist fails until the API answers again
    wait_for(controller.cache.unsynced, lambda kinds: "Devices" in kinds, timeout=10, what="Devices relisting")
    assert _readyz(hooks) == (503, "not ready: caches not synced: Devices")
    api.fail_lists.clear()
    wait_for(controller.cache.unsynced, lambda kinds: not kinds, timeout=10, what="caches in sync")
    assert _readyz(hooks) == (200, "ok")


def test_not_ready_while_the_cluster_view_cannot_be_built(webhooks):
    api, controller, hooks = webhooks
    _synced_and_ready(controller, hooks)
    broken = {"apiVersion": "worker.gpustack.ai/v1", "kind": "Devices", "metadata": {"name": "node-x"},
              "spec": {"groups": [{"id": "a10g", "manufacturer": "nvidia", "accelerators": [{"id": "g", "index": "x"}]}]}}
    controller.cache["Devices"].observe(broken)
    controller._on_event("Devices", "ADDED", broken)
    status, text = _readyz(hooks)
    assert status == 503
    assert text == ("not ready: cluster view cannot be built: SnapshotError: <watch cache>: Devices node-x: "
                    "spec.groups[0].accelerators[0].index: must be an integer, got 'x'")
    controller.cache["Devices"].forget("node-x")
    controller._on_event("Devices", "DELETED", broken)
    assert _readyz(hooks) == (200, "ok")


def _two_families(queue: str) -> dict:
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "two", "namespace": "default", "labels": {"kueue.x-k8s.io/queue-name": queue}},
           "spec": {"containers": [{"name": "main", "image": "x", "resources": {"limits": {
               "nvidia.com/gpu": "1", "nvidia.com/gpu.shared": "2"}}}]}}
    return review_for(pod, uid="u-two")


def test_a_hot_reload_swaps_the_engine_and_the_live_view_together(webhooks, tmp_path):
    """ControllerWebhooks.swap (the controller's rules reload): the next review is judged by the new
    engine against a view derived with the new policy (its queue names), never a mix; the old view
    stops listening."""
    api, controller, hooks = webhooks
    _synced_and_ready(controller, hooks)
    client = TestClient(hooks.app)
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
