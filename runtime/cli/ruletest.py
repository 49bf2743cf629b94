"""`accelpolicy test RULES_DIR`: run the rule suites under RULES_DIR/tests (docs/tasks/edit-a-rule.md "3. Test
it")."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from runtime.cli.common import fail, policy_from, rules_cache_options
from runtime.ruletests import Runner, load_cases, load_dra_cases, run_dra_case, suite_documents


@click.command("test")
@click.argument("rules_dir", default="rules", type=click.Path(file_okay=False))
@click.option("-k", "match", default="", help="only cases whose suite::name contains this text")
@click.option("-v", "--verbose", is_flag=True, help="list every case, not only failures")
@rules_cache_options
def command(rules_dir, match, verbose):
    """Run every AdmissionTests and DraDriverTests suite under RULES_DIR/tests; exit 1 when a case fails.

    Snapshot paths in suites are relative to RULES_DIR's parent (the repository root).
    """
    policy = policy_from(rules_dir)
    try:
        documents = suite_documents(rules_dir)  # parsed once for both suite kinds
        cases = [c for c in load_cases(rules_dir, documents) if match in c.id]
    except (OSError, ValueError) as exc:
        fail(str(exc))
    try:
        runner = Runner(policy, Path(rules_dir).resolve().parent)
    except KeyError as exc:  # a dangling paramsFrom/builtin
        fail(str(exc.args[0]) if exc.args else str(exc))
    try:
        dra_cases = [c for c in load_dra_cases(rules_dir, documents) if match in c.id]
    except (OSError, ValueError) as exc:
        fail(str(exc))
    results = list(runner.run_all(cases)) + [run_dra_case(policy, c) for c in dra_cases]
    cases = cases + dra_cases
    failed = 0
    for result in results:
        if not result.passed:
            failed += 1
            click.echo(f"FAIL {result.case.id} ({result.case.file})")
            for problem in result.problems:
                click.echo("  " + problem.replace("\n", "\n  "))
        elif verbose:
            click.echo(f"ok   {result.case.id}")
    click.echo(f"{len(cases) - failed} passed, {failed} failed, {len(cases)} cases")
    sys.exit(1 if failed else 0)
