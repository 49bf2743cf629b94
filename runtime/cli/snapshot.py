"""`accelpolicy snapshot -o DIR`: what the offline commands read from a cluster, one file per kind.

The kinds of :data:`runtime.cli.source.AUDIT` (every kind ``get``, ``derive``, ``explain``, ``admit`` and
``audit`` read) are listed once each, page by page; of the Secrets only the settings Secret of
rules/settings.yaml is read (by name); ``metadata.managedFields`` is stripped. Each kind is written as a
``v1 List`` to ``DIR/<plural>.yaml`` (``nodes.yaml``, ``instancetypes.yaml``, ...; a kind the server
does not serve gets no file), so ``--snapshot DIR`` replays the cluster and the directory can be
attached to a bug report (docs/tasks/ask-the-cluster.md).
"""
from __future__ import annotations

from pathlib import Path

import click
import yaml

from runtime.cli.common import bad_input_exits, policy_from, rules_option
from runtime.cli.source import AUDIT, read_source


def file_name(kind: str) -> str:
    """``<kind lower-cased, plural>.yaml``, as kubectl's resource names: ``nodes.yaml``, ``devices.yaml``,
    ``storageclasses.yaml``, ``nodefeatures.yaml``."""
    lower = kind.lower()
    return f"{lower + 'es' if lower.endswith('ss') else lower if lower.endswith('s') else lower + 's'}.yaml"


@click.command("snapshot")
@click.option("-o", "--output-dir", "output", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory to write (created; files of the same names are replaced).")
@click.option("--kubeconfig", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Kubeconfig of the cluster (default: $KUBECONFIG, ~/.kube/config, in-cluster).")
@click.option("--context", default=None, help="The kubeconfig context to use (default: its current one).")
@rules_option
@bad_input_exits
def command(output: Path, kubeconfig: Path | None, context: str | None, rules_dir: Path) -> None:
    """Write what the offline commands read from the live cluster to DIR, one file per kind.

    Secrets other than the settings Secret are never read; managedFields are stripped. Replay with
    `accelpolicy get instancetypes --snapshot DIR` (or any command's --snapshot).
    """
    policy = policy_from(rules_dir)
    source = read_source(policy, AUDIT, (), kubeconfig, context, command="snapshot")
    output.mkdir(parents=True, exist_ok=True)
    counts = []
    for kind in AUDIT + ("Secret",):
        if kind in source.missing:
            continue
        items = source.cluster.list(kind)
        body = {"apiVersion": "v1", "kind": "List", "items": items}
        (output / file_name(kind)).write_text(yaml.safe_dump(body, sort_keys=False, width=200))
        counts.append(f"{len(items)} {kind}")
    click.echo(f"wrote {output}: " + ", ".join(counts), err=True)
