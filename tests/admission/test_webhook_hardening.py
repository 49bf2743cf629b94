"""docs/webhook-hardening.md "Webhook hardening: hostile input, bounded memory, slow paths": the webhook under hostile or careless clients (slow clients, aborted bodies, slow reviews).

Real uvicorn servers on 127.0.0.1, raw sockets for the clients that misbehave.
"""
from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time

import httpx
import pytest

from runtime.engine.admission import AdmissionEngine, admission_view, review_for
from runtime.engine.policy import Policy
from runtime.rules.loader import load_rules
from runtime.snapshots import load_snapshot
from runtime.webhook.app import WebhookState, build_app
from runtime.webhook.server import ServerThread
from testing.webhookload import held_seconds
from tests.builders import pod

POD = pod(image="x")


@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy(load_rules())


@pytest.fixture(scope="module")
def view(policy):
    return admission_view(policy, load_snapshot(["tests/fixtures/seed/common"]))


def _serve(state: WebhookState, **kw) -> ServerThread:
    app = build_app(state, {s.path: n for n, s in state.engine.policies.items()})
    return ServerThread(app, **kw).start()


def test_partial_headers_and_partial_bodies_are_dropped_at_the_read_deadline(policy, view):
    state = WebhookState(deadline_seconds=5)
    state.set_ready(AdmissionEngine(policy), view)
    server = _serve(state, read_timeout=1.0)
    try:
        partial_headers = b"POST /validate-pods HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty"
        partial_body = (b"POST /validate-pods HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                        b"Content-Length: 5000\r\n\r\n{\"apiVersion\": ")
        results = {}

        def probe(label, payload):
            results[label] = held_seconds(server.port, payload, limit=20)

        threads = [threading.Thread(target=probe, args=(f"{kind}-{i}", payload))
                   for i in range(5) for kind, payload in (("headers", partial_headers), ("body", partial_body),
                                                           ("silent", b""))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(results) == 15
        assert all(held < 10 for held in results.values()), results  # closed by the server, not held
        # a well-behaved client on the same server is still answered
        r = httpx.post(f"{server.url}/validate-pods", json=review_for(POD, uid="ok"), timeout=10)
        assert r.json()["response"]["uid"] == "ok"
    finally:
        server.stop()
        state.close()


def test_connection_cap_answers_503_beyond_the_limit(policy, view):
    state = WebhookState()
    state.set_ready(AdmissionEngine(policy), view)
    server = _serve(state, read_timeout=5.0, max_connections=4)
    held = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(4)]
    try:
        time.sleep(0.2)
        r = httpx.get(f"{server.url}/healthz", timeout=5)
        assert r.status_code == 503
    finally:
        for s in held:
            s.close()
        time.sleep(0.2)
        assert httpx.get(f"{server.url}/healthz", timeout=5).text == "ok"
        server.stop()
        state.close()


def test_an_aborted_body_is_one_debug_line_and_no_traceback(policy, view, caplog):
    state = WebhookState()
    state.set_ready(AdmissionEngine(policy), view)
    server = _serve(state)
    try:
        with caplog.at_level(logging.DEBUG):
            for _ in range(3):
                sock = socket.create_connection(("127.0.0.1", server.port))
                sock.sendall(b"POST /validate-pods HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"a\": 1")
                time.sleep(0.1)
                sock.close()
            deadline = time.monotonic() + 5
            mine = []
            while time.monotonic() < deadline and len(mine) < 3:
                time.sleep(0.05)
                mine = [r for r in caplog.records if "disconnected before the review body was read" in r.getMessage()]
        assert len(mine) == 3 and all(r.levelno == logging.DEBUG for r in mine)
        assert not [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    finally:
        server.stop()
        state.close()


def test_a_slow_review_is_denied_at_its_deadline_while_health_and_readiness_answer(policy, view):
    """The engine runs off the event loop: a view that takes forever to build blocks only its review."""
    release = threading.Event()

    def slow_view():
        release.wait(30)
        return view

    state = WebhookState(deadline_seconds=1.5, workers=2)
    state.set_ready(AdmissionEngine(policy), slow_view)
    server = _serve(state)
    try:
        answers = {}

        def send():
            answers["review"] = httpx.post(f"{server.url}/validate-pods", json=review_for(POD, uid="slow"), timeout=20)

        t = threading.Thread(target=send)
        t.start()
        time.sleep(0.3)
        assert httpx.get(f"{server.url}/healthz", timeout=1).text == "ok"
        assert httpx.get(f"{server.url}/readyz", timeout=1).status_code == 200
        t.join(20)
        resp = answers["review"].json()["response"]
        assert answers["review"].status_code == 200
        assert resp == {"uid": "slow", "allowed": False, "status": {
            "status": "Failure", "reason": "Timeout", "code": 504,
            "message": "webhook pods-validation: the review was not judged within its 1.5s deadline; retry"}}
    finally:
        release.set()
        server.stop()
        state.close()


def test_readyz_is_503_while_the_cluster_view_cannot_be_built(policy, view):
    broken = {"on": True}

    def source():
        if broken["on"]:
            raise RuntimeError("watch cache not synced")
        return view

    state = WebhookState()
    state.set_ready(AdmissionEngine(policy), source)
    server = _serve(state)
    try:
        r = httpx.post(f"{server.url}/validate-pods", json=review_for(POD, uid="v"), timeout=10)
        assert r.json()["response"]["status"]["message"] == (
            "Internal error occurred: webhook pods-validation: RuntimeError: watch cache not synced")
        ready = httpx.get(f"{server.url}/readyz", timeout=5)
        assert (ready.status_code, ready.text) == (503, "not ready: cluster view: RuntimeError: watch cache not synced")
        broken["on"] = False
        assert httpx.post(f"{server.url}/validate-pods", json=review_for(POD, uid="w"), timeout=10).json()[
            "response"]["allowed"] is True
        assert httpx.get(f"{server.url}/readyz", timeout=5).status_code == 200
    finally:
        server.stop()
        state.close()


@contextlib.contextmanager
def _ready_server(policy, view):
    """A real server judging with the seed view; stopped afterwards."""
    state = WebhookState()
    state.set_ready(AdmissionEngine(policy), view)
    server = _serve(state)
    try:
        yield server
    finally:
        server.stop()
        state.close()


def _raw_exchange(port: int, payload: bytes, limit: float = 10) -> bytes:
    """Send ``payload`` on a plain connection and read until the server closes or resets it (at most
    ``limit`` s); what arrived before."""
    chunks = []
    with socket.create_connection(("127.0.0.1", port), timeout=limit) as sock:
        try:
            sock.sendall(payload)
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except (ConnectionResetError, BrokenPipeError):  # closed with our bytes unread: the answer may be lost
            pass
    return b"".join(chunks)


def test_served_by_httptools_on_uvloop_and_malformed_reviews_are_denials_on_the_wire(policy, view):
    """The HTTP stack is httptools on uvloop; the hardening answers hold through it (docs/performance.md "httptools and uvloop, and a second pass on evaluation cost")."""
    import uvloop
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    with _ready_server(policy, view) as server:
        assert issubclass(server.server.config.http_protocol_class, HttpToolsProtocol)
        assert isinstance(server.server.servers[0].get_loop(), uvloop.Loop)
        surrogate = b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "\\ud800"}}'
        no_request = b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}'
        with httpx.Client(base_url=server.url, timeout=10) as http:
            for body, message in ((surrogate, "request.uid must be valid Unicode text (it holds a lone surrogate)"),
                                  (no_request, "request is required: an AdmissionReview carries the object to judge in request "
                                              "(uid, kind, operation, object)")):
                r = http.post("/validate-pods", content=body, headers={"content-type": "application/json"})
                assert r.status_code == 200
                assert r.json()["response"] == {"uid": "", "allowed": False, "status": {
                    "status": "Failure", "message": message, "reason": "BadRequest", "code": 400}}
            chunked = http.post("/validate-pods", content=iter([b"{" + b" " * (2 * 1024 * 1024)] * 2))
            assert chunked.json()["response"]["status"]["message"] == "request body exceeds 3145728 bytes"


