"""The agent's probe endpoints (runtime/agent/health.py) and the reconcile hook that feeds them."""
from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from runtime.agent.health import PassClock, serve_health


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def served():
    clock = PassClock(stale_seconds=60)
    server = serve_health(clock, host="127.0.0.1", port=0)
    yield clock, server.server_address[1]
    server.shutdown()


def test_live_while_starting_ready_only_after_a_good_pass(served):
    clock, port = served
    assert _get(port, "/healthz") == (200, "starting\n")
    assert _get(port, "/readyz") == (503, "no reconcile pass yet\n")
    clock.passed(False)
    assert _get(port, "/readyz") == (503, "last pass failed (see the log)\n")
    assert _get(port, "/healthz") == (200, "last pass 0s ago\n")
    clock.passed(True)
    assert _get(port, "/readyz") == (200, "last pass succeeded\n")
    assert _get(port, "/metrics")[0] == 404


def test_not_live_when_the_loop_stalls(served):
    clock, port = served
    clock.passed(True)
    clock.last_end -= 61
    assert _get(port, "/healthz") == (503, "no reconcile pass for 61s (limit 60s)\n")


def test_reconcile_reports_each_pass_to_the_hook():
    from probes.backend import select_backend
    from runtime.agent.runner import NodeAgent
    from runtime.cli.common import load_policy
    from tests.seedfiles import REPO

    policy = load_policy(None)
    probe = select_backend("fake", str(REPO / "probes" / "recorded" / "node-a10g.yaml"))
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a10g", "uid": "", "labels": {}},
            "status": {"capacity": {"cpu": "4"}}}
    agent = NodeAgent(policy, probe, "node-a10g", node=node, allocation_source="annotation")
    seen: list[bool] = []
    agent.on_pass = seen.append
    assert agent.reconcile(dry_run=True) is not None
    agent.backend = None  # the next pass fails inside plan()
    assert agent.reconcile(dry_run=True) is None
    assert seen == [True, False]
