"""Showback end to end (docs/tasks/report-usage.md): the seed's cluster on the local control plane,
`accelpolicy controller` serving its counters on loopback, a real Prometheus (Debian's package) scraping
them every second on 127.0.0.1 with the chart's recording rules, and `accelpolicy usage` over a known
window matching the ledger's ground truth within 1 % per namespace and view.

The script: team-a holds two 25 % slices of node-a10g's A10G and a whole T4 on node-t4-a; team-b a
whole T4 and two shares of another on node-t4-b. A 60-second window opens once the controller counts
them; halfway through one of team-b's shares is deleted. Ground truth per namespace and view: each
charge's fraction of an accelerator (rules' credits / creditsPerAccelerator) times the seconds the
ledger held it inside the window.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from runtime.engine.policy import Policy
from runtime.rules.loader import load_rules
from testing.localcluster.processes import free_port
from tests.controlplane.test_controller import _apply_seed_cluster, _clean
from tests.controlplane.test_metrics_live import CONTROLLER_SERVING, Running
from tests.usagecluster import A10G_POOL, T4_POOL, holder

ACCELPOLICY = Path(sys.executable).parent / "accelpolicy"
RULES = Path(__file__).resolve().parents[2] / "deploy" / "chart" / "prometheus" / "accelpolicy-usage.rules.yaml"
WINDOW = 60.0
CHARGED = "accelpolicy_accelerator_charged_seconds_total"


def _prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        message = "Debian's prometheus is not installed (apt-get install prometheus; .ci/run installs it)"
        if os.environ.get("ACCELPOLICY_REQUIRE_PROMETHEUS") == "1":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return found


class Prometheus:
    """A Prometheus on 127.0.0.1 scraping only ``target`` (a loopback host:port) every second, with the
    chart's recording rules evaluated every second, on a TSDB in ``work``."""

    def __init__(self, work: Path, target: str):
        rules = yaml.safe_load(RULES.read_text())
        for group in rules["groups"]:
            group["interval"] = "1s"
        (work / "rules.yaml").write_text(yaml.safe_dump(rules))
        (work / "prometheus.yml").write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(work / "rules.yaml")],
            "scrape_configs": [{"job_name": "accelpolicy-controller", "static_configs": [{"targets": [target]}]}]}))
        self.url = f"http://127.0.0.1:{free_port()}"
        self.proc = subprocess.Popen(
            [_prometheus_binary(), f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'tsdb'}",
             f"--web.listen-address={self.url.removeprefix('http://')}", "--storage.tsdb.retention.time=1h"],
            stdout=subprocess.DEVNULL, stderr=open(work / "prometheus.log", "w"))

    def query(self, promql: str) -> list:
        import urllib.parse
        import urllib.request

        with urllib.request.urlopen(f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}",
                                    timeout=10) as answer:
            return json.loads(answer.read())["data"]["result"]

    def wait(self, promql: str, timeout: float = 60.0) -> list:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"prometheus exited {self.proc.returncode}"
            try:
                result = self.query(promql)
                if result:
                    return result
            except OSError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"{promql} returned nothing within {timeout}s")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


@pytest.fixture(scope="module")
def running(control_plane, tmp_path_factory):
    cluster, kubectl = control_plane
    _clean(kubectl)
    _apply_seed_cluster(kubectl)
    for ns in ("team-a", "team-b"):
        kubectl("create", "namespace", ns, check=False)
    ctl = Running(["controller", "--kubeconfig", str(cluster.kubeconfig), "--coalesce-seconds", "0.1",
                   "--identity", "usage-test", "--audit-interval", "0", "--metrics-bind-address", "127.0.0.1:0"],
                  CONTROLLER_SERVING)
    prometheus = Prometheus(tmp_path_factory.mktemp("prometheus"), ctl.url.removeprefix("http://").split("/")[0])
    try:
        yield ctl, prometheus, kubectl
    finally:
        prometheus.stop()
        ctl.proc.terminate()
        ctl.proc.wait(20)
        for ns in ("team-a", "team-b"):
            kubectl("delete", "pods", "--all", "-n", ns, "--grace-period=0", "--force", "--wait=false", check=False)
        _clean(kubectl)