def test_oversized_request_headers_are_answered_400_and_closed(policy, view):
    with _ready_server(policy, view) as server:
        refused = b"HTTP/1.1 400 Bad Request\r\n"  # or nothing: a close with unread bytes is a reset
        head = b"POST /validate-pods HTTP/1.1\r\nHost: x\r\n" + b"X-Filler: " + b"a" * (70 * 1024) + b"\r\n"
        answer = _raw_exchange(server.port, head + b"Content-Length: 2\r\n\r\n{}")
        assert answer == b"" or (answer.startswith(refused) and answer.endswith(
            b"\r\n\r\nInvalid HTTP request received.")), answer[:200]
        many = b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 60) for i in range(2000))
        answer = _raw_exchange(server.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n")
        assert answer == b"" or answer.startswith(refused), answer[:200]
        small = _raw_exchange(server.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                              + b"X-Filler: " + b"a" * 8000 + b"\r\n\r\n")
        assert small.startswith(b"HTTP/1.1 200 OK\r\n") and small.endswith(b"\r\n\r\nok")


def test_an_idle_keep_alive_connection_outlives_the_api_servers_idle_timeout(policy, view):
    """kube-apiserver keeps an idle webhook connection 90 s (client-go's transport defaults) and sends the next
    review on it; a server that closes it first races that POST, which fails with EOF (the fault suite saw it).
    So the server keeps idle connections longer: the configured timeout exceeds 90 s, and a connection left
    idle past the old 5 s still carries the next review."""
    import json as _json
    from runtime.webhook.server import DEFAULT_KEEP_ALIVE
    assert DEFAULT_KEEP_ALIVE > 90
    with _ready_server(policy, view) as server:
        body = _json.dumps(review_for(POD, uid="keep")).encode()
        request = (b"POST /validate-pods HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                   b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        with socket.create_connection(("127.0.0.1", server.port), timeout=20) as sock:
            answers = []
            for pause in (0.0, 6.0):
                time.sleep(pause)
                sock.sendall(request)
                data = b""

                def more() -> bytes:
                    chunk = sock.recv(65536)
                    assert chunk, f"the server closed the connection left idle {pause:g} s"
                    return chunk
                while b"\r\n\r\n" not in data:
                    data += more()
                head, rest = data.split(b"\r\n\r\n", 1)
                length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")))
                while len(rest) < length:
                    rest += more()
                answers.append(_json.loads(rest[:length])["response"]["uid"])
        assert answers == ["keep", "keep"]
