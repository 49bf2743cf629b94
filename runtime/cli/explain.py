"""`accelpolicy explain`: why a pool holds its nodes, and how a review was decided (docs/audit.md).

``explain instancetype NAME --snapshot PATH``: the pool's selector and flavors, the nodes behind each
flavor, every node left out with the label or rule (file:line) that excluded it, the four views (and
CPU) with the per-accelerator ledger they add up. ``explain admit -f OBJ``: every policy that matches,
each CEL evaluation with its rule file:line, the values it read and its result. ``-o json`` for both.
"""
from __future__ import annotations

import json
import sys

import click

from runtime.cli.common import bad_input_exits, fail, load_policy, now_option, rules_option
from runtime.cli.source import ADMISSION, EXPLAIN, read_source, source_options
from runtime.engine.admission import admission_view, parse_review, review_for
from runtime.report.explain import (ExplainError, explain_admission, explain_instance_type, pool_workloads,
                                    render_admission, render_instance_type)
from runtime.snapshots import read_objects

_OUTPUT = click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text",
                       show_default=True)


@click.group("explain")
def command() -> None:
    """Explain a pool (instancetype) or an admission decision (admit)."""


@command.command("instancetype")
@click.argument("name", shell_complete=lambda ctx, param, incomplete: _complete_types(ctx, incomplete))
@source_options
@rules_option
@_OUTPUT
@bad_input_exits
def instancetype(name: str, snapshots, cluster, kubeconfig, context, rules_dir, output: str) -> None:
    """The pool of InstanceType NAME: flavors, nodes, nodes left out and why, how each view was computed.

    On a live cluster also its Kueue Workloads: admitted, pending with Kueue's reason, and the
    verdict of the gpustack-node-devices check on each."""
    policy = load_policy(rules_dir)
    source = read_source(policy, EXPLAIN, snapshots, kubeconfig, context, cluster, "explain instancetype")
    try:
        info = explain_instance_type(policy, source.snapshot, name, live=source.live,
                                     settings_namespace=source.settings_namespace)
    except ExplainError as exc:
        fail(exc.args[0])
    # what a snapshot file rarely holds: Kueue's Workloads
    if source.live or source.snapshot.count("Workload"):
        info["workloads"] = pool_workloads(policy, source.snapshot, name)
    click.echo(json.dumps(info, indent=2) if output == "json" else render_instance_type(info))


@command.command("admit")
@click.option("-f", "--filename", required=True, help="the object (YAML or JSON file, - for stdin)")
@click.option("--operation", type=click.Choice(["CREATE", "UPDATE"]), default="CREATE", show_default=True,
              help="UPDATE judges the object as an update onto itself")
@source_options
@rules_option
@_OUTPUT
@now_option
@bad_input_exits
def admit(filename: str, operation: str, snapshots, cluster, kubeconfig, context, rules_dir,
          output: str, now) -> None:
    """Every rule evaluated for one object: rule file:line, inputs, result; the rules a PolicyException
    lifts at --now. Exit 1 when denied."""
    policy = load_policy(rules_dir)
    docs, _ = read_objects([filename])
    if len(docs) != 1 or not isinstance(docs[0], dict) or not docs[0].get("kind"):
        fail(f"{filename}: expected exactly one Kubernetes object, found {len(docs)} documents")
    obj = docs[0]
    request = parse_review(review_for(obj, operation, obj if operation == "UPDATE" else None))
    source = read_source(policy, ADMISSION, snapshots, kubeconfig, context, cluster, "explain admit")
    info = explain_admission(policy, request,
                             admission_view(policy, source.snapshot, live=source.live,
                                            settings_namespace=source.settings_namespace), now)
    click.echo(json.dumps(info, indent=2, default=str) if output == "json" else render_admission(info))
    denied = any(p["verdict"] in ("invalid", "forbidden", "internal") for p in info["policies"])
    sys.exit(1 if denied else 0)


def _complete_types(ctx: click.Context, incomplete: str) -> list[str]:
    """Shell completion of NAME: the InstanceTypes of the live cluster."""
    from runtime.cli.completion import names_of

    return names_of("instancetypes", incomplete, ctx.params.get("kubeconfig"), ctx.params.get("context"))
