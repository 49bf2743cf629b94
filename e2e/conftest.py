"""One e2e cluster fixture, three backends: ``--cluster=local|kind|existing`` (default local).

* ``local``: a LocalCluster of the e2e session's own (``testing.localcluster.walkthrough.start_local_cluster``):
  etcd, kube-apiserver, kube-scheduler, kube-controller-manager (garbage collector, namespace
  controller), kwok, nfd-master and Kueue (configured by
  ``runtime.engine.pools.kueueconfig.kueue_configuration``, docs/concepts/pools-and-flavors.md "Kueue's resource charging"), all built by
  ``make controlplane``, with Kueue's, NFD's and our CRDs installed.
* ``kind``: the offline kind cluster of e2e/kind (``kind-up.sh``: docker behind the network guard,
  the locally built node image, nothing pulled), 1 control-plane + 3 workers, named accelpolicy-e2e;
  skipped with the reason when docker cannot be started here or the node image is not built
  (``make kind-images``). CRDs are installed into it.
* ``existing``: the cluster named by ``$KUBECONFIG`` (skipped when unset); CRDs are installed
  (server-side apply, idempotent).

The ``cluster`` fixture yields an :class:`E2ECluster` (backend, kubeconfig path, kubectl runner).
Every test under e2e/ gets the ``e2e`` marker. ``record_step(label, seconds)`` collects the
walkthrough's kubectl-to-table figures; the session summary prints them with their median and
writes ``walkthrough-timings.json`` into the pytest base temporary directory.
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass
from pathlib import Path

import pytest

from testing.localcluster import Kubectl, MissingBinariesError, all_crds, install_crds

BACKENDS = ("local", "kind", "existing")
KIND_E2E = "accelpolicy-e2e"


def pytest_addoption(parser):
    parser.addoption("--cluster", choices=BACKENDS, default="local",
                     help="e2e cluster backend: local (built control plane), kind (e2e/kind, offline), "
                          "existing ($KUBECONFIG)")


def pytest_collection_modifyitems(config, items):
    kind = config.getoption("--cluster") == "kind"
    for item in items:
        if "/e2e/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.e2e)
            if kind:   # `make test` runs the walkthrough on kind once, selected by this marker
                item.add_marker(pytest.mark.kind)


@dataclass(frozen=True)
class E2ECluster:
    """A cluster an e2e test talks to: ``backend`` name, ``kubeconfig`` path, ``kubectl`` runner."""

    backend: str
    kubeconfig: Path
    kubectl: Kubectl
    stack: object = None   # kind: e2e/kind/stack.Stack (the chart installed, seed node -> kind node)


@pytest.fixture(scope="session")
def cluster(request, tmp_path_factory):
    backend = request.config.getoption("--cluster")
    if backend == "local":
        # A cluster of its own: the walkthrough needs the seed Nodes as kwok Nodes, and the
        # components tests leave seed objects behind in the shared full_cluster().
        from runtime.engine.policy import Policy
        from testing.localcluster.walkthrough import start_local_cluster
        from runtime.rules.loader import load_rules
        try:
            lc, kubectl = start_local_cluster(Policy(load_rules()))   # Kueue configured from the rules (docs/concepts/pools-and-flavors.md "Kueue's resource charging")
        except MissingBinariesError as e:
            pytest.fail(str(e), pytrace=False)
        try:
            yield E2ECluster("local", lc.kubeconfig, kubectl)
        finally:
            lc.stop()
    elif backend == "kind":
        from kind.stack import StackError, install_stack, kind_cluster_unavailable, pytest_kind_cluster  # e2e/kind

        why = kind_cluster_unavailable()
        if why:
            if os.environ.get("ACCELPOLICY_REQUIRE_KIND"):   # CI: a cluster that cannot come up is a failure
                pytest.fail(why, pytrace=False)
            pytest.skip(why)
        try:
            kind = pytest_kind_cluster(KIND_E2E, reuse=bool(os.environ.get("ACCELPOLICY_KIND_REUSE")))
        except StackError as e:
            pytest.fail(str(e), pytrace=False)
        stack = None
        try:
            try:
                stack = install_stack(KIND_E2E, kind.kubeconfig_path, kind.nodes())
            except StackError as e:
                pytest.fail(str(e), pytrace=False)
            print(f"\nkind stack: {stack.image}, nodes {stack.kind_node}, seconds {stack.seconds}")
            yield E2ECluster("kind", kind.kubeconfig_path, Kubectl(kind.kubeconfig_path), stack)
        finally:
            if stack is not None:
                stack.stop()
            if not os.environ.get("ACCELPOLICY_KIND_KEEP"):
                kind.delete()
    else:
        path = os.environ.get("KUBECONFIG")
        if not path:
            pytest.skip("existing backend: $KUBECONFIG is not set")
        kubeconfig = Path(path.split(os.pathsep)[0])
        kubectl = Kubectl(kubeconfig)
        install_crds(kubectl, all_crds(), timeout=120)
        yield E2ECluster("existing", kubeconfig, kubectl)


_STEP_FIGURES: list[tuple[str, float, bool]] = []


@pytest.fixture(scope="session")
def record_step(tmp_path_factory):
    """``record_step(label, seconds, table=True)``: one walkthrough figure, the seconds from a kubectl
    line to the first correct ``kubectl get instancetypes`` table (``table=False``: to another
    awaited state; printed, left out of the median). Each figure is also appended at once to
    ``walkthrough-timings.jsonl`` in the pytest base temporary directory."""
    path = tmp_path_factory.getbasetemp() / "walkthrough-timings.jsonl"

    def record(label: str, seconds: float, table: bool = True) -> None:
        _STEP_FIGURES.append((label, round(seconds, 3), table))
        with path.open("a") as f:
            f.write(json.dumps({"label": label, "seconds": round(seconds, 3), "table": table}) + "\n")
    return record


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _STEP_FIGURES:
        return
    tables = [s for _, s, table in _STEP_FIGURES if table]
    median = statistics.median(tables) if tables else None
    tr = terminalreporter
    tr.section("walkthrough: seconds from the kubectl line to the first correct table")
    for label, seconds, table in _STEP_FIGURES:
        tr.write_line(f"{seconds:8.2f}  {label}{'' if table else '  (not a table; not in the median)'}")
    if median is not None:
        tr.write_line(f"{median:8.2f}  median of the {len(tables)} table figures")
    base = config._tmp_path_factory.getbasetemp() if hasattr(config, "_tmp_path_factory") else None
    if base is not None:
        path = base / "walkthrough-timings.json"
        path.write_text(json.dumps({"steps": [{"label": lbl, "seconds": s, "table": t} for lbl, s, t in _STEP_FIGURES],
                                    "median": median}, indent=2))
        tr.write_line(f"written to {path}")
