"""Shared fixtures: the repository's rules compiled once per session."""
from __future__ import annotations

import pytest

from runtime.engine.policy import Policy
from runtime.rules.loader import load_rules


@pytest.fixture(scope="session")
def policy() -> Policy:
    return Policy(load_rules())


def pytest_addoption(parser):
    parser.addoption("--reliability-runs", type=int, default=None,
                     help="kill/restart runs of tests/controlplane/test_reliability.py "
                          "(default: $ACCELPOLICY_RELIABILITY_RUNS or 10)")
    parser.addoption("--reliability-seed", type=int, default=None,
                     help="RNG seed of the kill points (default: $ACCELPOLICY_RELIABILITY_SEED or random, printed)")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: minutes-long runs (tests/controlplane/test_reliability.py kill/restart)")
