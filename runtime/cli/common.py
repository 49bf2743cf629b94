"""Options and error handling shared by the CLI subcommands.

Bad input never ends in a traceback: a broken rule file, an unreadable snapshot or an unknown kind
prints one clear message per problem on stderr and exits with code 2.
"""
from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Callable

import click
import yaml

from runtime.engine.policy import Policy
from runtime.engine.snapshot import SnapshotError
from runtime.report.tables import UnknownKindError
from runtime.rules.loader import DEFAULT_RULES_DIR, RuleLoadError, load_rules

EXIT_BAD_INPUT = 2


def rules_option(func: Callable) -> Callable:
    """``--rules DIR`` (default: the repository's rules/, or env ACCELPOLICY_RULES)."""
    return click.option("--rules", "rules_dir", type=click.Path(file_okay=False, path_type=Path),
                        envvar="ACCELPOLICY_RULES", default=DEFAULT_RULES_DIR, show_default=True,
                        help="Directory of rule files (rules/README.md).")(func)


def snapshot_option(func: Callable) -> Callable:
    """``--snapshot PATH`` (repeatable; file, directory or '-')."""
    return click.option("--snapshot", "snapshots", multiple=True, required=True, metavar="PATH",
                        help="Cluster objects: a YAML/JSON file, a directory (read recursively) or '-' "
                             "for stdin. Repeat to layer: later objects replace earlier ones.")(func)


def bad_input_exits(func: Callable) -> Callable:
    """Turn the known bad-input errors into a message on stderr and exit code 2."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except RuleLoadError as exc:
            click.echo("error: rule files refused (the previous rules, if any, stay in force):", err=True)
            for problem in exc.problems:
                click.echo(f"  {problem}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        except (SnapshotError, UnknownKindError) as exc:
            message = exc.args[0] if exc.args else str(exc)
            click.echo(f"error: {message}", err=True)
            sys.exit(EXIT_BAD_INPUT)
    return wrapper


def load_policy(rules_dir: Path) -> Policy:
    """Load and compile the rule files (RuleLoadError on any problem)."""
    return Policy(load_rules(rules_dir))


def emit(objects: list[dict], output: str, as_list: bool = True, stream: bool = False) -> None:
    """Print objects as kubectl does: a ``v1 List`` (or the single object when ``as_list`` is false) in
    YAML or JSON; ``stream`` prints a multi-document YAML stream instead (for ``kubectl apply -f -``)."""
    if stream and output == "yaml":
        click.echo(yaml.safe_dump_all(objects, sort_keys=False, width=200, explicit_start=True).rstrip("\n"))
        return
    payload = {"apiVersion": "v1", "kind": "List", "items": objects} if as_list else objects[0]
    if output == "json":
        click.echo(json.dumps(payload, indent=2))
    else:
        click.echo(yaml.safe_dump(payload, sort_keys=False, width=200).rstrip("\n"))


def warn(messages) -> None:
    for message in messages:
        click.echo(f"warning: {message}", err=True)
