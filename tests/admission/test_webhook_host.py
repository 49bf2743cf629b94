"""The one webhook host (runtime/webhook/host.py): where a review is judged (on the event loop when its view is
at hand, in the worker pool otherwise or when it takes longer than the inline slice, the answer the same),
the heap settled at each install, and a replaced generation freed without the cycle collector."""
from __future__ import annotations

import gc
import ssl
import threading

import httpx
import pytest

from runtime.engine.admission import AdmissionEngine, admission_view, review_for
from runtime.engine.policy import Policy
from runtime.rules.loader import load_rules
from runtime.snapshots import load_snapshot
from runtime.webhook.app import WebhookState
from runtime.webhook.host import ServingOptions, WebhookServer
from runtime.webhook.server import self_signed
from tests.builders import pod

SEED = "tests/fixtures/seed/common"
QUEUE = {"kueue.x-k8s.io/queue-name": "gpustack-fnv64-c4680bb149644f1c"}
SLICE = {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "20"}
TWO_FAMILIES = {"nvidia.com/gpu": "1", "nvidia.com/gpu.shared": "2"}


class Recording(WebhookState):
    """A WebhookState that records the thread each review was judged on."""

    def decide(self, data, name, cancel=None, served=None, view=None):
        self.threads = getattr(self, "threads", []) + [threading.current_thread().name]
        return super().decide(data, name, cancel, served, view)


@pytest.fixture(scope="module")
def generation():
    policy = Policy(load_rules())
    return AdmissionEngine(policy), admission_view(policy, load_snapshot([SEED]))


@pytest.fixture
def serve(tmp_path, generation):
    servers, clients = [], []

    def start(view=None, inline_seconds=None) -> tuple[WebhookServer, httpx.Client]:
        tls = self_signed(tmp_path / f"tls{len(servers)}")
        engine, fixed = generation
        server = WebhookServer(engine, ServingOptions(port=0), tls["cert"], tls["key"], state_class=Recording)
        if inline_seconds is not None:
            server.state.inline_seconds = inline_seconds
        server.install(engine, view or fixed)
        servers.append(server.serve())
        clients.append(httpx.Client(base_url=f"https://127.0.0.1:{server.port}", timeout=20,
                                    verify=ssl.create_default_context(cafile=str(tls["ca"]))))
        return server, clients[-1]

    yield start
    for client in clients:   # a kept-alive connection would hold the server's graceful stop to its timeout
        client.close()
    for server in servers:
        server.stop()
    gc.unfreeze()   # the installs froze this test process's heap


def _answers(client: httpx.Client) -> list[dict]:
    mutated = review_for(pod("sliced", labels=QUEUE, limits=SLICE), uid="u-1")
    denied = review_for(pod("two-families", labels=QUEUE, limits=TWO_FAMILIES), uid="u-2")
    return [client.post("/mutate-pods", json=mutated).json()["response"],
            client.post("/validate-pods", json=denied).json()["response"]]


def test_a_review_with_its_view_at_hand_is_judged_on_the_event_loop_without_a_pool(serve):
    server, client = serve()
    answers = _answers(client)
    assert answers[0]["allowed"] is True and answers[0]["patchType"] == "JSONPatch"
    assert answers[1]["status"]["message"] == ('Pod "two-families" is invalid: spec: Forbidden: a Pod may request '
                                               "only one accelerator family, found [exclusive shared]")
    assert server.state.threads == [server.thread.thread.name] * 2
    assert server.state._pool is None   # never created: no review needed it


def test_a_review_past_the_inline_slice_is_judged_again_in_the_pool_with_the_same_answer(serve):
    inline, inline_client = serve()
    pooled, pooled_client = serve(inline_seconds=1e-9)   # every inline attempt stops at its first check
    assert _answers(pooled_client) == _answers(inline_client)
    loop = pooled.thread.thread.name
    assert [name if name == loop else name.rsplit("_", 1)[0] for name in pooled.state.threads] == [
        loop, "admission", loop, "admission"]


def test_a_view_that_must_be_asked_for_is_judged_in_the_pool(serve, generation):
    asked = []

    def source():   # a plain callable: it may block (a view to build), so never on the event loop
        asked.append(threading.current_thread().name)
        return generation[1]

    server, client = serve(view=source)
    assert _answers(client)[0]["allowed"] is True
    assert [name.rsplit("_", 1)[0] for name in server.state.threads + asked] == ["admission"] * 4


def test_installing_a_generation_freezes_the_heap(generation):
    gc.unfreeze()
    server = WebhookServer(generation[0])
    try:
        server.install(*generation)
        assert gc.get_freeze_count() > 10_000 and server.state.ready
    finally:
        gc.unfreeze()


def test_a_replaced_generation_holds_no_reference_cycles(generation):
    """Frozen objects are never walked by the cycle collector: a generation the next reload replaces must
    be freed by reference counting alone (runtime/webhook/host.py). Each of three rounds builds and drops one
    (rules, engine, view); garbage of other threads can only add, so one round at 0 is the answer."""
    left = []
    for _ in range(3):
        gc.collect()
        gc.disable()
        try:
            policy = Policy(load_rules())
            parts = [AdmissionEngine(policy), admission_view(policy, load_snapshot([SEED]))]
            del policy, parts
            left.append(gc.collect())
        finally:
            gc.enable()
    assert min(left) == 0, left
