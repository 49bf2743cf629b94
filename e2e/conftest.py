"""One e2e cluster fixture, three backends: ``--cluster=local|kind|existing`` (default local).

* ``local``: the process-wide LocalCluster (etcd + kube-apiserver built by ``make controlplane``)
  with Kueue's, NFD's and our CRDs installed.
* ``kind``: a kind cluster through pytest-kind; skipped with the reason when ``kind`` is not on PATH
  or ``docker info`` fails (no Docker engine). CRDs are installed into it.
* ``existing``: the cluster named by ``$KUBECONFIG`` (skipped when unset); CRDs are installed
  (server-side apply, idempotent).

The ``cluster`` fixture yields an :class:`E2ECluster` (backend, kubeconfig path, kubectl runner).
Every test under e2e/ gets the ``e2e`` marker.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from runtime.localcluster import Kubectl, MissingBinariesError, all_crds, install_crds
from runtime.localcluster.testing import session_cluster

BACKENDS = ("local", "kind", "existing")


def pytest_addoption(parser):
    parser.addoption("--cluster", choices=BACKENDS, default="local",
                     help="e2e cluster backend: local (built control plane), kind (pytest-kind), "
                          "existing ($KUBECONFIG)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "/e2e/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.e2e)


@dataclass(frozen=True)
class E2ECluster:
    """A cluster an e2e test talks to: ``backend`` name, ``kubeconfig`` path, ``kubectl`` runner."""

    backend: str
    kubeconfig: Path
    kubectl: Kubectl


def kind_unavailable_reason() -> str | None:
    """Why the kind backend cannot run here, or None when kind and a Docker engine are present."""
    if shutil.which("kind") is None:
        return "kind backend: `kind` is not on PATH"
    if shutil.which("docker") is None:
        return "kind backend: `docker` is not on PATH"
    try:
        r = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return "kind backend: `docker info` timed out"
    if r.returncode != 0:
        return f"kind backend: `docker info` failed (no Docker engine): {(r.stderr or r.stdout).strip()[:200]}"
    return None


@pytest.fixture(scope="session")
def cluster(request, tmp_path_factory):
    backend = request.config.getoption("--cluster")
    if backend == "local":
        try:
            lc, kubectl = session_cluster()
        except MissingBinariesError as e:
            pytest.fail(str(e), pytrace=False)
        yield E2ECluster("local", lc.kubeconfig, kubectl)
    elif backend == "kind":
        reason = kind_unavailable_reason()
        if reason:
            pytest.skip(reason)
        from pytest_kind import KindCluster  # imported only when used

        kind = KindCluster("accelpolicy-e2e", kubeconfig=tmp_path_factory.mktemp("kind") / "kubeconfig",
                           kind_path=Path(shutil.which("kind")))
        kind.create()
        try:
            kubectl = Kubectl(kind.kubeconfig_path)
            install_crds(kubectl, all_crds(), timeout=120)
            yield E2ECluster("kind", kind.kubeconfig_path, kubectl)
        finally:
            kind.delete()
    else:
        path = os.environ.get("KUBECONFIG")
        if not path:
            pytest.skip("existing backend: $KUBECONFIG is not set")
        kubeconfig = Path(path.split(os.pathsep)[0])
        kubectl = Kubectl(kubeconfig)
        install_crds(kubectl, all_crds(), timeout=120)
        yield E2ECluster("existing", kubeconfig, kubectl)
