"""The webhook app: endpoints, well-formed answers to malformed input (hypothesis), real HTTPS."""
from __future__ import annotations

import base64
import json
import ssl

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from runtime.engine.admission import AdmissionEngine, admission_view, review_for
from runtime.engine.policy import Policy
from runtime.rules.loader import load_rules
from runtime.snapshots import load_snapshot
from runtime.webhook.app import WebhookState, build_app
from runtime.webhook.server import ServerThread, self_signed
from tests.builders import pod

A10G_QUEUE = "gpustack-fnv64-c4680bb149644f1c"


def _pod(limits: dict, name: str = "demo") -> dict:
    return pod(name, queue=A10G_QUEUE, image="x", limits=limits)


@pytest.fixture(scope="module")
def state() -> WebhookState:
    policy = Policy(load_rules())
    engine = AdmissionEngine(policy)
    st_ = WebhookState(max_body_bytes=64 * 1024)
    st_.set_ready(engine, admission_view(policy, load_snapshot(["tests/fixtures/seed/common"])))
    return st_


@pytest.fixture(scope="module")
def client(state) -> TestClient:
    app = build_app(state, {s.path: n for n, s in state.engine.policies.items()})
    return TestClient(app)


def test_health_ready_and_metrics(client, state):
    assert client.get("/healthz").text == "ok"
    assert client.get("/readyz").status_code == 200
    client.post("/validate-pods", json=review_for(_pod({"nvidia.com/gpu": "1", "amd.com/gpu.shared": "1"})))
    text = client.get("/metrics").text
    assert 'accelpolicy_admission_reviews_total{verdict="invalid",webhook="pods-validation"}' in text
    assert 'accelpolicy_admission_rule_hits_total{rule="one-accelerator-family",webhook="pods-validation"}' in text
    assert "accelpolicy_admission_review_seconds_bucket" in text


def test_not_ready_until_rules_and_view_are_loaded():
    st_ = WebhookState()
    app = build_app(st_, {"/validate-pods": "pods-validation"})
    c = TestClient(app)
    assert c.get("/readyz").status_code == 503
    r = c.post("/validate-pods", json=review_for(_pod({}), uid="u-1"))
    assert r.status_code == 200
    assert r.json()["response"] == {"uid": "u-1", "allowed": False, "status": {
        "status": "Failure", "message": "Internal error occurred: webhook not ready; retry",
        "reason": "InternalError", "code": 500}}


def test_mutation_path_returns_base64_jsonpatch(client):
    pod = _pod({"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "20",
                "nvidia.com/gpu.sliced.cores-percentage": "100"})
    r = client.post("/mutate-pods", json=review_for(pod, uid="abc"))
    resp = r.json()["response"]
    assert resp["uid"] == "abc" and resp["allowed"] is True and resp["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(resp["patch"])) == [
        {"op": "add", "path": "/spec/containers/0/resources/requests", "value": {"nvidia.com/gpu.sliced.units": "320k"}},
        {"op": "add", "path": "/spec/containers/0/resources/limits/nvidia.com~1gpu.sliced.units", "value": "320k"}]


def test_denial_echoes_uid_with_causes(client):
    r = client.post("/validate-pods", json=review_for(_pod({"nvidia.com/gpu.sliced": "2",
                                                            "nvidia.com/gpu.sliced.memory-percentage": "20"}), uid="u-9"))
    status = r.json()["response"]["status"]
    assert r.status_code == 200 and r.json()["response"]["uid"] == "u-9"
    assert status["code"] == 422 and status["reason"] == "Invalid"
    assert status["details"]["causes"] == [{
        "reason": "FieldValueInvalid", "field": "spec.containers[0].resources.limits[nvidia.com/gpu.sliced]",
        "message": 'Invalid value: "2": a logical slice request is always a single accelerator; '
                   "multi-accelerator logical slicing is not supported yet"}]


