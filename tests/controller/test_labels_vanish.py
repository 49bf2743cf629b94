"""Labels that vanish for a minute (docs/node-facts-robustness.md).

NFD restarts on large clusters strip the feature labels from Nodes and put them back later, while
our NodeFeatures stay. Decision: the NodeFeatures win (they are what NFD copies; pools read the
Node's *effective* labels, docs/agent.md "Labels, annotations and NodeFeatures"), so the pools hold through the gap. Three phases
over the seed cluster after one reconcile (step 4's custom type ``a10g-12c128g`` and an
administrator's own ResourceFlavor included): labels present, gone, back. Each phase plans zero
deletes and zero recreates, and the table at the end is the table at the start.
"""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

from runtime.engine.plan import plan
from runtime.engine.pools.derive import derive
from runtime.engine.policy import Policy
from runtime.engine.snapshot import Snapshot
from runtime.report.tables import render, resolve_kind
from runtime.rules.loader import load_rules
from runtime.snapshots import load_snapshot

STEP4 = Path(__file__).resolve().parents[1] / "fixtures" / "seed" / "step4-custom-type"
ADMIN_FLAVOR = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                "metadata": {"name": "team-a-reserved", "labels": {"example.com/team": "a"}},
                "spec": {"nodeLabels": {"kubernetes.io/hostname": "node-t4-b"}}}


@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy(load_rules())


def _reconciled(policy: Policy) -> list[dict]:
    """The step 4 cluster after the controller applied one reconcile (status included)."""
    snapshot = load_snapshot([STEP4])
    state = derive(policy, snapshot)
    objects = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in snapshot}
    for obj in state.objects() + state.instance_types:
        objects[(obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])] = copy.deepcopy(obj)
    return list(objects.values()) + [ADMIN_FLAVOR]


def _strip_node_feature_labels(policy: Policy, objects: list[dict]) -> list[dict]:
    """What an NFD restart leaves: Nodes without the propagated keys (fit labels are ours, they stay)."""
    prefixes = tuple(policy.labels.propagatedPrefixes)
    out = []
    for obj in objects:
        if obj["kind"] == "Node":
            obj = copy.deepcopy(obj)
            labels = obj["metadata"].get("labels") or {}
            obj["metadata"]["labels"] = {k: v for k, v in labels.items() if not k.startswith(prefixes)}
        out.append(obj)
    return out


def _phase(policy: Policy, objects: list[dict]):
    snapshot = Snapshot.from_objects(objects)
    state = derive(policy, snapshot)
    actions = plan(policy, state, snapshot)
    table = render(resolve_kind("instancetypes"), state.view(policy, "InstanceType", snapshot))
    flavors = [f["metadata"]["name"] for f in state.view(policy, "ResourceFlavor", snapshot)]
    return state, actions, table, flavors


def test_pools_hold_while_nfd_strips_node_labels(policy):
    present = _reconciled(policy)
    gone = _strip_node_feature_labels(policy, present)
    stripped = sum(len(o["metadata"].get("labels") or {}) for o in present if o["kind"] == "Node") - \
        sum(len(o["metadata"].get("labels") or {}) for o in gone if o["kind"] == "Node")
    assert stripped > 20  # the phase really removes the feature labels

    results = [_phase(policy, objects) for objects in (present, gone, present)]
    for state, actions, _, _ in results:
        assert [a for a in actions if a.verb in ("delete", "recreate")] == []
        assert state.flavor_deletes == []
        assert state.created_instance_types == []
        assert "a10g-12c128g" in [it["metadata"]["name"] for it in state.instance_types]
    tables = [table for _, _, table, _ in results]
    assert tables[0] == tables[1] == tables[2]
    assert "a10g-12c128g" in tables[2]
    assert [flavors for _, _, _, flavors in results] == [results[0][3]] * 3
    assert "team-a-reserved" in results[2][3]
    # the end state is the start state, and nothing more was planned than at the start
    assert [(a.verb, a.kind, a.name) for a in results[2][1]] == [(a.verb, a.kind, a.name) for a in results[0][1]]
