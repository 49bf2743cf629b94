"""`accelpolicy diff`: the reload gate's trial of a rules edit, run by an operator before the edit is
committed (docs/rule-authoring.md "How a rules change goes live").

``--rules NEW`` is tried against the rules in force (``--current``, default the installed rules/ or
``ACCELPOLICY_RULES``) on the cluster: the live one without ``--snapshot`` (kubectl's
``--kubeconfig``/``--context``), the ``--snapshot`` files, or both with ``--cluster``
(:func:`runtime.cli.source.read_source`, the kinds the audit reads; docs/tasks/ask-the-cluster.md). Printed,
each section only when it has lines:

- ``pool objects``: what the controller would write (its planner, :func:`runtime.engine.plan.plan`)
  once the cluster reconciled under the current rules (:func:`runtime.gate.reconciled`) gets the new
  ones: ``created KIND [ns/]name``, ``changed KIND [ns/]name: <field diff>`` (the audit's drift words:
  ``+key=value``, ``-key=value``, ``path: old -> new``), ``deleted KIND [ns/]name``;
- ``verdicts``: every existing object whose admission verdict changes, with the rule that decides;
- ``costs``: every expression whose cost estimate grew (:func:`runtime.gate.cost_growth`; a
  rules directory that cannot be read again prints ``costs: not compared (...)``);
- ``refused``: what the reload gate would refuse the edit for (a failing rule suite, an evaluation
  error on an existing object, the ``maxNewDenials`` hold).

Exit codes as ``kubectl diff``'s: 0 no differences, 1 differences found, 2 (>1) an error: bad input,
rules that do not load, or an edit the reload gate would refuse for an error (not for the hold).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from runtime.cli.common import bad_input_exits, load_policy
from runtime.cli.source import AUDIT, read_source, source_options
from runtime.rules.loader import DEFAULT_RULES_DIR

POOL_KINDS = ("ResourceFlavor", "AdmissionCheck", "InstanceType", "ClusterQueue", "LocalQueue",
              "InstanceTypeFlavor")
_WRITES = {"create": "created", "delete": "deleted"}


def _name(kind: str, namespace: str, name: str) -> str:
    return f"{kind} {namespace + '/' if namespace else ''}{name}"


def _compared(obj: dict) -> dict:
    """What a write changes on a pool object: its labels, annotations, spec and status."""
    meta = obj.get("metadata") or {}
    out = {k: obj[k] for k in ("spec", "status") if k in obj}
    out.update({f"metadata.{k}": meta[k] for k in ("labels", "annotations") if meta.get(k)})
    return out


def pool_changes(current, new, snapshot) -> list[str]:
    """One line per pool object the controller writes when ``new`` replaces ``current`` (module docstring),
    in the planner's order: the writes of its plan under ``new`` that its plan under ``current`` on the
    same reconciled cluster does not make (a status it keeps either way is no change)."""
    from runtime.engine.plan import plan
    from runtime.engine.pools import derive
    from runtime.gate import reconciled

    cluster = reconciled(current, snapshot)
    baseline = {_write(a) for a in plan(current, derive(current, cluster), cluster)}
    lines, seen = [], set()
    for action in plan(new, derive(new, cluster), cluster):
        key = (action.kind, action.namespace, action.name)
        if action.kind not in POOL_KINDS or key in seen or _write(action) in baseline:
            continue
        seen.add(key)
        line = _line(action, cluster.get(action.kind, action.name, action.namespace))
        if line:
            lines.append(line)
    return lines


def _write(action) -> tuple:
    return (str(action.verb), action.kind, action.namespace, action.name,
            json.dumps(action.body, sort_keys=True))


def _line(action, live: dict | None) -> str:
    """``created``/``deleted KIND name``, or ``changed KIND name: <field diff>`` ("" when nothing differs)."""
    from runtime.report.audit import field_diff

    name = _name(action.kind, action.namespace, action.name)
    verb = _WRITES.get(str(action.verb), "changed" if live is not None else "created")
    if verb != "changed":
        return f"{verb} {name}"
    body = action.body or {}
    after = _compared({**live, **body,
                       "metadata": {**(live.get("metadata") or {}), **(body.get("metadata") or {})}})
    diff = field_diff(_compared(live), after)
    return f"changed {name}: {diff}" if diff else ""


def _section(title: str, lines: list[str]) -> None:
    if lines:
        click.echo(f"{title} ({len(lines)}):")
        for line in lines:
            click.echo(f"  {line}")


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
    """Show what a rules edit changes before it goes live: pool objects, verdicts and costs.

    The reload gate's trial of --rules NEW against --current on the live cluster (or the --snapshot
    files, or both with --cluster): the pool
    objects the controller would create, change (field by field) or delete, the existing objects whose
    admission verdict changes with the rule that decides, every expression whose cost estimate grew,
    and what the gate would refuse the edit for. Exit 0 no differences, 1 differences, 2 an error
    (as `kubectl diff`).
    """
    from runtime.gate import cost_growth, try_generation

    current, new = load_policy(current_dir), load_policy(rules_dir)
    snapshot = read_source(current, AUDIT, snapshots, kubeconfig, context, cluster, "diff").snapshot
    trial = try_generation(current, new.ruleset, snapshot)
    pools = pool_changes(current, new, snapshot)
    costs = cost_growth(current.ruleset, new.ruleset)
    _section("pool objects", pools)
    _section("verdicts", [str(c) for c in trial.changes])
    if costs is None:
        click.echo("costs: not compared (a rules directory could not be read again)")
    _section("costs", costs or [])
    _section(f"refused ({trial.reason})" if trial.reason else "refused", trial.problems)
    if trial.reason not in (None, "held"):
        sys.exit(2)
    sys.exit(1 if pools or trial.changes or costs else 0)