@pytest.mark.parametrize("body, status, message", [
    (b"not json", 200, "request body is not JSON"),
    (b"[]", 200, "the body must be an AdmissionReview object"),
    (json.dumps({"apiVersion": "v1", "kind": "AdmissionReview", "request": {"uid": "x"}}).encode(), 200,
     'expected apiVersion admission.k8s.io/v1, kind AdmissionReview; got apiVersion "v1", kind "AdmissionReview"'),
    # docs/webhook-hardening.md "Every review gets a well-formed answer": which version came, and what to change
    (json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "x"}}).encode(),
     200, 'expected apiVersion admission.k8s.io/v1, kind AdmissionReview; got apiVersion "admission.k8s.io/v1beta1", '
          'kind "AdmissionReview" (this webhook reads admission.k8s.io/v1 only; kube-apiserver sends v1 when the '
          "webhook configuration's admissionReviewVersions lists it)"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}).encode(), 200,
     "request.uid must be a non-empty string"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                 "request": {"uid": "u", "kind": "Pod", "operation": "CREATE"}}).encode(), 200,
     "request.kind must be an object"),
    (b"{" + b" " * (70 * 1024) + b"}", 200, "request body exceeds 65536 bytes"),
    (b'{"apiVersion": NaN}', 200, "request body is not JSON"),
    (b"[" * 5000 + b"]" * 5000, 200, "request body is not JSON"),
    # docs/webhook-hardening.md "Malformed objects never pass: shape checks": a review without `request` is answered as a review, not with HTTP 400
    (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(), 200,
     "request is required: an AdmissionReview carries the object to judge in request (uid, kind, operation, object)"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": [1]}).encode(), 200,
     "request must be an object, got array"),
    # an old object whose metadata is not a mapping crashed the engine (AttributeError, HTTP 200 InternalError)
    (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "kind": {"kind": "Pod"}, "operation": "DELETE", "oldObject": {"metadata": "oops"}}}).encode(), 200,
     "request.oldObject.metadata must be an object"),
    # docs/webhook-hardening.md "Every review gets a well-formed answer": lone surrogates are a denial, not an HTTP 500
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "\\ud800"}}', 200,
     "request.uid must be valid Unicode text (it holds a lone surrogate)"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u", "name": "\\udc00x",'
     b' "kind": {"kind": "Pod"}, "operation": "CREATE", "object": {"metadata": {}}}}', 200,
     "request.name must be valid Unicode text (it holds a lone surrogate)"),
])
def test_malformed_reviews_get_well_formed_denials(client, body, status, message):
    r = client.post("/validate-pods", content=body, headers={"content-type": "application/json"})
    assert r.status_code == status
    resp = r.json()["response"]
    assert resp["allowed"] is False
    assert resp["status"] == {"status": "Failure", "message": message, "reason": "BadRequest", "code": 400}


def test_malformed_reviews_are_counted_and_logged(caplog):
    """docs/webhook-hardening.md "Every review gets a well-formed answer": a body too large, not JSON, or not a usable review was answered but neither
    logged nor counted. Each is counted by webhook and reason; the log gets one WARNING line per webhook
    and reason at most every 10 s, the next one saying how many it did not print."""
    policy = Policy(load_rules())
    st_ = WebhookState(max_body_bytes=1024)
    st_.set_ready(AdmissionEngine(policy), admission_view(policy, load_snapshot(["tests/fixtures/seed/common"])))
    c = TestClient(build_app(st_, {"/validate-pods": "pods-validation"}))
    no_request = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode()
    with caplog.at_level("WARNING", logger="runtime.webhook.metrics"):
        for body in (b"x" * 2048, b"not json", b"not json", no_request):
            assert c.post("/validate-pods", content=body).json()["response"]["status"]["code"] == 400
        c.post("/validate-pods", json=review_for(_pod({"nvidia.com/gpu": "1"})))  # a review: not counted here
    text = c.get("/metrics").text
    assert 'accelpolicy_admission_malformed_reviews_total{reason="body-too-large",webhook="pods-validation"} 1.0' in text
    assert 'accelpolicy_admission_malformed_reviews_total{reason="not-json",webhook="pods-validation"} 2.0' in text
    assert 'accelpolicy_admission_malformed_reviews_total{reason="not-a-review",webhook="pods-validation"} 1.0' in text
    assert [r.getMessage() for r in caplog.records if r.name == "runtime.webhook.metrics"] == [
        "webhook pods-validation: malformed review from testclient (body-too-large): request body exceeds 1024 bytes",
        "webhook pods-validation: malformed review from testclient (not-json): request body is not JSON "
        "(JSONDecodeError: Expecting value: line 1 column 1 (char 0))",
        "webhook pods-validation: malformed review from testclient (not-a-review): request is required: an "
        "AdmissionReview carries the object to judge in request (uid, kind, operation, object)"]


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                     max_leaves=20)


def _check(r) -> None:
    assert r.status_code == 200
    body = r.json()
    assert body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
    assert isinstance(body["response"]["allowed"], bool)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=200))
