"""Helpers for tests that run against a cluster (no pytest import here).

* :func:`shared_dir` / :func:`seed_objects` / :func:`seed_tables`: the project's ``shared/`` folder
  (``$ACCELPOLICY_SHARED``, else ``../shared`` beside the checkout) and its seed contract.
* :func:`session_cluster`: one :class:`LocalCluster` per process with every CRD installed, shared by
  all test directories that ask for it and stopped at interpreter exit.
* :func:`full_cluster`: another such cluster that also runs kube-scheduler, kube-controller-manager
  (garbage collector, namespace controller), kwok, nfd-master and
  Kueue (started lazily, only when a test asks for it).
* :func:`parse_table`: split ``kubectl get`` output into rows of ``{HEADER: value}`` by the
  header's column offsets (values may contain single spaces).
"""

from __future__ import annotations

import base64
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml

from .binaries import LocalClusterError, repo_root
from .cluster import LocalCluster
from .crds import all_crds, install_crds
from .kubectl import Kubectl

SHARED_ENV = "ACCELPOLICY_SHARED"


def shared_dir() -> Path | None:
    """Return the shared/ folder (``$ACCELPOLICY_SHARED`` or ``<repo>/../shared``) or ``None``.

    ``None`` means absent: tests that need the seed skip with a reason naming both locations.
    Raises :class:`LocalClusterError` when ``$ACCELPOLICY_SHARED`` is set but is not a directory.
    """
    env = os.environ.get(SHARED_ENV)
    if env:
        if not Path(env).is_dir():
            raise LocalClusterError(f"${SHARED_ENV}={env} is not a directory")
        return Path(env).resolve()
    candidate = repo_root().parent / "shared"
    return candidate.resolve() if (candidate / "seed").is_dir() else None


def shared_missing_reason() -> str:
    """The skip reason used when :func:`shared_dir` is ``None``."""
    return (f"seed contract not found: set ${SHARED_ENV} to the shared/ folder "
            f"(looked for {repo_root().parent / 'shared'})")


@dataclass(frozen=True)
class SeedObject:
    """One object of ``shared/seed/objects/*.yaml``: its file and parsed body."""

    path: Path
    body: dict

    @property
    def kind(self) -> str:
        return self.body["kind"]

    @property
    def name(self) -> str:
        return self.body["metadata"]["name"]

    @property
    def namespace(self) -> str | None:
        return self.body["metadata"].get("namespace")


def seed_objects(shared: Path) -> list[SeedObject]:
    """Parse every ``seed/objects/*.yaml`` (one object per file, sorted by file name).

    Raises :class:`LocalClusterError` naming the file when it is not one YAML mapping with
    apiVersion, kind and metadata.name.
    """
    out = []
    for path in sorted((shared / "seed" / "objects").glob("*.yaml")):
        try:
            docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        except yaml.YAMLError as e:
            raise LocalClusterError(f"{path}: not valid YAML: {e}") from e
        if len(docs) != 1 or not isinstance(docs[0], dict) or not all(
                docs[0].get(k) for k in ("apiVersion", "kind")) or not docs[0].get("metadata", {}).get("name"):
            raise LocalClusterError(f"{path}: expected one object with apiVersion, kind and metadata.name")
        out.append(SeedObject(path, docs[0]))
    return out


def seed_tables(shared: Path) -> dict[str, str]:
    """Return ``{file stem: text}`` for every ``seed/tables/*.txt``."""
    return {p.stem: p.read_text() for p in sorted((shared / "seed" / "tables").glob("*.txt"))}


_HEADER_CELL = re.compile(r"\S+(?: \S+)*")


def parse_table(text: str) -> tuple[list[str], list[dict[str, str]]]:
    """Split ``kubectl get`` text into ``(headers, rows)``.

    Column boundaries are the header cells' start offsets (cells are separated by 2+ spaces, a
    header may contain one space, e.g. ``PENDING WORKLOADS``); each value is the stripped slice
    between two starts, so values with single spaces (``1/1 10/10 100/100 0/0``) survive.
    """
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return [], []
    cells = list(_HEADER_CELL.finditer(lines[0]))
    headers = [m.group(0) for m in cells]
    starts = [m.start() for m in cells] + [None]
    rows = [{h: ln[starts[i]:starts[i + 1]].strip() for i, h in enumerate(headers)} for ln in lines[1:]]
    return headers, rows


_session: tuple[LocalCluster, Kubectl] | None = None


def with_crds(cluster: LocalCluster) -> tuple[LocalCluster, Kubectl]:
    """Install every CRD (Kueue's, NFD's, ours) into a started ``cluster`` and wait until they are
    Established; returns ``(cluster, kubectl)``. A failure stops the cluster before it is raised."""
    try:
        kubectl = Kubectl(cluster.kubeconfig)
        install_crds(kubectl, all_crds())
    except BaseException:
        cluster.stop()
        raise
    return cluster, kubectl


