"""`accelpolicy derive --snapshot PATH`: every object the controller would write, for kubectl apply."""
from __future__ import annotations

from pathlib import Path

import click

from runtime.cli.common import bad_input_exits, emit, load_policy, rules_option, warn
from runtime.cli.source import DERIVE, read_source, source_options
from runtime.engine.pools import derive


@click.command("derive")
@source_options
@rules_option
@click.option("-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True)
@bad_input_exits
def command(snapshots: tuple[str, ...], cluster: bool, kubeconfig: Path | None, context: str | None,
            rules_dir: Path, output: str) -> None:
    """Print the derived objects as one stream that `kubectl apply -f -` accepts.

    ResourceFlavors, the AdmissionCheck, the derived InstanceTypes this reconcile creates
    (create-only: existing types are never rewritten), ClusterQueues, LocalQueues and the
    InstanceTypeFlavor catalog. Flavors the controller would delete are listed on stderr.
    Without --snapshot: derived from the live cluster.
    """
    policy = load_policy(rules_dir)
    source = read_source(policy, DERIVE, snapshots, kubeconfig, context, cluster, "derive")
    # live: queue phases as Kueue reports them now
    state = derive(policy, source.snapshot, live=source.live, settings_namespace=source.settings_namespace)
    warn(state.warnings)
    for name in state.flavor_deletes:
        click.echo(f"would delete: resourceflavor.kueue.x-k8s.io/{name} (no managed node contributes)",
                   err=True)
    emit(state.objects(), output, stream=True)
