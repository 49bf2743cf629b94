"""Shared machinery of the kind tests: run commands, read the guard's counters, bring a cluster up.

The cluster: ``$ACCELPOLICY_KIND_TEST_CLUSTER`` (default accelpolicy-test), 1 control-plane +
``$ACCELPOLICY_KIND_TEST_WORKERS`` workers (default 3), made by kind-up.sh and deleted by kind-down.sh.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
K8S_VERSION = next(line.split()[1] for line in (HERE.parent / "controlplane" / "go.mod").read_text().splitlines()
                   if line.split()[:1] == ["k8s.io/kubernetes"] or line.split()[:2] == ["require", "k8s.io/kubernetes"])
CLUSTER = os.environ.get("ACCELPOLICY_KIND_TEST_CLUSTER", "accelpolicy-test")
WORKERS = int(os.environ.get("ACCELPOLICY_KIND_TEST_WORKERS", "3"))
SERVICE_BLACKHOLE = "10.96.0.0/12"
LEAVING_COUNTERS = ("IPv4 container address leaving the machine", "IPv6 container address leaving the machine",
                    "cluster Service/Pod range leaving the machine")


def sh(*args: str, check: bool = True, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    """Run a command, output captured as text; raises CalledProcessError when ``check`` and it fails."""
    return subprocess.run(list(args), capture_output=True, text=True, check=check, timeout=timeout, **kw)


def guard_counters() -> dict[str, int]:
    """Packets counted by each rule of the guard table, keyed by the rule's comment (dockerd.sh counters)."""
    out = sh("bash", str(HERE / "dockerd.sh"), "counters").stdout
    return {comment: int(packets) for packets, comment in (line.split("\t", 1) for line in out.splitlines())}


def docker_reachable() -> bool:
    """Whether ``docker info`` answers (a daemon is reachable on the default socket)."""
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0


@dataclass
class KindCluster:
    """A running test cluster: its kubeconfig, node names (sorted), create time in seconds and the
    guard's packet counters before and after kind-up.sh."""
    name: str
    kubeconfig: Path
    kubectl_bin: str
    nodes: list[str]
    create_seconds: float
    counters_before: dict[str, int]
    counters_after: dict[str, int]

    def kubectl(self, *args: str) -> str:
        return sh(self.kubectl_bin, "--kubeconfig", str(self.kubeconfig), *args).stdout

    def kubectl_json(self, *args: str) -> dict:
        return json.loads(self.kubectl(*args, "-o", "json"))

    def node_exec(self, node: str, *args: str) -> str:
        return sh("docker", "exec", node, *args).stdout


class ClusterUnavailable(Exception):
    """Why no cluster can be made here (docker cannot start, node image not built): a skip reason."""


def start_cluster(name: str = CLUSTER, workers: int = WORKERS) -> KindCluster:
    """Start the guarded docker daemon and create cluster ``name`` with ``workers`` workers (deleting a
    leftover one of that name first).

    Raises :class:`ClusterUnavailable` (a reason to skip) or RuntimeError (kind-up.sh failed; output).
    """
    if os.geteuid() != 0:
        raise ClusterUnavailable("kind: dockerd.sh needs root (sysctl, nftables, dockerd)")
    start = subprocess.run(["bash", str(HERE / "dockerd.sh"), "start"], capture_output=True, text=True, timeout=900)
    if start.returncode != 0:
        raise ClusterUnavailable(f"kind: docker cannot be started here: {start.stderr.strip()[-400:]}")
    tag = sh("bash", str(HERE / "node-image.sh"), "--print-tag").stdout.strip()
    if subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode != 0:
        raise ClusterUnavailable(f"kind: node image {tag} is not built; run `make kind-images` (cold ~15-30 min)")
    tools = dict(line.split(" ", 1) for line in sh("bash", str(HERE / "build-tools.sh"), "--print").stdout.splitlines())
    stop_cluster(name)
    before = guard_counters()
    t0 = time.monotonic()
    up = subprocess.run(["bash", str(HERE / "kind-up.sh"), "--name", name, "--workers", str(workers)],
                        capture_output=True, text=True, timeout=900)
    seconds = time.monotonic() - t0
    if up.returncode != 0:
        stop_cluster(name)
        raise RuntimeError(f"kind-up.sh failed ({up.returncode}):\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}")
    after = guard_counters()
    nodes = sh(tools["kind"], "get", "nodes", "--name", name).stdout.split()
    print(f"\nkind-up: {len(nodes)} nodes in {seconds:.1f}s\n{up.stdout}")
    return KindCluster(name, Path(up.stdout.strip().splitlines()[-1]), tools["kubectl"], sorted(nodes),
                       seconds, before, after)


def stop_cluster(name: str = CLUSTER) -> None:
    """Delete cluster ``name`` (no error when there is none)."""
    sh("bash", str(HERE / "kind-down.sh"), "--name", name, check=False, timeout=300)
