"""`accelpolicy controller`: run the live controller against an API server (issue 6).

``--once`` syncs the caches, seeds the settings Secret, reconciles once, prints what it wrote and
exits 0 (1 when an action failed). Without it the controller first takes the leader Lease
(``coordination.k8s.io/v1`` ``gpustack-operator-worker`` in ``gpustack-system``), then reconciles
after every burst of watch events until SIGINT/SIGTERM or until leadership is lost.
"""
from __future__ import annotations

import signal
import socket
import sys
import threading
from pathlib import Path

import click

from runtime.cli.common import bad_input_exits, load_policy, rules_option
from runtime.controller.leader import LEASE_NAME, LeaderElector
from runtime.controller.reconciler import Controller
from runtime.kube.session import KubeApiError, KubeConfigError, connect


@click.command("controller")
@click.option("--kubeconfig", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or the in-cluster ServiceAccount).")
@rules_option
@click.option("--once", is_flag=True, help="Reconcile once and exit (no leader election).")
@click.option("--coalesce-seconds", type=click.FloatRange(min=0), default=0.2, show_default=True,
              help="How long watch events are gathered before a reconcile.")
@click.option("--lease-namespace", default="gpustack-system", show_default=True, envvar="KUBERNETES_POD_NAMESPACE",
              help="Namespace of the leader Lease.")
@click.option("--identity", default=None, help="Leader identity (default: hostname_pid).")
@bad_input_exits
def command(kubeconfig: Path | None, rules_dir: Path, once: bool, coalesce_seconds: float,
            lease_namespace: str, identity: str | None) -> None:
    """Keep the cluster's pools equal to what the rule files derive from its node facts."""
    policy = load_policy(rules_dir)
    try:
        session = connect(kubeconfig)
    except KubeConfigError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except KubeApiError as exc:
        click.echo(f"error: cannot reach the API server: {exc}", err=True)
        sys.exit(1)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    # --once is a single pass: fit labels are written in it rather than after their window (§9)
    controller = Controller(session, policy, coalesce_seconds=coalesce_seconds,
                            fit_coalesce_seconds=0.0 if once else None)
    try:
        if once:
            controller.start()
            result = controller.reconcile()
            for write in result.writes:
                click.echo(f"{write.verb} {write.kind} {write.namespace + '/' if write.namespace else ''}{write.name}")
            for error in result.errors:
                click.echo(f"error: {error}", err=True)
            click.echo(f"reconciled in {result.seconds:.3f}s: {len(result.writes)} writes, "
                       f"{len(result.errors)} errors", err=True)
            sys.exit(1 if result.errors else 0)
        elector = LeaderElector(session, LEASE_NAME, lease_namespace,
                                identity or f"{socket.gethostname()}_{__import__('os').getpid()}")
        click.echo(f"waiting for the leader Lease {lease_namespace}/{LEASE_NAME} as {elector.identity}", err=True)
        if not elector.acquire(stop):
            return
        elector.keep_renewing(on_lost=stop.set)
        click.echo("leading; reconciling", err=True)
        controller.start()
        controller.run(stop)
        elector.release()
    except (KubeApiError, TimeoutError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    finally:
        controller.stop()