def _pods(policy) -> list[dict]:
    return [holder(policy, "slice-1", "team-a", "node-a10g", [(0, 3, 400_000)]),
            holder(policy, "slice-2", "team-a", "node-a10g", [(0, 3, 400_000)]),
            holder(policy, "whole", "team-a", "node-t4-a", [(0, 1, None)]),
            holder(policy, "whole", "team-b", "node-t4-b", [(0, 1, None)]),
            holder(policy, "share-1", "team-b", "node-t4-b", [(1, 2, None)]),
            holder(policy, "share-2", "team-b", "node-t4-b", [(1, 2, None)])]


def _usage(prometheus: Prometheus, start: datetime, end: datetime, *more: str) -> dict:
    done = subprocess.run([str(ACCELPOLICY), "usage", "--prometheus", prometheus.url, "--from", start.isoformat(),
                           "--to", end.isoformat(), "-o", "json", *more], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_usage_matches_the_ledger_within_one_percent(running, tmp_path):
    ctl, prometheus, kubectl = running
    policy = Policy(load_rules())
    share = policy.constants.share / policy.constants.creditsPerAccelerator
    for pod in _pods(policy):   # bound by spec.nodeName: the seed's nodes run no kubelet, nothing is pulled
        pod["spec"]["containers"][0]["image"] = "ubuntu:24.04"
        (tmp_path / "pod.json").write_text(json.dumps({k: v for k, v in pod.items() if k != "status"}))
        kubectl("apply", "-f", str(tmp_path / "pod.json"))
    ctl.wait(lambda: sum(v for (name, labels), v in ctl.samples().items() if name == CHARGED) > 0,
             "the charges counted")
    prometheus.wait(f'{CHARGED}{{namespace="team-b",view="shared"}}')
    time.sleep(2.0)
    start = datetime.now(timezone.utc)
    time.sleep(WINDOW / 2)
    kubectl("delete", "pod", "-n", "team-b", "share-2", "--grace-period=0", "--force", "--wait=true")
    deleted = datetime.now(timezone.utc)
    time.sleep(WINDOW - (deleted - start).total_seconds())
    end = datetime.now(timezone.utc)
    time.sleep(3.0)   # scraped past the window's end
    seconds, held_share = (end - start).total_seconds(), (deleted - start).total_seconds()
    truth = {("team-a", "sliced"): 0.5 * seconds, ("team-a", "exclusive"): seconds,
             ("team-b", "exclusive"): seconds, ("team-b", "shared"): share * (seconds + held_share)}
    report = _usage(prometheus, start, end)
    got: dict[tuple, float] = {}
    for row in report["charged"]:
        got[(row["namespace"], row["view"])] = got.get((row["namespace"], row["view"]), 0.0) + row["hours"] * 3600
    assert set(got) == set(truth)
    for key, want in truth.items():
        assert got[key] == pytest.approx(want, rel=0.01), (key, got[key], want)
    pools = {p["pool"]: p for p in report["pools"]}
    assert pools[A10G_POOL]["installed"] * 3600 == pytest.approx(seconds, rel=0.01)
    assert pools[T4_POOL]["installed"] * 3600 == pytest.approx(5 * seconds, rel=0.01)
    for pool in pools.values():
        assert pool["charged"] + pool["idle"] == pytest.approx(pool["installed"], rel=0.001), pool
    total = report["total"]
    assert total["charged"] + total["idle"] == pytest.approx(total["installed"], rel=0.001)

    saved = tmp_path / "usage.om"   # the same window offline, from the samples Prometheus holds
    _usage(prometheus, start, end, "--save", str(saved))
    offline = subprocess.run([str(ACCELPOLICY), "usage", "--snapshot", str(saved), "--from", start.isoformat(),
                              "--to", end.isoformat(), "-o", "json"], capture_output=True, text=True, timeout=60)
    assert offline.returncode == 0, offline.stderr
    for row, again in zip(report["charged"], json.loads(offline.stdout)["charged"]):
        assert again["hours"] == pytest.approx(row["hours"], rel=0.001), (row, again)

    ratio = prometheus.wait("pool:accelpolicy_accelerators_idle:ratio_rate5m")   # the chart's recording rules
    assert {r["metric"]["pool"] for r in ratio} == {A10G_POOL, T4_POOL}


def test_prometheus_and_the_controller_listen_on_loopback_only(running):
    ctl, prometheus, _ = running
    assert ctl.url.startswith("http://127.0.0.1:") and prometheus.url.startswith("http://127.0.0.1:")
    port = int(prometheus.url.rsplit(":", 1)[1])
    with socket.socket() as sock:   # the same port on another local address is not Prometheus'
        sock.bind(("127.0.0.2", port))
