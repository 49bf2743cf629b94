"""runtime/kube/client.py against stand-in API objects: upsert, owned-only delete, conflict retry."""
from __future__ import annotations

from unittest import mock

import pytest
from kubernetes.client.exceptions import ApiException

from runtime.kube.client import KubeClient, owned_by

G, V, P = "nfd.k8s-sigs.io", "v1alpha1", "nodefeatures"
OWNER = [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u1", "controller": True}]


def _client():
    c = KubeClient.__new__(KubeClient)
    c.api_client = mock.Mock()
    c.core = mock.Mock()
    c.custom = mock.Mock()
    return c


def _nf(labels, owner=OWNER):
    return {"apiVersion": f"{G}/{V}", "kind": "NodeFeature",
            "metadata": {"name": "n1-gpustack-worker", "namespace": "gpustack-system", "labels": {"a": "b"},
                         "ownerReferences": owner},
            "spec": {"labels": labels}}


def test_upsert_creates_when_missing():
    c = _client()
    c.custom.get_namespaced_custom_object.side_effect = ApiException(status=404)
    c.custom.create_namespaced_custom_object.return_value = {"created": True}
    action, _ = c.upsert_custom(G, V, P, _nf({"x": "1"}))
    assert action == "created"
    body = c.custom.create_namespaced_custom_object.call_args.args[4]
    assert body["spec"] == {"labels": {"x": "1"}}


def test_upsert_replaces_wholesale_keeping_resource_version():
    c = _client()
    current = _nf({"x": "1", "stale": "y"})
    current["metadata"]["resourceVersion"] = "7"
    c.custom.get_namespaced_custom_object.return_value = current
    action, _ = c.upsert_custom(G, V, P, _nf({"x": "2"}))
    assert action == "replaced"
    body = c.custom.replace_namespaced_custom_object.call_args.args[5]
    assert body["spec"] == {"labels": {"x": "2"}} and body["metadata"]["resourceVersion"] == "7"


def test_upsert_unchanged_writes_nothing():
    c = _client()
    c.custom.get_namespaced_custom_object.return_value = _nf({"x": "1"})
    assert c.upsert_custom(G, V, P, _nf({"x": "1"}))[0] == "unchanged"
    c.custom.replace_namespaced_custom_object.assert_not_called()


def test_conflicts_are_retried_then_succeed():
    c = _client()
    c.custom.get_namespaced_custom_object.side_effect = lambda *a: _nf({"x": "1"})   # a fresh read each time
    c.custom.replace_namespaced_custom_object.side_effect = [ApiException(status=409), {"ok": True}]
    assert c.upsert_custom(G, V, P, _nf({"x": "2"}))[0] == "replaced"
    assert c.custom.replace_namespaced_custom_object.call_count == 2


def test_other_api_errors_propagate():
    c = _client()
    c.custom.get_namespaced_custom_object.side_effect = ApiException(status=403)
    with pytest.raises(ApiException):
        c.upsert_custom(G, V, P, _nf({}))


def test_delete_only_what_the_node_owns():
    c = _client()
    c.custom.get_namespaced_custom_object.return_value = _nf({}, owner=[])
    assert not c.delete_custom_owned(G, V, P, "n1-gpustack-device-manager", "gpustack-system", "u1", "n1")
    c.custom.delete_namespaced_custom_object.assert_not_called()
    c.custom.get_namespaced_custom_object.return_value = _nf({})
    assert c.delete_custom_owned(G, V, P, "n1-gpustack-device-manager", "gpustack-system", "u1", "n1")


def test_owned_by():
    obj = _nf({})
    assert owned_by(obj, "u1", "n1") and not owned_by(obj, "u2", "n1") and owned_by(obj, "", "n1")


def test_watch_sets_the_wake_event_and_survives_failures(monkeypatch):
    import threading
    from runtime.kube import client as kc

    calls = []

    class FakeWatch:
        def stream(self, fn, *args, **kwargs):
            calls.append((args, kwargs))
            if len(calls) == 1:
                raise ApiException(status=500)
            yield {"type": "MODIFIED"}
            stop.set()

        def stop(self):
            pass

    monkeypatch.setattr(kc.k8s_watch, "Watch", FakeWatch)
    wake, stop = threading.Event(), threading.Event()
    spec = kc.WatchSpec("Node", lambda **kw: None, kwargs={"field_selector": "metadata.name=n1"})
    kc.watch_forever(spec, wake, stop, backoff=0)
    assert wake.is_set() and len(calls) == 2
    assert calls[1][1]["field_selector"] == "metadata.name=n1"


def test_node_watches_select_this_node():
    c = _client()
    specs = c.node_watches("n1", G, V, P, "gpustack-system", "nfd.node.kubernetes.io/node-name",
                           "gpustack-system", "gpustack-settings")
    assert [(s.kind, dict(s.kwargs)) for s in specs] == [
        ("Node", {"field_selector": "metadata.name=n1"}),
        ("Pod", {"field_selector": "spec.nodeName=n1"}),
        ("NodeFeature", {"label_selector": "nfd.node.kubernetes.io/node-name=n1"}),
        ("Secret", {"field_selector": "metadata.name=gpustack-settings"})]


def test_patch_pod_annotations_merges_only_the_given_key():
    c = _client()
    c.core.patch_namespaced_pod.side_effect = [ApiException(status=503), None]    # transient, retried
    c.patch_pod_annotations("demo", "p", {"device.gpustack.ai/accelerator.allocated": "{}"})
    assert c.core.patch_namespaced_pod.call_count == 2
    assert c.core.patch_namespaced_pod.call_args.args == (
        "p", "demo", {"metadata": {"annotations": {"device.gpustack.ai/accelerator.allocated": "{}"}}})
