"""Shared fixtures: the repository's rules compiled once per session.

The session keeps compiled rules in a compiled-rules cache of its own (ACCELPOLICY_RULES_CACHE, unless
set already), never the user's: the first load of a rules directory compiles it, later loads (in this
process and in the commands the tests run) come from the cache, so every test also holds the cache to
giving what a compile gives.
"""
from __future__ import annotations

import os
import shutil
import tempfile

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


_RULES_CACHE: list[str] = []


def pytest_configure(config):
    if not os.environ.get("ACCELPOLICY_RULES_CACHE"):
        _RULES_CACHE.append(tempfile.mkdtemp(prefix="accelpolicy-rules-cache-"))
        os.environ["ACCELPOLICY_RULES_CACHE"] = _RULES_CACHE[0]
    config.addinivalue_line("markers", "slow: minutes-long runs (tests/controlplane/test_reliability.py kill/restart)")


def pytest_unconfigure(config):
    for directory in _RULES_CACHE:
        shutil.rmtree(directory, ignore_errors=True)
