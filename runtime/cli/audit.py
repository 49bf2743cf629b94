"""`accelpolicy audit`: judge what a cluster holds, offline (``--snapshot``) or live (``--kubeconfig``).

Findings: every existing object an AdmissionPolicy matches, judged by the webhooks' engine (each
policy's ``audit:`` says CREATE, UPDATE onto itself, or skip), drift between the cluster and the
derived desired state, the checks of rules/audit.yaml and the device ledgers (runtime.report.audit).
Output: ``table`` (failures only, then the counts), ``json`` (every result), ``yaml`` (openreports.io
``Report`` per namespace and a ``ClusterReport``, ready for ``kubectl apply -f -``), ``html`` (one
self-contained page). Exit 0 when nothing fails, 1 when a result is ``fail`` or ``error``, 2 on bad input.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from runtime.cli.common import bad_input_exits, emit, fail, load_policy, offline_snapshot, rules_option
from runtime.engine.snapshot import KNOWN_KINDS, Snapshot
from runtime.report.audit import audit
from runtime.report.results import reports, table


def live_snapshot(kubeconfig: Path, timeout: float = 60.0) -> Snapshot:
    """Every object of the kinds accelpolicy reads, listed once from the cluster of ``kubeconfig``.

    Kinds the server does not serve read as empty. Exits 2 on a bad kubeconfig, 1 when the API
    server does not answer within ``timeout`` seconds.
    """
    from runtime.kube.cache import WatchedKind
    from runtime.kube.clustercache import ClusterCache
    from runtime.kube.session import KubeApiError, KubeConfigError, connect

    try:
        session = connect(kubeconfig)
    except KubeConfigError as exc:
        fail(str(exc))
    try:
        cache = ClusterCache(session, [WatchedKind(kind) for kind in KNOWN_KINDS]).start()
    except KubeApiError as exc:
        click.echo(f"error: cannot reach the API server: {exc}", err=True)
        sys.exit(1)
    try:
        if not cache.wait_synced(timeout):
            click.echo(f"error: the API server did not list every kind within {timeout:.0f}s", err=True)
            sys.exit(1)
        return cache.snapshot()
    finally:
        cache.stop()


@click.command("audit")
@click.option("--snapshot", "snapshots", multiple=True, metavar="PATH",
              help="Cluster objects: a YAML/JSON file, a directory or '-'; repeat to layer.")
@click.option("--kubeconfig", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="Audit a live cluster instead (its objects listed once).")
@rules_option
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml", "html"]), default="table",
              show_default=True)
@click.option("--show-pass", is_flag=True, help="table: list pass and skip rows too")
@bad_input_exits
def command(snapshots: tuple[str, ...], kubeconfig: Path | None, rules_dir: Path, output: str,
            show_pass: bool) -> None:
    """Judge every existing object with the admission rules and report drift from the derived state.

    Results are pass, fail, warn, error or skip, each with its policy, rule, object, field and message.
    -o yaml prints openreports.io Report (one per namespace) and ClusterReport objects with summary
    counts. Exit 0 when nothing fails, 1 when a result is fail or error, 2 on bad input.
    """
    if bool(snapshots) == bool(kubeconfig):
        fail("give either --snapshot PATH (repeatable) or --kubeconfig FILE")
    policy = load_policy(rules_dir)
    snapshot = offline_snapshot(policy, snapshots) if snapshots else live_snapshot(kubeconfig)
    results = audit(policy, snapshot)
    spec = policy.ruleset.get("AuditPolicy")
    if output == "table":
        click.echo(table(results, show_pass=show_pass))
    elif output == "json":
        click.echo(json.dumps([r.as_dict() for r in results], indent=2))
    elif output == "yaml":
        emit(reports(results, spec.reportName, spec.source), "yaml", stream=True)
    else:
        from runtime.report.html import render_page

        click.echo(render_page(policy, snapshot, results))
    sys.exit(1 if any(r.result in ("fail", "error") for r in results) else 0)
