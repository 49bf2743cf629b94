"""Fit labels of docs/agent.md "Capacity and fit labels", with the spec's table of node states."""
from __future__ import annotations

import copy

import pytest

from runtime.engine.pools.fit import fit_labels
from runtime.snapshots import load_snapshot
from tests.seedfiles import FIXTURES


@pytest.fixture(scope="module")
def devices():
    snapshot = load_snapshot([FIXTURES / "seed" / "common"])
    return {d["metadata"]["name"]: d for d in snapshot.list("Devices")}


def held(devices, node, **entry):
    d = copy.deepcopy(devices[node])
    acc = d["status"]["groups"][0]["accelerators"][0]
    acc.pop("remaining")
    acc.update(entry)
    return d


@pytest.mark.parametrize("state, sliced, shared", [
    ("idle", "1600000", "1"),
    ("slice20", "1280000", "0"),
    ("whole", "0", "0"),
])
def test_node_a10g_states(policy, devices, state, sliced, shared):
    d = {"idle": devices["node-a10g"],
         "slice20": held(devices, "node-a10g", mode=3, allocated=320000, remaining=1280000, allocatedSlices=1),
         "whole": held(devices, "node-a10g", mode=1, allocated=1600000)}[state]
    assert fit_labels(policy, d, managed=True) == {
        "sliced-max-free-units.fit.gpustack.ai/nvidia-a10g": sliced,
        "shared-free-cards.fit.gpustack.ai/nvidia-a10g": shared}


def test_node_t4_b_idle(policy, devices):
    assert fit_labels(policy, devices["node-t4-b"], managed=True) == {
        "sliced-max-free-units.fit.gpustack.ai/nvidia-tesla-t4": "1600000",
        "shared-free-cards.fit.gpustack.ai/nvidia-tesla-t4": "4"}


def test_unmanaged_node_carries_none(policy, devices):
    assert fit_labels(policy, devices["node-a10g"], managed=False) == {}
