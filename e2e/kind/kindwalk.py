"""The seed walkthrough's driver on a kind cluster with accelpolicy installed by its chart (docs/tasks/e2e.md "The offline kind cluster").

On ``--cluster=local`` :class:`testing.localcluster.walkthrough.Walkthrough` makes the seed's four Nodes
and runs the agents, the controller and the device-plugin stand-in as processes. On kind all of that is
already in the cluster (e2e/kind/stack.py: the chart's Deployment and DaemonSet, the stand-ins registered
with the kubelets), so :class:`KindWalkthrough` only

* maps the seed's node names to kind's (:attr:`kind_node`, stack.seed_mapping) in every seed line, table
  and object it is given (``node-a10g`` -> ``accelpolicy-e2e-worker``, and so ``node-a10g-gpustack-worker``
  -> ``accelpolicy-e2e-worker-gpustack-worker``);
* runs every seed line verbatim otherwise: ``kubectl -n gpustack-system rollout restart
  deploy/gpustack-operator-worker`` is the real rollout of the chart's Deployment here.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

from testing.localcluster.binaries import LocalClusterError
from testing.localcluster.walkthrough import MANIFESTS, Walkthrough

SEED_NODE = re.compile(r"\bnode-(?:cpu|a10g|t4-a|t4-b)\b")


class KindWalkthrough(Walkthrough):
    """:class:`Walkthrough` over an installed kind stack; ``kind_node`` maps seed node -> kind node."""

    simulated_rollout = False   # the chart's Deployment is real: `rollout restart` runs as written
    seed_cpu_capacity = False   # each kubelet reports this machine's cores, not the seed node's

    def __init__(self, kubeconfig: Path, kind_node: dict[str, str], **kw):
        super().__init__(kubeconfig, webhooks=True, **kw)
        self.kind_node = dict(kind_node)
        # the seed's manifests with kind's node names (pinned-demo.yaml pins spec.nodeName: node-t4-b)
        self.manifests = self.workdir / "manifests"
        self.manifests.mkdir(exist_ok=True)
        for path in MANIFESTS.iterdir():
            if path.is_file():
                (self.manifests / path.name).write_text(self.seed_text(path.read_text()))

    def start(self) -> "KindWalkthrough":
        """Nothing to start (the chart runs the controller and agents, the stack the stand-ins): note the
        containers' restart counts, which :meth:`check_processes` compares against."""
        self._restarts = self._restart_counts()
        return self

    def _restart_counts(self) -> dict[str, list[str]]:
        pods = self.kubectl.stdout("-n", "gpustack-system", "get", "pods", "-o",
                                   "jsonpath={range .items[*]}{.metadata.name} {.status.containerStatuses[*].restartCount}{\"\\n\"}{end}",
                                   check=False)
        return {name: counts for name, *counts in (line.split() for line in pods.splitlines() if line.strip())}

    def stop(self) -> None:
        """Nothing of its own to stop (the workdir only)."""
        if self._own_workdir and self.workdir.exists():
            import shutil
            shutil.rmtree(self.workdir, ignore_errors=True)

    def restart_controller(self) -> None:
        """The real ``kubectl rollout restart`` of the chart's Deployment (the seed's step 5 line)."""
        self.sh("kubectl -n gpustack-system rollout restart deploy/gpustack-operator-worker")

    def check_processes(self) -> None:
        """Raise naming a controller or agent Pod whose containers restarted (a crash) since :meth:`start`."""
        for name, counts in self._restart_counts().items():
            if counts != self._restarts.get(name, ["0"] * len(counts)):
                log = self.kubectl("-n", "gpustack-system", "logs", name, "--previous", "--tail=60", check=False)
                raise LocalClusterError(f"pod {name} restarted ({counts}); previous log:\n{log.stdout}{log.stderr}")

    def node(self, seed_name: str) -> str:
        return self.kind_node[seed_name]

    def seed_text(self, text: str) -> str:
        return SEED_NODE.sub(lambda m: self.kind_node[m.group(0)], text)

    def sh(self, line: str, *, check: bool = True, timeout: float = 120.0) -> subprocess.CompletedProcess:
        """The seed's ``line`` with kind's node names, run with bash (rollout restart included: real here)."""
        return super().sh(self.seed_text(line), check=check, timeout=timeout)
