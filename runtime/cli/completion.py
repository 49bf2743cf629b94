"""`accelpolicy completion bash|zsh`: the shell completion script (click's), and the resource names
it completes from the live cluster (docs/tasks/ask-the-cluster.md).

``eval "$(accelpolicy completion bash)"`` (or ``zsh``) enables it; ``kubectl-accelpolicy`` completes
the same way under its own name. NAME arguments (``get KIND NAME``, ``explain instancetype NAME``)
complete from what the cluster of ``--kubeconfig``/``--context`` (or ``$KUBECONFIG``) holds; when it
cannot be read, nothing is offered and nothing is printed.
"""
from __future__ import annotations

from pathlib import Path

import click
from click.shell_completion import get_completion_class

PROGRAMS = ("accelpolicy", "kubectl-accelpolicy")


@click.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh"]))
@click.option("--program", type=click.Choice(PROGRAMS), default="accelpolicy", show_default=True,
              help="The program name to complete (kubectl-accelpolicy for the kubectl plugin).")
def command(shell: str, program: str) -> None:
    """Print the shell completion script for bash or zsh (eval it in the shell's rc file)."""
    from runtime.cli import main

    var = "_" + program.replace("-", "_").upper() + "_COMPLETE"
    click.echo(get_completion_class(shell)(main, {}, program, var).source())


def names_of(kind: str, incomplete: str, kubeconfig: Path | str | None, context: str | None) -> list[str]:
    """The names of ``kind`` (kubectl spelling) the live cluster holds that start with ``incomplete``;
    [] when the kind is unknown or the cluster cannot be read. One list request, 500 names a page."""
    from runtime.report.tables import UnknownKindError, resolve_kind

    try:
        table = resolve_kind(kind)
    except UnknownKindError:
        return []
    try:
        from runtime.kube.listing import Needs, list_cluster
        from runtime.kube.session import connect

        session = connect(kubeconfig, context)
        objects = list_cluster(session, Needs((table.kind,))).objects
    except Exception:  # noqa: BLE001 - completion offers nothing rather than printing an error
        return []
    return sorted(
        n for o in objects for n in [(o.get("metadata") or {}).get("name") or ""] if n.startswith(incomplete))
