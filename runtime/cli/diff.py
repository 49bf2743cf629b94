"""`accelpolicy diff`: the reload gate's trial of a rules edit, run by an operator before the edit is
committed (docs/rule-authoring.md "How a rules change goes live").

``--rules NEW`` is tried against the rules in force (``--current``, default the installed rules/ or
``ACCELPOLICY_RULES``) on the cluster: the live one without ``--snapshot`` (kubectl's
``--kubeconfig``/``--context``), the ``--snapshot`` files, or both with ``--cluster``
(:func:`runtime.cli.source.read_source`, the kinds the audit reads; docs/tasks/ask-the-cluster.md). Printed,
each section only when it has lines:

- what it does to the pools (:func:`runtime.reload.consequences.consequences`): the pool objects the
  controller would create, change (field by field) or delete, capacity removed per pool and view, pools
  left without flavors, Workloads evicted, flavors in use deleted, Instances stopped;
- ``presets``: existing InstanceTypes whose preset the edit changes, which keep theirs (a preset is
  written when a type is created);
- ``verdicts``: every existing object whose admission verdict changes, with the rule that decides;
- ``costs``: every expression whose cost estimate grew, keyed by its policy and rule
  (:func:`runtime.reload.costs.cost_growth`; a rules directory that cannot be read again prints
  ``costs: not compared (...)``);
- ``refused (<reason>)``: what the reload gate would refuse the edit for; ``held``: why it would be held
  until approved (the hold of the ``--current`` rules, rules/reload.yaml);
- last, ``verdict:`` what the controller's leader would decide: ``serves``, ``held`` or ``refused``.

Exit codes as ``kubectl diff``'s: 0 no differences, 1 differences found (held or refused included, said in
the output), 2 (>1) an error: bad input, rules that do not load, anything unexpected (never a traceback).
"""
from __future__ import annotations

import sys
from pathlib import Path

import click

from runtime.cli.common import bad_input_exits, fail, load_policy
from runtime.cli.source import AUDIT, read_source, source_options
from runtime.rules.loader import DEFAULT_RULES_DIR

def _section(title: str, lines: list[str]) -> None:
    if lines:
        click.echo(f"{title} ({len(lines)}):")
        for line in lines:
            click.echo(f"  {line}")


def preset_lines(current, new, snapshot) -> list[str]:
    """One line per existing accelerated InstanceType whose preset (rules/pools/presets.yaml) the edit
    changes: it keeps the ``unitResources`` it was created with."""
    from runtime.engine.pools.presets import unit_for

    lines = []
    for it in snapshot.list("InstanceType"):
        spec = it.get("spec") or {}
        if not spec.get("acceleratable") or not spec.get("manufacturer"):
            continue
        before = unit_for(current, spec["manufacturer"], spec.get("product") or "")
        after = unit_for(new, spec["manufacturer"], spec.get("product") or "")
        if before != after:
            unit = spec.get("unitResources") or {}
            lines.append(f"InstanceType {it['metadata']['name']} keeps unitResources cpu={unit.get('cpu')} "
                         f"ram={unit.get('ram')}: a preset is written when a type is created; the edited one "
                         f"gives cpu={after.get('cpu')} ram={after.get('ram')} to those created from now on")
    return lines


@click.command("diff")
@click.option("--rules", "rules_dir", type=click.Path(file_okay=False, path_type=Path), required=True,
              metavar="NEW", help="The edited rules directory to try.")
@click.option("--current", "current_dir", type=click.Path(file_okay=False, path_type=Path),
              envvar="ACCELPOLICY_RULES", default=DEFAULT_RULES_DIR, show_default=True,
              help="The rules in force it is compared with.")
@source_options
@bad_input_exits
def command(rules_dir: Path, current_dir: Path, snapshots: tuple[str, ...], cluster: bool,
            kubeconfig: Path | None, context: str | None) -> None:
    """Show what a rules edit changes before it goes live: pools, work, verdicts and costs.

    The reload gate's trial of --rules NEW against --current on the live cluster (or the --snapshot
    files, or both with --cluster): the pool objects the controller would create, change (field by field)
    or delete, the capacity, Workloads and Instances it would take, the presets existing InstanceTypes
    keep, the existing objects whose admission verdict changes with the rule that decides, every
    expression whose cost estimate grew (by policy and rule), and whether the gate would refuse it or hold
    it for an approval. Exit 0 no differences, 1 differences (held and refused included, said in the
    output), 2 an error (as `kubectl diff`).
    """
    from runtime.engine.snapshot import SnapshotError
    from runtime.rules.cel.errors import CelEvalError
    from runtime.rules.loader import RuleLoadError

    try:
        code = _diff(rules_dir, current_dir, snapshots, cluster, kubeconfig, context)
    except (SystemExit, click.exceptions.Exit, click.ClickException, RuleLoadError, SnapshotError,
            CelEvalError):
        raise   # their own words (bad_input_exits)
    except Exception as exc:  # noqa: BLE001 - an error is exit 2 with one line, never a traceback
        fail(f"diff failed: {type(exc).__name__}: {exc}")
    sys.exit(code)


def _diff(rules_dir: Path, current_dir: Path, snapshots, cluster, kubeconfig, context) -> int:
    """Print the trial (module docstring); the exit code: 0 no differences, 1 differences."""
    from runtime.reload.consequences import consequences, hold_reasons
    from runtime.reload.costs import cost_growth
    from runtime.reload.report import refusal_lines
    from runtime.reload.trial import try_generation

    current, new = load_policy(current_dir), load_policy(rules_dir)
    snapshot = read_source(current, AUDIT, snapshots, kubeconfig, context, cluster, "diff").snapshot
    trial = try_generation(current, new.ruleset, snapshot)
    found = consequences(current, new, snapshot)
    for title, lines in found.lines():
        _section(title, lines)
    presets = preset_lines(current, new, snapshot)
    _section("presets", presets)
    _section("verdicts", [str(c) for c in trial.changes])
    costs = cost_growth(current.ruleset, new.ruleset)
    if costs is None:
        click.echo("costs: not compared (a rules directory could not be read again)")
    _section("costs", costs or [])
    held = hold_reasons(found, trial, current.ruleset.get("ReloadGate").hold) if trial.accepted else []
    if not trial.accepted:
        _section(f"refused ({trial.reason})", refusal_lines(None, trial.problems))
    _section("held", held)
    differs = bool(found.lines() or presets or trial.changes or costs or held or not trial.accepted)
    if differs:
        verdict = f"refused ({trial.reason})" if not trial.accepted else \
            "held (until its hash is approved: accelpolicy approve)" if held else "serves"
        click.echo(f"verdict: {verdict}")
    return 1 if differs else 0
