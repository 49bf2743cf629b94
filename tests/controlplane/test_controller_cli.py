"""`accelpolicy controller` as a process on the real API server: ``--once`` and leader election."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.controlplane.test_controller import _apply_seed_cluster, _clean, rows

ACCELPOLICY = Path(sys.executable).parent / "accelpolicy"


@pytest.fixture(scope="module")
def seeded(control_plane):
    cluster, kubectl = control_plane
    _clean(kubectl)
    _apply_seed_cluster(kubectl)
    yield cluster, kubectl
    _clean(kubectl)


def run_once(kubeconfig):
    return subprocess.run([str(ACCELPOLICY), "controller", "--kubeconfig", str(kubeconfig), "--once"],
                          capture_output=True, text=True, timeout=120)


def test_once_reconciles_then_finds_nothing_to_do(seeded):
    cluster, kubectl = seeded
    first = run_once(cluster.kubeconfig)
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert "create InstanceType gpustack--nvidia-a10g-linux-amd64" in lines
    assert "apply ResourceFlavor gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d" in lines
    assert "create LocalQueue default/gpustack-fnv64-c4680bb149644f1c" in lines
    assert [r["CPU"] for r in rows(kubectl)] == ["48/72", "0/0", "0/0"]
    second = run_once(cluster.kubeconfig)
    assert second.returncode == 0 and second.stdout == ""
    assert ": 0 writes, 0 errors" in second.stderr


def _holder(kubectl):
    proc = kubectl("get", "lease", "-n", "gpustack-system", "gpustack-operator-worker", "-o", "json", check=False)
    return json.loads(proc.stdout)["spec"].get("holderIdentity") if proc.returncode == 0 else None


def _wait(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def _set_managed(kubectl, value: str) -> None:
    """node-a10g's worker NodeFeature says gpustack.ai/managed=``value``."""
    kubectl("-n", "gpustack-system", "patch", "nodefeature", "node-a10g-gpustack-worker", "--type=merge",
            "-p", json.dumps({"spec": {"labels": {"gpustack.ai/managed": value}}}))


def _stop_and_free(proc, kubectl) -> None:
    """SIGTERM the leader ``proc``: it exits 0 and leaves the Lease without a holder."""
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0
    assert _holder(kubectl) == ""


def test_one_leader_at_a_time_and_handover_on_exit(seeded):
    cluster, kubectl = seeded
    argv = [str(ACCELPOLICY), "controller", "--kubeconfig", str(cluster.kubeconfig), "--coalesce-seconds", "0.1"]
    a = subprocess.Popen(argv + ["--identity", "ctl-a"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    b = None
    try:
        assert _wait(lambda: _holder(kubectl) == "ctl-a")
        b = subprocess.Popen(argv + ["--identity", "ctl-b"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(3)
        assert _holder(kubectl) == "ctl-a" and b.poll() is None
        # the leader reconciles: un-manage node-a10g and watch the table follow
        _set_managed(kubectl, "false")
        assert _wait(lambda: [r["CPU"] for r in rows(kubectl)][:1] == ["48/68"])
        a.send_signal(signal.SIGTERM)
        assert a.wait(20) == 0
        assert _wait(lambda: _holder(kubectl) == "ctl-b", timeout=10)
        _set_managed(kubectl, "true")
        assert _wait(lambda: [r["CPU"] for r in rows(kubectl)][:1] == ["48/72"])
        _stop_and_free(b, kubectl)
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)


def test_a_lost_lease_stops_reconciling_and_the_same_process_leads_again(seeded, tmp_path):
    """docs/availability.md "Availability: admission through faults, and a start that loses nothing" (chaos: apiserver-pause, watch-expiry): a leader whose Lease is taken stops reconciling
    within a renewal period, stays up, campaigns again and leads once the Lease is free (runtime/cli/
    controller.py, runtime/controller/leader.py); no process restart."""
    cluster, kubectl = seeded
    log = tmp_path / "ctl-a.log"
    argv = [str(ACCELPOLICY), "controller", "--kubeconfig", str(cluster.kubeconfig), "--coalesce-seconds", "0.1",
            "--identity", "ctl-a"]
    with log.open("w") as out:
        a = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        assert _wait(lambda: _holder(kubectl) == "ctl-a")
        assert _wait(lambda: "leading; reconciling" in log.read_text())
        now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
        kubectl("-n", "gpustack-system", "patch", "lease", "gpustack-operator-worker", "--type=merge", "-p",
                json.dumps({"spec": {"holderIdentity": "thief", "renewTime": now, "leaseDurationSeconds": 15}}))
        lost = "leader Lease gpustack-system/gpustack-operator-worker lost: reconciling stopped; campaigning again as ctl-a"
        assert _wait(lambda: lost in log.read_text(), timeout=12), log.read_text()[-3000:]
        # not leading: an un-managed node is not acted on while "thief" holds the Lease
        _set_managed(kubectl, "false")
        time.sleep(3)
        assert _holder(kubectl) == "thief" and [r["CPU"] for r in rows(kubectl)][:1] == ["48/72"]
        # the stolen Lease expires (15 s, never renewed): the same process takes it and reconciles again
        assert _wait(lambda: _holder(kubectl) == "ctl-a", timeout=25)
        assert _wait(lambda: [r["CPU"] for r in rows(kubectl)][:1] == ["48/68"])
        assert a.poll() is None
        assert log.read_text().count("leading; reconciling") == 2
        _set_managed(kubectl, "true")
        assert _wait(lambda: [r["CPU"] for r in rows(kubectl)][:1] == ["48/72"])
        _stop_and_free(a, kubectl)
    finally:
        if a.poll() is None:
            a.kill()
            a.wait(10)
