"""LocalCluster starts, serves, and leaves no process or directory behind, also when start fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from testing.localcluster import Kubectl, LocalCluster, LocalClusterError


def processes_mentioning(text: str) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if text in (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    pids.append(int(d.name))
            except OSError:
                pass
    return pids


def test_start_serve_stop_leaves_nothing(control_plane):
    # control_plane: the binaries exist (else that fixture fails with "run make controlplane")
    with LocalCluster() as cluster:
        workdir = cluster.workdir
        assert cluster.server.startswith("https://127.0.0.1:") and cluster.start_seconds > 0
        assert processes_mentioning(str(workdir)), "etcd/kube-apiserver should run with files in the workdir"
        kubectl = Kubectl(cluster.kubeconfig)
        assert kubectl.stdout("get", "namespace", "default", "-o", "jsonpath={.status.phase}") == "Active"
        assert kubectl.stdout("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}") == "accelpolicy-admin"
        version = kubectl.stdout("version", "-o", "json")
        assert '"gitVersion": "v1.37.2"' in version
    assert processes_mentioning(str(workdir)) == []
    assert not workdir.exists()


def test_failed_start_cleans_up(control_plane, tmp_path):
    workdir = tmp_path / "cp"
    cluster = LocalCluster(workdir=workdir, extra_apiserver_args=["--no-such-flag=1"], start_timeout=60)
    with pytest.raises(LocalClusterError) as e:
        cluster.start()
    assert "kube-apiserver exited with code" in str(e.value)
    assert "no-such-flag" in str(e.value)  # the log tail explains why
    assert processes_mentioning(str(workdir)) == []  # etcd was stopped too
    assert (workdir / "kube-apiserver.log").exists()  # a given workdir is kept for post-mortems
    assert not cluster.running


def test_scheduler_binds_a_pod_to_a_node(control_plane):
    """With scheduler=True a Pod is bound to a (kubelet-less) Node object by kube-scheduler."""
    import json
    import time

    with LocalCluster(scheduler=True) as cluster:
        kubectl = Kubectl(cluster.kubeconfig)
        kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-sched",
                                                              "labels": {"kubernetes.io/hostname": "node-sched"}}}))
        kubectl("patch", "node", "node-sched", "--subresource=status", "--type=merge", "-p", json.dumps({"status": {
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "fake",
                            "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}))
        kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "main", "image": "ubuntu:24.04",
                                     "resources": {"requests": {"cpu": "1"}}}]}}))
        deadline = time.monotonic() + 60
        node = ""
        while time.monotonic() < deadline and not node:
            node = kubectl.stdout("get", "pod", "p", "-n", "default", "-o", "jsonpath={.spec.nodeName}")
            time.sleep(0.5)
        assert node == "node-sched", cluster.logs().get("kube-scheduler")
        assert processes_mentioning(str(cluster.workdir))
        workdir = cluster.workdir
    assert processes_mentioning(str(workdir)) == []
