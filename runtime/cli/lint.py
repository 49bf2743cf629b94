"""`accelpolicy lint DIR`: every problem of every rule file at once (issue 12, item 4).

One line per problem, ``file:line:column field.path: message``, in file, line, column order: YAML,
schema, CEL syntax (the parser's message, at the exact column), CEL names not declared in every
branch, unknown params, lookups, variables, functions and settings. The loader refuses a rules
directory on the same findings. Exit 0 clean, 1 findings, 2 unreadable directory.
"""
from __future__ import annotations

import sys
from pathlib import Path

import click

from runtime.cli.common import fail, rules_cache_options
from runtime.rules.loader import rule_problems


@click.command("lint")
@click.argument("directory", type=click.Path(path_type=Path), metavar="DIR")
@rules_cache_options
def command(directory: Path) -> None:
    """Check a rules directory without loading it: print every problem of every file.

    Each line reads FILE:LINE:COL FIELD.PATH: MESSAGE. Exit 0 when clean, 1 on findings, 2 when DIR
    cannot be read.
    """
    if not directory.is_dir():
        fail(f"{directory}: not a readable rules directory")
    problems, _ = rule_problems(directory)
    for problem in problems:
        click.echo(str(problem))
    if problems:
        click.echo(f"{len(problems)} problem{'s' if len(problems) != 1 else ''} in "
                   f"{len({p.file for p in problems})} file(s)", err=True)
        sys.exit(1)
    click.echo(f"{directory}: clean", err=True)
