"""Where a one-shot command reads the cluster from: the live cluster, snapshot files, or both layered
(docs/tasks/ask-the-cluster.md).

:func:`source_options` adds ``--snapshot PATH`` (repeatable), ``--kubeconfig FILE``, ``--context NAME``
and ``--cluster``; :func:`read_source` reads what they name, once, as one
:class:`~runtime.engine.snapshot.Snapshot`:

* no ``--snapshot``: the live cluster, with kubectl's conventions (``--kubeconfig``, else
  ``$KUBECONFIG``, else ``~/.kube/config``, else the in-cluster ServiceAccount; ``--context``);
* ``--snapshot`` alone: the files, offline (no API server is asked);
* ``--snapshot`` with ``--cluster`` (or ``--kubeconfig``/``--context``): the cluster first, the files
  layered over it (a file's object replaces the cluster's of the same kind and name: "what if I add
  these nodes", "what if this Setting flips").

Each command declares what it reads (:data:`DERIVE`, :data:`ADMISSION`, :data:`AUDIT`; the settings
Secret is added by name from rules/settings.yaml). Errors are printed in Kubernetes' words and exit
2 (no kubeconfig, a forbidden list: which verb on which resource, and that the ``accelpolicy-viewer``
ClusterRole grants it) or 1 (the API server does not answer); a kind whose CRD is not installed is a
warning naming it and what the command answers without it. ``accelpolicy diff`` reads its cluster
through :func:`read_source` too.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import click

from runtime.cli.common import SNAPSHOT_INSTEAD, connect_or_exit, fail, unreachable, warn_one

if TYPE_CHECKING:
    from runtime.engine.policy import Policy
    from runtime.engine.snapshot import Snapshot

#: What derivation reads (``get``, ``derive``, ``explain instancetype``): the node facts, the derived
#: kinds as the cluster holds them, Pods (running Instances' CPU, DRA claims) and the DRA kinds.
DERIVE = ("Namespace", "Node", "NodeFeature", "Devices", "Pod", "ResourceFlavor", "ClusterQueue",
          "LocalQueue", "AdmissionCheck", "InstanceType", "InstanceTypeFlavor", "ResourceSlice",
          "ResourceClaim", "DeviceClass")
#: ``explain instancetype`` on a live cluster also reads Kueue's Workloads (admitted and pending).
EXPLAIN = DERIVE + ("Workload",)
#: ``admit``, ``explain admit``: every kind an admission rule or the derived view may read.
ADMISSION = ("Namespace", "Node", "Pod", "ConfigMap", "PersistentVolumeClaim", "PersistentVolume",
             "StorageClass", "RuntimeClass", "Service", "NodeFeature", "ResourceFlavor", "ClusterQueue",
             "LocalQueue", "AdmissionCheck", "Workload", "InstanceType", "InstanceTypeFlavor", "Instance",
             "Devices", "InstancePersistentVolume", "Setting", "ResourceSlice", "ResourceClaim",
             "DeviceClass", "PolicyException")
#: ``audit`` and ``snapshot``: every kind accelpolicy reads (Secrets: the settings Secret only), and the
#: AcceleratorMaintenance objects (docs/concepts/out-of-service.md "Maintenance").
AUDIT = ADMISSION + ("AcceleratorMaintenance",)

#: What each kind's absence costs, for the warning naming a CRD that is not installed.
WITHOUT = {"Workload": "no Workloads admitted or pending in the pools",
           "NodeFeature": "no node facts from NodeFeatures: nodes read with their own labels only",
           "Devices": "no device ledgers: accelerator views count every accelerator free",
           "PolicyException": "no PolicyExceptions: every rule judges as if none were granted",
           "AcceleratorMaintenance": "no AcceleratorMaintenance objects: none is reported"}
VIEWER_ROLE = "accelpolicy-viewer"


def source_options(func: Callable) -> Callable:
    """``--snapshot``, ``--kubeconfig``, ``--context``, ``--cluster`` (see the module docstring); the
    command receives ``snapshots``, ``kubeconfig``, ``context``, ``cluster``."""
    for option in reversed((
        click.option("--snapshot", "snapshots", multiple=True, metavar="PATH",
                     help="Cluster objects: a YAML/JSON file, a directory (read recursively) or '-' for "
                          "stdin. Repeat to layer: later objects replace earlier ones. Without it: the live "
                          "cluster."),
        click.option("--cluster", is_flag=True,
                     help="Read the live cluster and layer the --snapshot files over it (what-if objects)."),
        click.option("--kubeconfig", type=click.Path(dir_okay=False, path_type=Path), default=None,
                     help="Kubeconfig of the live cluster (default: $KUBECONFIG, ~/.kube/config, "
                          "in-cluster)."),
        click.option("--context", default=None,
                     help="The kubeconfig context to use (default: its current one)."),
    )):
        func = option(func)
    return func


@dataclass
class Source:
    """What :func:`read_source` read: ``snapshot`` (files over cluster, DRA nodes planned), ``live``
    (the cluster was read), ``cluster`` (its objects alone, before any file: what it holds now),
    ``missing`` (kinds it does not serve), ``requests`` (API requests sent), ``settings_namespace``
    (where the settings Secret was read: env ``KUBERNETES_POD_NAMESPACE`` in a Pod, else
    rules/settings.yaml; None offline), for :func:`runtime.engine.pools.derive.derive`."""

    snapshot: "Snapshot"
    live: bool
    cluster: "Snapshot | None" = None
    missing: list[str] = field(default_factory=list)
    requests: int = 0
    settings_namespace: str | None = None


def is_live(snapshots: tuple[str, ...], kubeconfig: Path | None, context: str | None, cluster: bool) -> bool:
    """Whether the command reads the live cluster (no files, or
    ``--cluster``/``--kubeconfig``/``--context``)."""
    return not snapshots or cluster or kubeconfig is not None or context is not None


def read_source(policy: "Policy", kinds: tuple[str, ...], snapshots: tuple[str, ...], kubeconfig: Path | None,
                context: str | None, cluster: bool = False, command: str = "this command") -> Source:
    """The cluster as the options name it (module docstring): one list per kind of ``kinds`` plus the
    settings Secret by name when live, the files layered over it. Bad input and refused reads exit
    (module docstring); ``command`` names the command in the warning about a missing CRD."""
    from runtime.cli.common import offline_snapshot, snapshot_from

    if not is_live(snapshots, kubeconfig, context, cluster):
        return Source(offline_snapshot(policy, snapshots), live=False)
    live, missing, requests = _live(policy, kinds, kubeconfig, context)
    for kind in missing:
        warn_one(f"the server doesn't have a resource type for {kind} (its CRD is not installed): {command} "
                 f"answers without it ({WITHOUT.get(kind, f'no {kind} objects')})")
    files = snapshot_from(snapshots)
    layered = _layer(live, files) if files is not None else live
    from runtime.engine.devices.draoffline import with_dra_nodes
    try:
        planned = with_dra_nodes(policy, layered)[0]
    except ValueError as exc:
        fail(f"planning the nodes whose accelerators come from ResourceSlices: {exc}")
    from runtime.controller.settings_seed import secret_namespace
    return Source(planned, live=True, cluster=live, missing=missing, requests=requests,
                  settings_namespace=secret_namespace(policy.settings, os.environ))


def _layer(base: "Snapshot", top: "Snapshot") -> "Snapshot":
    """``top``'s objects over ``base``'s (same kind, namespace and name: ``top`` wins)."""
    from runtime.engine.snapshot import Snapshot

    index = {kind: dict(items) for kind, items in base.objects.items()}
    for kind, items in top.objects.items():
        index.setdefault(kind, {}).update(items)
    return Snapshot.from_index(index, tuple(base.warnings) + tuple(top.warnings))


def _live(policy: "Policy", kinds: tuple[str, ...], kubeconfig: Path | None,
          context: str | None) -> tuple["Snapshot", list[str], int]:
    from runtime.controller.settings_seed import secret_namespace
    from runtime.engine.snapshot import Snapshot, SnapshotError
    from runtime.kube.listing import ListForbidden, Needs, list_cluster
    from runtime.kube.session import KubeApiError

    session = connect_or_exit(kubeconfig, context, SNAPSHOT_INSTEAD, quiet=True)
    needs = Needs(kinds, (secret_namespace(policy.settings, os.environ), policy.settings.secretName))
    try:
        read = list_cluster(session, needs)
    except ListForbidden as exc:
        fail(forbidden_message(exc))
    except KubeApiError as exc:
        unreachable(exc)
    try:
        snapshot = Snapshot.from_objects(read.objects, origin="<cluster>")
    except SnapshotError as exc:
        fail(str(exc))
    return snapshot, read.missing, read.requests


def forbidden_message(exc) -> str:
    """A 403 in the API server's words plus the missing permission and the role that grants it."""
    group = exc.group or '""'
    scope = f"in the namespace {exc.namespace}" if exc.namespace else "at the cluster scope"
    what = f"{exc.resource} {exc.name!r}" if exc.name else exc.resource
    return (f"{exc.message}\n  missing permission: {exc.verb} {what} (apiGroup {group}) {scope}; the "
            f"ClusterRole {VIEWER_ROLE} of the chart grants what this command reads "
            f"(docs/tasks/ask-the-cluster.md)")