def test_fuzz_raw_bytes(client, body):
    _check(client.post("/validate-pods", content=body))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=st.dictionaries(st.sampled_from(["uid", "kind", "operation", "object", "oldObject", "name",
                                                "namespace", "resource", "userInfo"]), _json, max_size=9),
       path=st.sampled_from(["/validate-pods", "/mutate-pods"]))
def test_fuzz_request_fields(client, request, path):
    r = client.post(path, json={"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
    _check(r)
    if isinstance(request.get("uid"), str) and request["uid"]:
        assert r.json()["response"]["uid"] == request["uid"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(containers=st.lists(st.fixed_dictionaries({"name": st.text(max_size=5)}, optional={
    "restartPolicy": st.sampled_from(["Always", "Never", 3]),
    "resources": st.dictionaries(st.sampled_from(["limits", "requests", "claims"]),
                                 st.dictionaries(st.sampled_from([
                                     "nvidia.com/gpu", "nvidia.com/gpu.sliced", "nvidia.com/gpu.shared",
                                     "nvidia.com/gpu.sliced.memory-percentage", "nvidia.com/gpu.sliced.memory-mib",
                                     "nvidia.com/gpu.partitioned", "nvidia.com/gpu.partitioned.mig-1g.10gb",
                                     "amd.com/gpu", "cpu"]),
                                     st.sampled_from(["1", "2", "0", "-1", "1m", "150", "abc", "", 1, 2.5, None, True]),
                                     max_size=4) | _json, max_size=2)}), max_size=3),
       path=st.sampled_from(["/validate-pods", "/mutate-pods"]))
def test_fuzz_pod_shapes(client, containers, path):
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "f", "namespace": "default", "labels": {"kueue.x-k8s.io/queue-name": A10G_QUEUE}},
           "spec": {"containers": containers}}
    r = client.post(path, json=review_for(pod, uid="fz"))
    _check(r)
    assert r.status_code == 200 and r.json()["response"]["uid"] == "fz"


def test_real_https_server(state, tmp_path):
    paths = self_signed(tmp_path)
    app = build_app(state, {s.path: n for n, s in state.engine.policies.items()})
    server = ServerThread(app, str(paths["cert"]), str(paths["key"])).start()
    try:
        ctx = ssl.create_default_context(cafile=str(paths["ca"]))
        with httpx.Client(verify=ctx, base_url=server.url) as http:
            assert http.get("/healthz").text == "ok"
            r = http.post("/validate-pods", json=review_for(_pod({"nvidia.com/gpu": "1", "nvidia.com/gpu.shared": "1"}),
                                                            uid="tls"))
            assert r.json()["response"]["status"]["message"] == (
                'Pod "demo" is invalid: spec: Forbidden: a Pod may request only one accelerator family, '
                "found [exclusive shared]")
            assert http.post("/validate-pods", content=b"\x00\xff").status_code == 200
    finally:
        server.stop()
    assert server.url.startswith("https://127.0.0.1:")


def test_stopping_drains_with_connection_close_then_refuses(state, tmp_path):
    """docs/availability.md "Availability: admission through faults, and a start that loses nothing" (fault suite helm-upgrade: "failed to call webhook: ... EOF"): while a stopping server
    drains, it still answers reviews, each with `Connection: close` (a keep-alive client then drops the
    connection itself); afterwards nothing listens. Before the drain, connections are kept alive."""
    import threading
    import time
    paths = self_signed(tmp_path)
    app = build_app(state, {s.path: n for n, s in state.engine.policies.items()})
    server = ServerThread(app, str(paths["cert"]), str(paths["key"])).start()
    ctx = ssl.create_default_context(cafile=str(paths["ca"]))
    review = review_for(_pod({"nvidia.com/gpu": "1"}), uid="drain")
    with httpx.Client(verify=ctx, base_url=server.url) as http:
        before = http.post("/validate-pods", json=review)
        assert before.json()["response"]["allowed"] is True and "connection" not in before.headers
        stopper = threading.Thread(target=server.stop, kwargs={"drain_seconds": 1.5})
        stopper.start()
        time.sleep(0.3)
        during = http.post("/validate-pods", json=review)
        assert during.json()["response"]["allowed"] is True and during.headers["connection"] == "close"
        stopper.join(15)
        assert not stopper.is_alive()
        with pytest.raises(httpx.ConnectError):
            http.post("/validate-pods", json=review)
