"""The fault suite's load generator (e2e/chaos/load.py) against a real kube-apiserver (docs/reliability.md "Reliability: the fault suite").

On the bare local control plane (CRDs, no admission webhooks) the generator runs in its own process, as the
kind suite runs it: the creates come at the asked rate; with no webhook configured every create is stored
unjudged and so classed ``unreviewed`` (the sliced Pods unfolded, the Instances undefaulted, even the
requests the rules refuse); every object is deleted ``hold`` seconds later and none is left after it
stops. While kube-apiserver restarts mid-run, the answers it cannot give are ``unavailable``, never a
failed review.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "e2e"))

from chaos.load import FAILED, LOAD_LABEL  # noqa: E402

NS = "chaos-load-live"


def _run_load(cluster, kubectl, out: Path, seconds: float | None, rate: float = 20.0):
    kubectl("create", "namespace", NS, check=False)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "e2e"), str(REPO)])}
    argv = [sys.executable, "-m", "chaos.load", "--kubeconfig", str(cluster.kubeconfig), "--namespace", NS,
            "--run", "live", "--queue", "gpustack-fnv64-c4680bb149644f1c", "--instance-type",
            "gpustack--generic-linux-amd64", "--rate", str(rate), "--hold", "1", "--out", str(out)]
    if seconds is not None:
        argv += ["--seconds", str(seconds)]
    return subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _answers(out: Path) -> tuple[list[dict], dict]:
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    return [e for e in lines if "op" in e], next(e["summary"] for e in lines if "summary" in e)


def _left(kubectl) -> list[str]:
    return kubectl.stdout("get", "pods,instances", "-n", NS, "-l", f"{LOAD_LABEL}=live", "-o", "name").split()


def test_the_load_runs_at_its_rate_and_leaves_nothing(control_plane, tmp_path):
    cluster, kubectl = control_plane
    out = tmp_path / "answers.jsonl"
    proc = _run_load(cluster, kubectl, out, seconds=5)
    log, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, log
    answers, summary = _answers(out)
    creates = [e for e in answers if e["op"] == "create"]
    assert summary["created"] == len(creates) == 100          # 5 s at 20/s, the schedule is the clock's
    # no webhook configured here: everything is stored unjudged, and said so
    assert {e["class"] for e in creates} == {"unreviewed"}
    assert {e["mix"] for e in creates} == {"pod-sliced", "pod-invalid", "instance", "instance-privileged"}
    assert len([e for e in creates if e["class"] in FAILED]) == 100
    deletes = [e for e in answers if e["op"] == "delete"]
    assert {e["name"] for e in deletes} == {e["name"] for e in creates}
    assert {e["class"] for e in deletes} == {"ok"}
    assert _left(kubectl) == []


def test_an_api_server_restart_reads_unavailable_not_failed(control_plane, tmp_path):
    cluster, kubectl = control_plane
    out = tmp_path / "answers.jsonl"
    proc = _run_load(cluster, kubectl, out, seconds=None, rate=10)
    try:
        time.sleep(3)
        t0 = time.time()
        cluster.restart_apiserver(kill=True)
        t1 = time.time()
        time.sleep(4)
    finally:
        proc.send_signal(signal.SIGTERM)
        log, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, log
    answers, _ = _answers(out)
    creates = [e for e in answers if e["op"] == "create"]
    during = {e["class"] for e in creates if t0 <= e["t"] <= t1}
    assert "unavailable" in during, during
    assert {e["class"] for e in creates} <= {"unreviewed", "unavailable", "skipped"}
    assert [e["class"] for e in creates if e["t"] > t1 + 2][-5:] == ["unreviewed"] * 5   # answering again
    assert _left(kubectl) == []
