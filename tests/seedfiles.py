"""Access to the seed (``../shared/seed`` beside the repository, or env ACCELPOLICY_SHARED) and to
kubectl-table parsing for column-exact comparison.

Tests that need the seed skip with a clear reason when it is absent (it is present in CI).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"


def shared_dir() -> Path:
    env = os.environ.get("ACCELPOLICY_SHARED")
    return Path(env) if env else REPO.parent / "shared"


def seed_file(*parts: str) -> Path:
    """Path of a seed file; skips the calling test when the seed is not beside the repository."""
    path = shared_dir().joinpath("seed", *parts)
    if not path.exists():
        pytest.skip(f"seed file {path} not found (set ACCELPOLICY_SHARED to the shared/ directory)")
    return path


def seed_object(name: str) -> dict:
    return yaml.safe_load(seed_file("objects", name).read_text())


def seed_table(name: str) -> str:
    return seed_file("tables", name).read_text().rstrip("\n")


def parse_table(text: str) -> list[dict[str, str]]:
    """Rows of a kubectl table as {HEADER: cell}, split at the header's column starts."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = lines[0]
    starts = [i for i, ch in enumerate(header) if ch != " " and (i == 0 or header[i - 2:i] == "  ")]
    names = [header[start:(starts[k + 1] if k + 1 < len(starts) else len(header))].strip()
             for k, start in enumerate(starts)]
    rows = []
    for line in lines[1:]:
        cells = {}
        for k, start in enumerate(starts):
            end = starts[k + 1] if k + 1 < len(starts) else len(line)
            cells[names[k]] = line[start:end].strip()
        rows.append(cells)
    return rows


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
