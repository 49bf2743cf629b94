"""`accelpolicy approve`: let a held rules generation serve (docs/rule-authoring.md "How a rules change goes
live").

The controller's leader holds a generation whose consequences pass the hold of the serving rules
(rules/reload.yaml ``hold``) and records ``held:<id>`` on the rules ConfigMap, with why in its status
annotation. This command checks that the generation named is the one held there, then sets the ConfigMap's
``approve`` annotation to it and ``approvedBy`` to the user the API server takes this session for; the
leader serves it at its next poll and records a ``RulesApproved`` Event naming who and when. The same as
``kubectl annotate configmap <name> rules.accelpolicy.dev/approve=<id>``, with the check first.

Exit 0 when approved, 1 when the generation named is not the one held (the verdict is printed), 2 bad input.
"""
from __future__ import annotations

import click

from runtime.cli.common import connect_or_exit, fail, policy_from


@click.command("approve")
@click.argument("generation")
@click.option("--namespace", default="gpustack-system", show_default=True, envvar="KUBERNETES_POD_NAMESPACE",
              help="Namespace of the rules ConfigMap.")
@click.option("--configmap", default="accelpolicy-rules", show_default=True,
              envvar="ACCELPOLICY_RULES_CONFIGMAP", help="The rules ConfigMap.")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), default=None,
              help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
@click.option("--context", default=None, help="kubeconfig context (default: the current one)")
@click.option("--rules", default=None, envvar="ACCELPOLICY_RULES",
              help="rules directory whose rules/reload.yaml names the annotations (default: the installed "
                   "rules/)")
def command(generation: str, namespace: str, configmap: str, kubeconfig: str | None, context: str | None,
            rules: str | None) -> None:
    """Let the held rules generation GENERATION (its content hash id) serve."""
    from runtime.kube.session import KubeApiError
    from runtime.reload.board import Board

    keys = policy_from(rules).ruleset.get("ReloadGate").annotations
    session = connect_or_exit(kubeconfig, context, quiet=True)
    board = Board(session, namespace, configmap, keys=lambda: keys)
    try:
        found = board.read()
    except KubeApiError as exc:
        fail(f"ConfigMap {namespace}/{configmap}: {exc}")
    if not found:
        fail(f"ConfigMap {namespace}/{configmap} not found")
    verdict = board.verdict(found)
    if verdict is None or verdict.outcome != "held" or generation not in (verdict.generation,):
        click.echo(f"generation {generation} is not held on ConfigMap {namespace}/{configmap} (verdict: "
                   f"{verdict or 'none'}); nothing approved", err=True)
        raise SystemExit(1)
    values = {keys.approve: generation, keys.approvedBy: session.username() or "unknown"}
    try:
        session.call("patch", session.ref("ConfigMap").path(namespace=namespace, name=configmap),
                     body={"metadata": {"annotations": values}}, content_type="application/merge-patch+json",
                     query={"fieldManager": "accelpolicy-approve"})
    except KubeApiError as exc:
        fail(f"ConfigMap {namespace}/{configmap}: {exc}")
    status = board.annotations(found).get(keys.status, "")
    click.echo(f"approved generation {generation} as {values[keys.approvedBy]}; it was held:\n{status}")
