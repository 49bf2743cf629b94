"""Shared fixtures of the agent tests: the loaded policy, seed objects, and a planner over recorded facts."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from probes.fake import load_document, recorded
from runtime.engine.devices.agentplan import plan_node
from runtime.engine.policy import Policy
from runtime.engine.settings import resolve
from runtime.model.facts import parse_facts
from runtime.rules.loader import load_rules
from testing.localcluster.testing import shared_dir, shared_missing_reason

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "seed" / "common"
CAPACITY_CPU = {"node-cpu": "16", "node-a10g": "4", "node-t4-a": "4", "node-t4-b": "48", "node-h100": "224",
                "node-l4": "16", "node-a100": "96"}


@pytest.fixture(scope="session")
def policy() -> Policy:
    return Policy(load_rules())


@pytest.fixture(scope="session")
def defaults(policy):
    return resolve(policy.settings, {})


def load_all(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def fixture_object(file: str, name: str) -> dict:
    """One object by metadata.name from tests/fixtures/seed/common/<file>."""
    for doc in load_all(FIXTURES / file):
        if doc["metadata"]["name"] == name:
            return doc
    raise KeyError(f"{file} has no object {name}")


def seed_object(file: str) -> dict:
    base = shared_dir()
    if base is None:
        pytest.skip(shared_missing_reason())
    return load_all(base / "seed" / "objects" / file)[0]


def facts(stem: str):
    return parse_facts(load_document(recorded(stem)), stem)


def seed_node(name: str, cpu: str | None = None, labels: dict | None = None, capacity: dict | None = None) -> dict:
    """A Node as kubelet leaves it (os/arch labels, capacity.cpu), before the agent ran."""
    node_labels = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
    node_labels.update(labels or {})
    cap = {"cpu": cpu or CAPACITY_CPU[name]}
    cap.update(capacity or {})
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": f"uid-{name}", "labels": node_labels}, "status": {"capacity": cap}}


@pytest.fixture
def plan(policy, defaults):
    """plan(stem, **kw): the AgentPlan for recorded facts ``stem`` on its seed Node."""
    def _plan(stem, node_labels=None, settings=None, capacity=None, **kw):
        f = facts(stem)
        return plan_node(policy, f, seed_node(f.node, labels=node_labels, capacity=capacity), settings or defaults, **kw)
    return _plan
