"""`accelpolicy audit`: judge what a cluster holds, offline (``--snapshot``) or live (runtime.cli.source).

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

from runtime.cli.common import bad_input_exits, emit, load_policy, now_option, rules_option
from runtime.cli.source import AUDIT, read_source, source_options
from runtime.report.audit import audit
from runtime.report.results import reports, table


@click.command("audit")
@source_options
@rules_option
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml", "html"]), default="table",
              show_default=True)
@click.option("--show-pass", is_flag=True, help="table: list pass and skip rows too")
@now_option
@bad_input_exits
def command(snapshots: tuple[str, ...], cluster: bool, kubeconfig: Path | None, context: str | None,
            rules_dir: Path, output: str, show_pass: bool, now) -> None:
    """Judge every existing object with the admission rules and report drift from the derived state.

    Results are pass, fail, warn, error or skip, each with its policy, rule, object, field and message.
    -o yaml prints openreports.io Report (one per namespace) and ClusterReport objects with summary
    counts. A rule a PolicyException lifts at --now is skip, naming the exception. Exit 0 when nothing
    fails, 1 when a result is fail or error, 2 on bad input.
    """
    policy = load_policy(rules_dir)
    snapshot = read_source(policy, AUDIT, snapshots, kubeconfig, context, cluster, "audit").snapshot
    results = audit(policy, snapshot, now=now)
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
