"""Fixtures of the rule-file tests: a copy of the shipped rules with one edit, linted."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

import pytest

from runtime.rules.loader import rule_problems

RULES = Path(__file__).resolve().parents[2] / "rules"


@pytest.fixture()
def edited_rules(tmp_path) -> Callable[[str, str, str], list[str]]:
    """``edit(file, old, new)``: copy rules/ (less its test suites) to ``tmp_path/rules``, replace the
    first ``old`` of ``file`` (``rules/...``) with ``new``, and return every problem of the copy as
    ``accelpolicy lint`` prints it (no compiled-rules cache)."""
    def edit(file: str, old: str, new: str) -> list[str]:
        copy = tmp_path / "rules"
        if not copy.exists():
            shutil.copytree(RULES, copy, ignore=shutil.ignore_patterns("tests"))
        text = (copy.parent / file).read_text()
        assert old in text, old
        (copy.parent / file).write_text(text.replace(old, new, 1))
        return [str(p) for p in rule_problems(copy, cache=None)[0]]
    return edit
