"""`accelpolicy` command line: a click group whose subcommands live one per module in this package.

Exit codes shared by every subcommand: 0 success, 1 a policy verdict said no (e.g. `admit` denied),
2 bad input (unreadable snapshot, broken rule file, unknown kind).
"""
from __future__ import annotations

import importlib

import click

# Subcommand modules; each exposes a click command named `command`.
_SUBCOMMANDS = [
    "get",
    "derive",
    "demo",
    "agent",
    "controller",
    "admit",
    "ruletest",
    "webhook",
    "kueueconfig",
    "lint",
    "audit",
    "explain",
    "probe",
    "nodecleanup",
]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="accelpolicy")
def main() -> None:
    """accelpolicy: Kueue pools, four-view capacity and admission policy for accelerator clusters.

    Policy lives in rule files (rules/ by default, --rules DIR to override); this program evaluates
    them against a cluster snapshot or a live cluster.
    """


for _name in _SUBCOMMANDS:
    main.add_command(importlib.import_module(f"runtime.cli.{_name}").command)
