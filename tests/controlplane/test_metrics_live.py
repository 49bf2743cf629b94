"""What docs/observability.md "Observability: metrics, logs, Events and the dashboard" promises, live: `accelpolicy controller --log-format json` and node-a10g's
`accelpolicy agent --log-format json` (fake backend: the node's recorded facts) on the local control
plane, both scraped over HTTP during the seed walkthrough.

Step 2 (node-a10g un-managed) shows in the CPU gauge of the generic type (remaining 68 cores, as the
seed's step2-after-unmanage table prints ``48/68``). Step 3: a Pod on node-a10g carries sliced-demo's
20 % slice in its allocation annotation; the agent's ledger gauges read mode 3 and 1,280,000 credits,
the Devices status it writes reaches the controller, and the A10G ``sl`` gauge reads remaining 80. Every
stderr line of both processes is one JSON object. Each check polls its scrape with a deadline.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from runtime.engine.policy import Policy
from runtime.reload.watcher import content_hash, generation_id
from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules
from tests.controlplane.test_controller import A10G_TYPE, COMMON, GENERIC_TYPE, _apply_seed_cluster, _clean

ACCELPOLICY = Path(sys.executable).parent / "accelpolicy"
RECORDED = Path(__file__).resolve().parents[2] / "probes" / "recorded"
CONTROLLER_SERVING = re.compile(r"serving /metrics on http://127\.0\.0\.1:(\d+)/metrics")
AGENT_SERVING = re.compile(r"serving /healthz, /readyz and /metrics on port (\d+)")
A10G = "GPU-e0587d2e-127c-4fb8-e2c1-6e517529f575"
LEDGER = (("accelerator", A10G), ("group", "a10g"), ("node", "node-a10g"))


class Running:
    """A process, its stderr lines (read in a thread) and its /metrics URL (port from its log)."""

    def __init__(self, argv: list[str], serving: re.Pattern):
        self.proc = subprocess.Popen([str(ACCELPOLICY), *argv, "--log-format", "json"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(self.proc.stderr), daemon=True).start()
        port = self.wait(lambda: next((m.group(1) for line in list(self.lines) if (m := serving.search(line))), None),
                         "the /metrics port logged")
        self.url = f"http://127.0.0.1:{port}/metrics"

    def wait(self, probe, what: str, timeout: float = 30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = probe()
            if got:
                return got
            assert self.proc.poll() is None, f"controller exited {self.proc.returncode}: {self.lines[-5:]}"
            time.sleep(0.1)
        raise AssertionError(f"{what} not seen within {timeout}s; last lines: {self.lines[-5:]}")

    def samples(self) -> dict[tuple, float]:
        """One scrape: (sample name, sorted label pairs) -> value."""
        text = urllib.request.urlopen(self.url, timeout=5).read().decode()
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}

    def gauge(self, name: str, **labels) -> float | None:
        return self.samples().get((name, tuple(sorted(labels.items()))))

    def wait_gauge(self, name: str, want: float, **labels) -> None:
        self.wait(lambda: self.gauge(name, **labels) == want, f"{name}{labels} == {want}")


@pytest.fixture(scope="module")
def running(control_plane):
    cluster, kubectl = control_plane
    _clean(kubectl)
    _apply_seed_cluster(kubectl)
    ctl = Running(["controller", "--kubeconfig", str(cluster.kubeconfig), "--coalesce-seconds", "0.1",
                   "--identity", "metrics-test", "--audit-interval", "0", "--metrics-bind-address", "127.0.0.1:0"],
                  CONTROLLER_SERVING)
    agent = Running(["agent", "--node", "node-a10g", "--kubeconfig", str(cluster.kubeconfig), "--backend", "fake",
                     "--facts", str(RECORDED / "node-a10g.yaml"), "--allocation-source", "annotation",
                     "--interval", "2", "--health-port", "0"], AGENT_SERVING)
    try:
        yield ctl, agent, kubectl
    finally:
        for proc in (agent.proc, ctl.proc):
            proc.terminate()
            proc.wait(20)
        kubectl("delete", "pod", "-n", "default", "sliced-demo-pod", "--ignore-not-found", "--wait=false")
        _clean(kubectl)


def _managed(kubectl, value: str) -> None:
    kubectl("-n", "gpustack-system", "patch", "nodefeature", "node-a10g-gpustack-worker", "--type=merge",
            "-p", json.dumps({"spec": {"labels": {"gpustack.ai/managed": value}}}))


def _slice_pod(policy_key: str) -> dict:
    """sliced-demo's Pod as the device plugin leaves it: bound to node-a10g, its 20 % slice (320,000
    credits, mode 3) in the allocation annotation (docs/agent.md "The Devices object and its ledger")."""
    allocation = {"main": [{"id": "a10g", "manufacturer": "nvidia",
                            "accelerators": [{"id": A10G, "index": 0, "mode": 3, "allocated": 320000}]}]}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "sliced-demo-pod", "namespace": "default",
                         "annotations": {policy_key: json.dumps(allocation)}},
            "spec": {"nodeName": "node-a10g", "containers": [{"name": "main", "image": "ubuntu:24.04"}]}}


def test_step1_views_and_the_controller_counters(running):
    ctl, _, _ = running
    ctl.wait_gauge("accelpolicy_instancetype_remaining", 72, instancetype=GENERIC_TYPE, view="cpu")
    ctl.wait_gauge("accelpolicy_instancetype_capacity", 100, instancetype=A10G_TYPE, view="sl")
    ctl.wait_gauge("accelpolicy_instancetype_remaining", 1, instancetype=A10G_TYPE, view="ex")
    samples = ctl.wait(lambda: (s := ctl.samples())[("accelpolicy_reconcile_seconds_count", ())] >= 1 and s,
                       "a reconcile observed")
    assert samples[("accelpolicy_leader", ())] == 1
    nodes = [d for d in yaml.safe_load_all((COMMON / "nodes.yaml").read_text()) if d and d["kind"] == "Node"]
    assert samples[("accelpolicy_cache_objects", (("kind", "Node"),))] == len(nodes) == 4
    assert samples[("accelpolicy_api_writes_total", (("kind", "InstanceType"), ("verb", "create")))] == 3
    generations = [labels for name, labels in samples if name == "accelpolicy_rules_generation"]
    assert generations == [(("generation", generation_id(content_hash(DEFAULT_RULES_DIR))),)]   # by content hash
    assert samples[("accelpolicy_rules_generation", generations[0])] == 1
    assert ("accelpolicy_watch_relists_total", (("kind", "NodeFeature"),)) in samples


def test_step2_node_removal_shows_in_the_cpu_gauge(running):
    ctl, _, kubectl = running
    _managed(kubectl, "false")
    try:
        ctl.wait_gauge("accelpolicy_instancetype_remaining", 68, instancetype=GENERIC_TYPE, view="cpu")
        ctl.wait_gauge("accelpolicy_instancetype_capacity", 0, instancetype=A10G_TYPE, view="ex")
    finally:
        _managed(kubectl, "true")
    ctl.wait_gauge("accelpolicy_instancetype_remaining", 72, instancetype=GENERIC_TYPE, view="cpu")


def test_step3_slice_shows_in_the_agent_ledger_and_the_a10g_sliced_gauge(running, tmp_path):
    ctl, agent, kubectl = running
    agent.wait_gauge("accelpolicy_agent_ledger_remaining_credits", 1600000, **dict(LEDGER))
    key = Policy(load_rules()).key("allocation")
    (tmp_path / "pod.json").write_text(json.dumps(_slice_pod(key)))
    kubectl("apply", "-f", str(tmp_path / "pod.json"))
    try:
        agent.wait_gauge("accelpolicy_agent_accelerator_mode", 3, **dict(LEDGER))
        agent.wait_gauge("accelpolicy_agent_ledger_remaining_credits", 1280000, **dict(LEDGER))
        assert agent.gauge("accelpolicy_agent_accelerator_healthy", **dict(LEDGER)) == 1
        ctl.wait_gauge("accelpolicy_instancetype_remaining", 80, instancetype=A10G_TYPE, view="sl")
        ctl.wait_gauge("accelpolicy_instancetype_remaining", 0, instancetype=A10G_TYPE, view="ex")
        assert ctl.gauge("accelpolicy_instancetype_capacity", instancetype=A10G_TYPE, view="sl") == 100
    finally:
        kubectl("delete", "pod", "-n", "default", "sliced-demo-pod", "--grace-period=0", "--force", "--wait=false")
    ctl.wait_gauge("accelpolicy_instancetype_remaining", 100, instancetype=A10G_TYPE, view="sl")
    agent.wait_gauge("accelpolicy_agent_ledger_remaining_credits", 1600000, **dict(LEDGER))
    assert agent.samples()[("accelpolicy_agent_probe_seconds_count", ())] >= 2


def test_every_log_line_is_json(running):
    ctl, agent, _ = running
    ctl.wait(lambda: any("reconcile:" in line for line in ctl.lines), "a reconcile summary line")
    records = [json.loads(line)["record"] for line in list(ctl.lines)]
    summary = next(r for r in records if r["message"].startswith("reconcile:"))
    assert set(summary["extra"]) == {"reconcile_seconds", "cpu_seconds", "writes", "errors"}
    assert {r["level"]["name"] for r in records} <= {"DEBUG", "INFO", "WARNING", "ERROR"}
    agent_records = [json.loads(line)["record"] for line in list(agent.lines)]
    assert any(r["message"] == "wrote Devices node-a10g status" for r in agent_records)
