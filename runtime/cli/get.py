"""`accelpolicy get KIND --snapshot PATH`: what `kubectl get KIND` would print after a reconcile."""
from __future__ import annotations

from pathlib import Path

import click

from runtime.cli.common import bad_input_exits, emit, load_policy, rules_option, warn
from runtime.cli.source import DERIVE, read_source, source_options
from runtime.engine.pools import derive
from runtime.report.tables import KINDS, drift, render, resolve_kind

_GROUPS = {"ResourceFlavor": "kueue.x-k8s.io", "ClusterQueue": "kueue.x-k8s.io",
           "LocalQueue": "kueue.x-k8s.io", "AdmissionCheck": "kueue.x-k8s.io",
           "InstanceType": "worker.gpustack.ai", "InstanceTypeFlavor": "worker.gpustack.ai",
           "Devices": "worker.gpustack.ai"}


@click.command("get",
               epilog="Kinds: " + ", ".join(f"{t.plural} ({', '.join(t.names[2:]) or '-'})" for t in KINDS))
@click.argument("kind")
@click.argument("names", nargs=-1, shell_complete=lambda ctx, param,
                incomplete: complete_names(ctx, incomplete))
@source_options
@rules_option
@click.option("-o", "--output", type=click.Choice(["table", "wide", "yaml", "json", "name"]), default="table",
              show_default=True, help="Output format, as kubectl's -o.")
@click.option("--no-headers", is_flag=True, help="Table output without the header row.")
@bad_input_exits
def command(kind: str, names: tuple[str, ...], snapshots: tuple[str, ...], cluster: bool,
            kubeconfig: Path | None, context: str | None, rules_dir: Path, output: str,
            no_headers: bool) -> None:
    """Print KIND [NAME...] as `kubectl get` would once the controller has reconciled the snapshot.

    KIND takes kubectl's spellings (singular, plural, short names): resourceflavors, clusterqueues,
    localqueues, admissionchecks, instancetypes, instancetypeflavors, devices. Objects of KIND that
    accelpolicy does not own are listed too, as the cluster would. Without --snapshot: what the live
    cluster holds now, with a DRIFT column where the derived state differs; with --cluster and
    --snapshot: the cluster with the files layered over it, once reconciled. AGE reads <unknown> for
    an object not created yet.
    """
    table = resolve_kind(kind)
    policy = load_policy(rules_dir)
    source = read_source(policy, DERIVE, snapshots, kubeconfig, context, cluster, "get")
    snapshot = source.snapshot
    # live: queue phases as Kueue reports them now
    state = derive(policy, snapshot, live=source.live, settings_namespace=source.settings_namespace)
    warn(state.warnings)
    objects = [_created(o, snapshot, table.kind) for o in state.view(policy, table.kind, snapshot)]
    marks = None
    if source.live and not snapshots:  # what the cluster holds now, marked where it drifts
        objects, marks = drift(table, source.cluster.list(table.kind), objects, wide=output == "wide")
    if names:
        by_name = {obj["metadata"]["name"]: obj for obj in objects}
        missing = [n for n in names if n not in by_name]
        for name in missing:
            click.echo(
                f'Error from server (NotFound): {table.plural}.{_GROUPS[table.kind]} "{name}" not found',
                err=True)
        if marks is not None:
            mark_of = {obj["metadata"]["name"]: m for obj, m in zip(objects, marks)}
            marks = [mark_of[n] for n in names if n in by_name]
        objects = [by_name[n] for n in names if n in by_name]
        if missing and not objects:
            raise SystemExit(1)
    else:
        missing = []
    if output in ("table", "wide"):
        click.echo(render(table, objects, wide=output == "wide", headers=not no_headers, marks=marks))
    elif output == "name":
        for obj in objects:
            click.echo(f"{table.plural[:-1] if table.plural != 'devices' else 'devices'}."
                       f"{_GROUPS[table.kind]}/{obj['metadata']['name']}")
    elif len(names) == 1 and objects:
        emit(objects, output, as_list=False)
    else:
        emit(objects, output)
    if missing:
        raise SystemExit(1)  # like kubectl: the found objects are printed, the exit code says not all were


def _created(obj: dict, snapshot, kind: str) -> dict:
    """``obj`` with the creationTimestamp of the object the source holds under its name (a derived
    object is built anew; its AGE is the cluster's object's)."""
    meta = obj.get("metadata") or {}
    held = snapshot.get(kind, meta.get("name", ""), meta.get("namespace") or "")
    stamp = ((held or {}).get("metadata") or {}).get("creationTimestamp")
    if stamp is None or meta.get("creationTimestamp") == stamp:
        return obj
    return {**obj, "metadata": {**meta, "creationTimestamp": stamp}}


def complete_names(ctx: click.Context, incomplete: str) -> list[str]:
    """Shell completion of NAME: the names of KIND the live cluster holds (nothing when it cannot be
    read: completion never prints an error)."""
    from runtime.cli.completion import names_of

    return names_of(ctx.params.get("kind") or "", incomplete, ctx.params.get("kubeconfig"),
                    ctx.params.get("context"))