def session_cluster() -> tuple[LocalCluster, Kubectl]:
    """Start (once per process) a LocalCluster with Kueue's, NFD's and our CRDs Established.

    Returns ``(cluster, kubectl)``. The cluster stops at interpreter exit (LocalCluster's atexit).
    Raises :class:`MissingBinariesError` ("run `make controlplane`") or :class:`LocalClusterError`.
    """
    global _session
    if _session is None or not _session[0].running:
        _session = with_crds(LocalCluster().start())
    return _session


#: Components the shared "full" cluster runs (testing/localcluster/components.py).
FULL_COMPONENTS = ("kwok", "nfd-master", "kueue")

_full: tuple[LocalCluster, Kubectl] | None = None


def full_cluster(kueue_configuration: dict | None = None) -> tuple[LocalCluster, Kubectl]:
    """Start (once per process, lazily) a LocalCluster with kube-scheduler, kube-controller-manager
    (:data:`~testing.localcluster.cluster.CONTROLLER_MANAGER_CONTROLLERS`), kwok, nfd-master and
    Kueue, and every CRD (Kueue's, NFD's, ours) Established; return ``(cluster, kubectl)``.

    Separate from :func:`session_cluster` (which stays bare: no scheduler, no components), shared
    by every test in the process that asks for it and stopped at interpreter exit.
    ``kueue_configuration`` (see :class:`LocalCluster`; default: the repository rules' own,
    :func:`runtime.engine.pools.kueueconfig.kueue_configuration`, docs/concepts/pools-and-flavors.md "Kueue's resource charging") applies to the first
    start only; a later call asking for a different one raises :class:`LocalClusterError`. Raises
    :class:`MissingBinariesError` ("run `make controlplane`") or :class:`LocalClusterError`.
    """
    global _full
    if kueue_configuration is None:
        from runtime.engine.pools.kueueconfig import kueue_configuration as from_rules
        from runtime.engine.policy import Policy
        from runtime.rules.loader import load_rules
        kueue_configuration = from_rules(Policy(load_rules()))
    if _full is not None and _full[0].running:
        if kueue_configuration is not None and kueue_configuration != _full[0].kueue_configuration:
            raise LocalClusterError("full_cluster() already runs with another kueue_configuration")
        return _full
    _full = with_crds(LocalCluster(scheduler=True, controller_manager=True, components=FULL_COMPONENTS,
                                   kueue_configuration=kueue_configuration).start())
    return _full


def get_json(kubectl: Kubectl, *args: str, managed_fields: bool = False) -> dict:
    """``kubectl get ARGS -o json`` parsed, or ``{}`` when the object does not exist.
    ``managed_fields`` adds ``--show-managed-fields``."""
    extra = ("--show-managed-fields",) if managed_fields else ()
    out = kubectl.stdout("get", *args, "-o", "json", *extra, check=False)
    return json.loads(out) if out.strip() else {}


def set_setting(kubectl: Kubectl, settings: Any, name: str, value: str) -> None:
    """Write the raw string ``value`` of setting ``name`` straight into the settings Secret, as an
    administrator's direct patch does (seed step 5). ``settings``: the rules' settings store
    (``Policy.settings``: its ``secretName`` in its ``namespace``)."""
    kubectl("-n", settings.namespace, "patch", "secret", settings.secretName, "--type=merge",
            "-p", json.dumps({"data": {name: base64.b64encode(value.encode()).decode()}}))


def wait_for(fetch: Callable[[], Any], predicate: Callable[[Any], Any], timeout: float = 30.0,
             what: str = "condition", interval: float = 0.05) -> tuple[float, Any]:
    """Poll ``fetch()`` every ``interval`` seconds (50 ms; more where each fetch runs kubectl) until
    ``predicate(value)``; returns ``(seconds waited, value)``.

    Raises AssertionError naming ``what``, the timeout and the last value (2,000 characters) when
    the predicate never holds: live tests wait on the cluster, they never sleep a fixed time.
    """
    t0 = time.monotonic()
    value = None
    while time.monotonic() - t0 < timeout:
        value = fetch()
        if predicate(value):
            return time.monotonic() - t0, value
        time.sleep(interval)
    try:
        shown = json.dumps(value)
    except (TypeError, ValueError):
        shown = str(value)
    raise AssertionError(f"{what} not reached in {timeout}s; last: {shown[:2000]}")


def service_account_kubeconfig(kubectl: Kubectl, admin_kubeconfig: Path, namespace: str, name: str, path: Path,
                               duration: str = "24h") -> Path:
    """Create ServiceAccount ``namespace/name`` bound to cluster-admin (ClusterRoleBinding
    ``<name>-walkthrough``) and write a kubeconfig of a TokenRequest token of it (valid ``duration``)
    to ``path`` (mode 0600), the cluster entry copied from ``admin_kubeconfig``; returns ``path``.
    How the walkthrough and the benchmarks run the controller as the identity its own webhooks let
    through (``controllerServiceAccount`` of rules/controller.yaml)."""
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": f"{name}-walkthrough"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]}]}))
    token = kubectl.stdout("-n", namespace, "create", "token", name, f"--duration={duration}").strip()
    admin = yaml.safe_load(Path(admin_kubeconfig).read_text())
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "local", "cluster": admin["clusters"][0]["cluster"]}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": name}}],
        "current-context": "local"}))
    path.chmod(0o600)
    return path
