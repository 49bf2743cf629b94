"""`accelpolicy get KIND --snapshot PATH`: what `kubectl get KIND` would print after a reconcile."""
from __future__ import annotations

from pathlib import Path

import click

from runtime.cli.common import bad_input_exits, emit, load_policy, offline_snapshot, rules_option, snapshot_option, warn
from runtime.engine.pools import derive
from runtime.report.tables import KINDS, render, resolve_kind

_GROUPS = {"ResourceFlavor": "kueue.x-k8s.io", "ClusterQueue": "kueue.x-k8s.io", "LocalQueue": "kueue.x-k8s.io",
           "AdmissionCheck": "kueue.x-k8s.io", "InstanceType": "worker.gpustack.ai",
           "InstanceTypeFlavor": "worker.gpustack.ai", "Devices": "worker.gpustack.ai"}


@click.command("get", epilog="Kinds: " + ", ".join(f"{t.plural} ({', '.join(t.names[2:]) or '-'})" for t in KINDS))
@click.argument("kind")
@click.argument("names", nargs=-1)
@snapshot_option
@rules_option
@click.option("-o", "--output", type=click.Choice(["table", "wide", "yaml", "json", "name"]), default="table",
              show_default=True, help="Output format, as kubectl's -o.")
@click.option("--no-headers", is_flag=True, help="Table output without the header row.")
@bad_input_exits
def command(kind: str, names: tuple[str, ...], snapshots: tuple[str, ...], rules_dir: Path, output: str,
            no_headers: bool) -> None:
    """Print KIND [NAME...] as `kubectl get` would once the controller has reconciled the snapshot.

    KIND takes kubectl's spellings (singular, plural, short names): resourceflavors, clusterqueues,
    localqueues, admissionchecks, instancetypes, instancetypeflavors, devices. Objects of KIND that
    accelpolicy does not own are listed too, as the cluster would. AGE reads <unknown>.
    """
    table = resolve_kind(kind)
    policy = load_policy(rules_dir)
    snapshot = offline_snapshot(policy, snapshots)
    state = derive(policy, snapshot)
    warn(state.warnings)
    objects = state.view(policy, table.kind, snapshot)
    if names:
        by_name = {obj["metadata"]["name"]: obj for obj in objects}
        missing = [n for n in names if n not in by_name]
        for name in missing:
            click.echo(f'Error from server (NotFound): {table.plural}.{_GROUPS[table.kind]} "{name}" not found', err=True)
        objects = [by_name[n] for n in names if n in by_name]
        if missing and not objects:
            raise SystemExit(1)
    else:
        missing = []
    if output in ("table", "wide"):
        click.echo(render(table, objects, wide=output == "wide", headers=not no_headers))
    elif output == "name":
        for obj in objects:
            click.echo(f"{table.plural[:-1] if table.plural != 'devices' else 'devices'}.{_GROUPS[table.kind]}/"
                       f"{obj['metadata']['name']}")
    elif len(names) == 1 and objects:
        emit(objects, output, as_list=False)
    else:
        emit(objects, output)
    if missing:
        raise SystemExit(1)  # like kubectl: the found objects are printed, the exit code says not all were
