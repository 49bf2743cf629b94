"""`accelpolicy lint DIR`: every problem of every rule file at once (docs/rule-authoring.md
"Lint: every problem at once").

One line per problem, ``file:line:column field.path: message``, in file, line, column order: YAML,
schema, CEL syntax (the parser's message, at the exact column), CEL names not declared in every
branch, unknown params, lookups, variables, functions and settings. The loader refuses a rules
directory on the same findings. With ``--snapshot PATH``, also every PolicyException in PATH that the
rules' validating policy for exceptions refuses at ``--now`` (docs/concepts/exceptions.md "What may be
excepted"): ``PolicyException <namespace>/<name>: <field error>``. Exit 0 clean, 1 findings, 2 unreadable
directory or snapshot.
"""
from __future__ import annotations

import sys
from pathlib import Path

import click

from runtime.cli.common import fail, now_option, rules_cache_options
from runtime.rules.loader import rule_problems


@click.command("lint")
@click.argument("directory", type=click.Path(path_type=Path), metavar="DIR")
@click.option("--costs", "costs", type=int, default=None, is_flag=False, flag_value=20, metavar="[N]",
              help="also list the N (default 20) most costly CEL expressions: worst-case cost estimate, "
                   "file:line:col, field, text")
@click.option("--types/--no-types", default=True, show_default=True,
              help="the CEL type and cost checks (off: names and syntax only, to measure what they cost)")
@click.option("--snapshot", "snapshots", multiple=True, metavar="PATH",
              help="also judge the PolicyExceptions in PATH (file, directory or -; repeatable) with these "
                   "rules")
@now_option
@rules_cache_options
def command(directory: Path, costs: int | None, types: bool, snapshots: tuple[str, ...], now) -> None:
    """Check a rules directory without loading it: print every problem of every file.

    The first line names the directory read. Each problem reads FILE:LINE:COL FIELD.PATH: MESSAGE:
    YAML, schema, CEL syntax and nesting, names, types, keys and worst-case cost (the limit of
    rules/cel.yaml). Exit 0 when clean, 1 on findings, 2 when DIR cannot be read.
    """
    if not directory.is_dir():
        fail(f"{directory}: not a readable rules directory")
    click.echo(f"reading rules from {directory}", err=True)
    found: list = []
    problems, _ = rule_problems(directory, cache=None if costs else True, types=types, costs=found)
    problems = [str(p) for p in problems] + _suite_problems(directory)
    if snapshots and not problems:
        problems += _exception_problems(directory, snapshots, now)
    if costs:
        for entry in sorted(found, key=lambda e: -e.cost)[:costs]:
            text = " ".join(entry.source.split())
            click.echo(f"{entry.cost:>12,.0f}  {entry.file}:{entry.line}:{entry.column} {entry.path}: "
                       f"{text if len(text) <= 100 else text[:97] + '...'}")
    for problem in problems:
        click.echo(problem)
    if problems:
        click.echo(f"{len(problems)} problem{'s' if len(problems) != 1 else ''} in "
                   f"{len({p.split(':', 1)[0] for p in problems})} file(s)", err=True)
        sys.exit(1)
    click.echo(f"{directory}: clean", err=True)


def _exception_problems(directory: Path, snapshots: tuple[str, ...], now) -> list[str]:
    """``PolicyException <namespace>/<name>: <error>`` for every refusal of the rules' policy for
    PolicyExceptions (the webhook's, judged as a CREATE at ``now``) of each one in ``snapshots``."""
    from runtime.cli.common import load_policy, snapshot_from
    from runtime.engine.admission import AdmissionEngine, admission_view
    from runtime.engine.admission.exceptions import EXCEPTION_KIND
    from runtime.report.audit import audited_requests

    policy = load_policy(directory)
    snapshot = snapshot_from(snapshots)
    engine = AdmissionEngine(policy)
    view = admission_view(policy, snapshot, derive_state=False)
    out = []
    for name, obj, request in audited_requests(engine, snapshot):
        if obj.get("kind") != EXCEPTION_KIND or request is None:
            continue
        outcome = engine.run(name, request, view, now=now)
        errors = [e.render() for e in outcome.errors] + ([outcome.denial[2]] if outcome.denial else [])
        out += [f"PolicyException {request.namespace}/{request.name}: {error}" for error in errors]
    return out


def _suite_problems(directory: Path) -> list[str]:
    """The rule test suites under ``DIR/tests`` parsed and their keys checked (``accelpolicy test``
    refuses the same): the first problem, ``file:line:col: ...``; none when they read clean."""
    from runtime import ruletests

    if not (directory / "tests").is_dir():
        return []
    try:
        documents = ruletests.suite_documents(directory)
        ruletests.load_cases(directory, documents)
        ruletests.load_dra_cases(directory, documents)
    except (OSError, ValueError) as exc:
        return [str(exc)]
    return []
