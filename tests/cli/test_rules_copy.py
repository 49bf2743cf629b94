"""The docs' recipe works unedited (docs/tasks/edit-a-rule.md "1. Edit it and see what it changes"):
``cp -r rules /tmp/my-rules`` is a rules directory whose own suites pass, whatever the copy is called (a
suite names a rule file as ``rules/<file>``)."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

from click.testing import CliRunner

from runtime.cli import main

RULES = Path(__file__).resolve().parents[2] / "rules"


def test_a_copy_named_my_rules_passes_its_suites(tmp_path):
    copy = tmp_path / "my-rules"
    shutil.copytree(RULES, copy)
    result = CliRunner().invoke(main, ["test", str(copy)])
    assert result.exit_code == 0, result.output
    assert re.fullmatch(r"(\d+) passed, 0 failed, \1 cases", result.output.splitlines()[-1]), result.output
