"""A misspelt key in a rule test case (or its ``expect``) refuses the suite with file:line:col, in
``accelpolicy test`` and in ``accelpolicy lint`` (which reads rules/tests/ too)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from runtime import ruletests
from runtime.cli import main
from tests.rulelines import shipped_line

RULES = Path(__file__).resolve().parents[2] / "rules"
#: the line of the first case's expect (the key misspelt below)
LINE = shipped_line("rules/tests/admission/pods.yaml", "expect: {allowed: true, patch: []}")


@pytest.fixture()
def misspelt(tmp_path) -> Path:
    copy = tmp_path / "rules"
    shutil.copytree(RULES, copy)
    suite = copy / "tests" / "admission" / "pods.yaml"
    text = suite.read_text()
    suite.write_text(text.replace("expect: {allowed: true, patch: []}", "expect: {allowed: true, pacth: []}", 1))
    return copy


def test_a_misspelt_expect_key_is_refused_with_its_line(misspelt):
    with pytest.raises(ValueError) as refused:
        ruletests.load_cases(misspelt)
    assert str(refused.value) == (f"{misspelt}/tests/admission/pods.yaml:{LINE}:38: cases[0].expect.pacth: unknown key "
                                  "(known: allowed, code, message, patch, reason, rules, warnings)")


def test_lint_reads_the_suites_and_names_the_directory(misspelt):
    result = CliRunner().invoke(main, ["lint", str(misspelt)])
    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == f"reading rules from {misspelt}"
    assert result.stdout == (f"{misspelt}/tests/admission/pods.yaml:{LINE}:38: cases[0].expect.pacth: unknown key "
                             "(known: allowed, code, message, patch, reason, rules, warnings)\n")


def test_minus_v_names_the_rules_directory_read():
    result = CliRunner().invoke(main, ["-v", "derive", "--snapshot", "tests/fixtures/seed/step1", "--rules", str(RULES)])
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[0] == f"reading rules from {RULES}"


def test_the_installed_rules_read_inside_another_checkout_are_said(tmp_path, monkeypatch):
    shutil.copytree(RULES, tmp_path / "rules", ignore=shutil.ignore_patterns("tests"))
    monkeypatch.chdir(tmp_path)
    from runtime.cli import common
    from runtime.cli.common import rules_read
    from runtime.rules.loader import DEFAULT_RULES_DIR

    monkeypatch.setattr(common, "VERBOSE", False)

    runner = CliRunner()
    with runner.isolation() as (_, err, *_rest):
        assert rules_read(None) == DEFAULT_RULES_DIR
        assert err.getvalue().decode() == (
            f"note: reading the installation's rules ({DEFAULT_RULES_DIR}), not ./rules (pass --rules rules "
            "or set ACCELPOLICY_RULES to read those)\n")


def test_a_misspelt_key_in_a_later_suite_of_the_file_is_placed_in_that_suite(tmp_path):
    """pods.yaml holds two suites: the finding points into the second, where the key is."""
    copy = tmp_path / "rules"
    shutil.copytree(RULES, copy)
    suite = copy / "tests" / "admission" / "pods.yaml"
    lines = suite.read_text().splitlines(keepends=True)
    second = [i for i, line in enumerate(lines) if line.startswith("kind: AdmissionTests")][1]
    at = next(i for i in range(second, len(lines)) if lines[i] == "      expect:\n")
    lines.insert(at + 1, "        allowd: true\n")
    suite.write_text("".join(lines))
    with pytest.raises(ValueError) as refused:
        ruletests.load_cases(copy)
    assert str(refused.value) == (f"{suite}:{at + 2}:17: cases[0].expect.allowd: unknown key "
                                  "(known: allowed, code, message, patch, reason, rules, warnings)")
