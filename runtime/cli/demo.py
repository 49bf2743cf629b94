"""`accelpolicy demo`: the seed walkthrough from snapshots, printing each step's InstanceType table."""
from __future__ import annotations

from pathlib import Path

import click

from runtime.cli.common import bad_input_exits, load_policy, rules_option
from runtime.engine.derive import derive
from runtime.report.tables import render, resolve_kind
from runtime.snapshots import load_snapshot

DEFAULT_STEPS = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "seed"
STEPS = (
    ("step1", "Step 1: the initial pools"),
    ("step2-unmanaged", "Step 2: node-a10g's worker NodeFeature patched to gpustack.ai/managed=false"),
    ("step2-readmitted", "Step 2: patched back to true"),
    ("step3-sliced-demo", "Step 3: sliced-demo holds 20 % of the A10G"),
    ("step4-custom-type", "Step 4: the custom type a10g-12c128g applied"),
    ("step4-custom-demo", "Step 4: custom-demo holds the A10G whole"),
    ("step4-deleted-type", "Step 4: a10g-12c128g deleted, custom-demo stopped"),
    ("step5-aware", "Step 5: instance-type-aware-cpu-manufacturer=true"),
    ("step5-repoint", "Step 5: custom-demo repointed to the aware A10G pool"),
)


@click.command("demo")
@click.option("--steps", "steps_dir", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_STEPS,
              show_default=True, help="Directory holding one snapshot directory per seed step.")
@rules_option
@bad_input_exits
def command(steps_dir: Path, rules_dir: Path) -> None:
    """Replay the seed walkthrough from snapshots (tests/fixtures/seed/<step>/) and print
    `kubectl get instancetypes` after each step, as the controller would leave the cluster.

    Step 4's custom type shows the entrance of its own name (gpustack-fnv64-d4c0e6cd72686015); the
    seed's capture shows a stale hash of an older name (spec decision 3)."""
    policy = load_policy(rules_dir)
    table = resolve_kind("instancetypes")
    for step, title in STEPS:
        snapshot = load_snapshot([steps_dir / step])
        state = derive(policy, snapshot)
        click.echo(f"# {title}\n$ kubectl get instancetypes")
        click.echo(render(table, state.view(policy, table.kind, snapshot)))
        click.echo()
