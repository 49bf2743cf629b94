"""A budget stop under load (docs/rule-authoring.md "Run-time budget"): the real HTTPS server with two
workers; seven client processes (benchmarks/loadgen.py: a new Pod in every review) send rule-1
denials back to back while this process sends reviews that spend their whole CEL budget. Every
ordinary review is answered (errors: 0) with its own verdict, none times out, and each costly one is
answered 500 ``budget-exceeded``. The others' p99 before and during is printed (``-s``), not asserted:
the machine is shared."""
from __future__ import annotations

import re
import threading

import httpx

import benchmarks.loadgen as loadgen
from runtime.engine.admission import AdmissionEngine, review_for
from runtime.engine.policy import Policy
from runtime.rules.loader import load_rules
from runtime.webhook.app import WebhookState, build_app
from runtime.webhook.server import ServerThread, self_signed
from tests.admission.test_cel_budget import _pod, _rules, view  # noqa: F401  (view: the fixture)

OTHERS = 7     # client processes besides the costly one: 8 clients in all
COSTLY = 3     # reviews the costly client sends, one after the other


def _count(metrics: str, verdict: str) -> int:
    found = re.search(r'accelpolicy_admission_reviews_total\{verdict="%s",webhook="pods-validation"\} ([0-9.]+)'
                      % re.escape(verdict), metrics)
    return int(float(found.group(1))) if found else 0


def test_a_budget_stop_leaves_every_other_review_answered(tmp_path, view):  # noqa: F811
    tls = self_signed(tmp_path / "tls")
    state = WebhookState(workers=2)
    state.set_ready(AdmissionEngine(Policy(load_rules(_rules(tmp_path, cost_limit=50_000)))), view)
    server = ServerThread(build_app(state, {"/validate-pods": "pods-validation"}), str(tls["cert"]),
                          str(tls["key"])).start()
    try:
        usual = loadgen.run(server.url, str(tls["ca"]), "/validate-pods", "rule1", "closed", 3, clients=OTHERS)
        during: dict = {}
        load = threading.Thread(target=lambda: during.update(loadgen.run(
            server.url, str(tls["ca"]), "/validate-pods", "rule1", "closed", 6, clients=OTHERS)))
        load.start()
        costly = []
        with httpx.Client(timeout=20, verify=str(tls["ca"])) as http:
            while load.is_alive() and len(costly) < COSTLY:
                metrics = http.get(f"{server.url}/metrics").text
                if _count(metrics, "invalid") <= usual["count"] + OTHERS * 60:   # the second load not yet running
                    load.join(0.1)
                else:
                    costly.append(http.post(f"{server.url}/validate-pods", json=review_for(
                        _pod(f"loop-{len(costly)}", "loop"), uid=f"c{len(costly)}")).json()["response"])
            load.join(120)
            metrics = http.get(f"{server.url}/metrics").text
    finally:
        server.stop()
        state.close()
    print(f"\nothers: {usual['count']} + {during['count']} answered, {usual['errors']} + {during['errors']} errors; "
          f"p99 {usual['p99_ms']:.1f} ms before, {during['p99_ms']:.1f} ms during the costly reviews")
    assert (usual["errors"], during["errors"]) == (0, 0)
    assert [(a["allowed"], a["status"]["code"], a["status"]["reason"]) for a in costly] == [
        (False, 500, "InternalError")] * COSTLY
    assert _count(metrics, "budget-exceeded") == COSTLY and _count(metrics, "timeout") == 0
    assert _count(metrics, "invalid") == usual["count"] + during["count"] + 2 * OTHERS * 30   # with the warm-ups
