"""Helpers shared by the admission subcommands: loading rules and snapshots with exit code 2."""
from __future__ import annotations

import sys

import click

from runtime.engine.policy import Policy
from runtime.engine.snapshot import SnapshotError
from runtime.rules.loader import RuleLoadError, load_rules
from runtime.snapshots import load_snapshot


def fail(message: str) -> "NoReturn":  # noqa: F821
    """Print ``message`` to stderr and exit 2 (bad input)."""
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


def policy_from(rules: str | None) -> Policy:
    """``Policy(load_rules(rules))``; a broken rule file exits 2 listing every problem."""
    try:
        return Policy(load_rules(rules))
    except RuleLoadError as exc:
        fail(str(exc))


def engine_from(policy: Policy):
    """The AdmissionEngine of ``policy``; a dangling ``paramsFrom``/``builtin`` exits 2."""
    from runtime.engine.admission import AdmissionEngine

    try:
        return AdmissionEngine(policy)
    except KeyError as exc:
        fail(str(exc.args[0]) if exc.args else str(exc))


def snapshot_from(paths: tuple[str, ...]):
    """The snapshot of ``paths`` (None when empty); unreadable input exits 2."""
    if not paths:
        return None
    try:
        return load_snapshot(list(paths))
    except SnapshotError as exc:
        fail(str(exc))
