"""Shared fixtures: the repository's rules compiled once per session."""
from __future__ import annotations

import pytest

from runtime.engine.policy import Policy
from runtime.rules.loader import load_rules


@pytest.fixture(scope="session")
def policy() -> Policy:
    return Policy(load_rules())
