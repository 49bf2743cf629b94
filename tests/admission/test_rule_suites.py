"""Every rule test case under rules/tests/ (AdmissionTests suites), one pytest test per case."""
from __future__ import annotations

from pathlib import Path

import pytest

from runtime.engine.policy import Policy
from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules
from runtime.ruletests import Runner, load_cases

CASES = load_cases(DEFAULT_RULES_DIR)


@pytest.fixture(scope="module")
def runner() -> Runner:
    return Runner(Policy(load_rules()), Path(DEFAULT_RULES_DIR).parent)


def test_suites_are_present():
    suites = {c.suite for c in CASES}
    assert {"pods-seed", "pods-pools", "instances-seed", "instances-pools", "instancetypes", "settings", "mig-instances", "mig-pods", "workloads", "instancetypeflavors"} <= suites
    assert len(CASES) >= 120


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_rule_case(runner: Runner, case):
    result = runner.run(case)
    assert result.passed, "\n".join(result.problems)
