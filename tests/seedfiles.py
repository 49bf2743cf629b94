"""Access to the seed (``../shared/seed`` beside the repository, or env ACCELPOLICY_SHARED; located by
testing.localcluster.testing) and kubectl-table rows for column-exact comparison.

Tests that need the seed skip with a clear reason when it is absent (it is present in CI).
"""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from testing.localcluster.testing import parse_table as _parse_table
from testing.localcluster.testing import shared_dir, shared_missing_reason

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"


def seed_file(*parts: str) -> Path:
    """Path of a seed file; skips the calling test when the seed is not beside the repository."""
    shared = shared_dir()
    path = shared.joinpath("seed", *parts) if shared else None
    if path is None or not path.exists():
        pytest.skip(f"seed file {'/'.join(parts)} not found: {shared_missing_reason()}")
    return path


def seed_object(name: str) -> dict:
    return yaml.safe_load(seed_file("objects", name).read_text())


def seed_table(name: str) -> str:
    return seed_file("tables", name).read_text().rstrip("\n")


def parse_table(text: str) -> list[dict[str, str]]:
    """Rows of a kubectl table as {HEADER: cell} (the control-plane tests' parser, rows only)."""
    return _parse_table(text)[1]


def without(rows: list[dict], column: str) -> list[dict]:
    return [{k: v for k, v in row.items() if k != column} for row in rows]


def subset_mismatches(expected, actual, path="") -> list[str]:
    """Fields of ``expected`` missing from or different in ``actual`` (seed objects show a subset)."""
    out = []
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{path}: expected a map, got {actual!r}"]
        for key, value in expected.items():
            out += subset_mismatches(value, actual.get(key), f"{path}.{key}" if path else key)
    elif isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [f"{path}: expected {expected!r}, got {actual!r}"]
        for i, (e, a) in enumerate(zip(expected, actual)):
            out += subset_mismatches(e, a, f"{path}[{i}]")
    elif expected != actual:
        out.append(f"{path}: expected {expected!r}, got {actual!r}")
    return out
