"""Issue 14's "done when": `accelpolicy controller --log-format json` on the local control plane,
scraped over HTTP during the seed walkthrough.

Step 2 (node-a10g un-managed) shows in the CPU gauge of the generic type (remaining 68 cores, as the
seed's step2-after-unmanage table prints ``48/68``); step 3 (the agent's ledger holds the 20 % slice
of sliced-demo) shows in the A10G ``sl`` gauge (remaining 80 percent). Every stderr line of the
process is one JSON object. Each check polls its scrape with a deadline.
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

from tests.controlplane.test_controller import A10G_TYPE, COMMON, GENERIC_TYPE, _apply_seed_cluster, _clean

ACCELPOLICY = Path(sys.executable).parent / "accelpolicy"
SERVING = re.compile(r"serving /metrics on (http://127\.0\.0\.1:\d+/metrics)")


class Running:
    """The controller process, its stderr lines (read in a thread) and its /metrics URL."""

    def __init__(self, kubeconfig: Path):
        argv = [str(ACCELPOLICY), "controller", "--kubeconfig", str(kubeconfig), "--coalesce-seconds", "0.1",
                "--identity", "metrics-test", "--audit-interval", "0", "--log-format", "json",
                "--metrics-bind-address", "127.0.0.1:0"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(self.proc.stderr), daemon=True).start()
        self.url = self.wait(lambda: next((m.group(1) for line in list(self.lines)
                                           if (m := SERVING.search(line))), None), "the /metrics address logged")

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
    ctl = Running(cluster.kubeconfig)
    try:
        yield ctl, kubectl
    finally:
        ctl.proc.terminate()
        ctl.proc.wait(20)
        _clean(kubectl)


def _managed(kubectl, value: str) -> None:
    kubectl("-n", "gpustack-system", "patch", "nodefeature", "node-a10g-gpustack-worker", "--type=merge",
            "-p", json.dumps({"spec": {"labels": {"gpustack.ai/managed": value}}}))


def _ledger(kubectl, **entry) -> None:
    doc = next(d for d in yaml.safe_load_all((COMMON / "devices.yaml").read_text())
               if d and d["metadata"]["name"] == "node-a10g")
    doc["status"]["groups"][0]["accelerators"][0].update(entry)
    kubectl("patch", "devices.worker.gpustack.ai", "node-a10g", "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": doc["status"]}))


def test_step1_views_and_the_controller_counters(running):
    ctl, _ = running
    ctl.wait_gauge("accelpolicy_instancetype_remaining", 72, instancetype=GENERIC_TYPE, view="cpu")
    ctl.wait_gauge("accelpolicy_instancetype_capacity", 100, instancetype=A10G_TYPE, view="sl")
    ctl.wait_gauge("accelpolicy_instancetype_remaining", 1, instancetype=A10G_TYPE, view="ex")
    samples = ctl.wait(lambda: (s := ctl.samples())[("accelpolicy_reconcile_seconds_count", ())] >= 1 and s,
                       "a reconcile observed")
    assert samples[("accelpolicy_leader", ())] == 1
    nodes = [d for d in yaml.safe_load_all((COMMON / "nodes.yaml").read_text()) if d and d["kind"] == "Node"]
    assert samples[("accelpolicy_cache_objects", (("kind", "Node"),))] == len(nodes) == 4
    assert samples[("accelpolicy_api_writes_total", (("kind", "InstanceType"), ("verb", "create")))] == 3
    assert samples[("accelpolicy_rules_generation", ())] >= 1
    assert ("accelpolicy_watch_relists_total", (("kind", "NodeFeature"),)) in samples


def test_step2_node_removal_shows_in_the_cpu_gauge(running):
    ctl, kubectl = running
    _managed(kubectl, "false")
    try:
        ctl.wait_gauge("accelpolicy_instancetype_remaining", 68, instancetype=GENERIC_TYPE, view="cpu")
        ctl.wait_gauge("accelpolicy_instancetype_capacity", 0, instancetype=A10G_TYPE, view="ex")
    finally:
        _managed(kubectl, "true")
    ctl.wait_gauge("accelpolicy_instancetype_remaining", 72, instancetype=GENERIC_TYPE, view="cpu")


def test_step3_slice_shows_in_the_a10g_sliced_gauge(running):
    ctl, kubectl = running
    _ledger(kubectl, mode=3, allocated=320000, remaining=1280000, allocatedSlices=1)
    try:
        ctl.wait_gauge("accelpolicy_instancetype_remaining", 80, instancetype=A10G_TYPE, view="sl")
        ctl.wait_gauge("accelpolicy_instancetype_remaining", 0, instancetype=A10G_TYPE, view="ex")
        assert ctl.gauge("accelpolicy_instancetype_capacity", instancetype=A10G_TYPE, view="sl") == 100
    finally:
        _ledger(kubectl)
    ctl.wait_gauge("accelpolicy_instancetype_remaining", 100, instancetype=A10G_TYPE, view="sl")


def test_every_log_line_is_json(running):
    ctl, _ = running
    ctl.wait(lambda: any("reconcile:" in line for line in ctl.lines), "a reconcile summary line")
    records = [json.loads(line)["record"] for line in list(ctl.lines)]
    summary = next(r for r in records if r["message"].startswith("reconcile:"))
    assert set(summary["extra"]) == {"reconcile_seconds", "writes", "errors"}
    assert {r["level"]["name"] for r in records} <= {"DEBUG", "INFO", "WARNING", "ERROR"}
