"""Accelerator health judged by rules (docs/concepts/out-of-service.md "Health", rules/health.yaml): an XID
of the fatal list, an uncorrectable ECC error or a pending row remap makes an accelerator unhealthy, an
application XID does not; it returns only after its clean period, longer for a repeat; every transition is
an Event on the node's Devices naming the device, the fact and the rule; the labels never move (decision 26).

The agent runs without a cluster (its last Devices is the history) on recorded facts with injected health
facts (probes/fake.py), on a clock the test moves.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from probes.fake import RecordedBackend, recorded
from runtime.agent.runner import NodeAgent
from runtime.engine.devices.health import judge
from runtime.model.facts import HealthFacts
from tests.agent.conftest import facts, seed_node

T0 = datetime(2026, 11, 29, 21, 0, 0, tzinfo=timezone.utc)
T4B = [f"GPU-3f6e8b21-90c4-4d7a-b5e2-1a9c8d7e6f0{i}" for i in range(4)]
COUNT = "acceleratable.feature.gpustack.ai/nvidia-tesla-t4.count"


class Clock:
    def __init__(self):
        self.now = T0

    def __call__(self):
        return self.now

    def at(self, seconds: float) -> None:
        self.now = T0 + timedelta(seconds=seconds)


def stamp(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def agent(policy):
    clock = Clock()
    backend = RecordedBackend(recorded("node-t4-b"))
    a = NodeAgent(policy, backend, "node-t4-b", node=seed_node("node-t4-b", labels={"gpustack.ai/managed": "true"}),
                  clock=clock)
    return a, backend, clock


def _status(plan, index: int) -> dict:
    return plan.devices["spec"]["groups"][0]["accelerators"][index]["status"]


def _in_ledger(plan) -> list[int]:
    return [a["index"] for a in plan.devices["status"]["groups"][0]["accelerators"]]


def _events(plan) -> list[tuple[str, str, str, str]]:
    return [(e.type, e.kind, e.name, e.reason) for e in plan.events]


def test_a_fatal_xid_makes_a_device_unhealthy_until_its_clean_period_ends(agent):
    a, backend, clock = agent
    backend.inject(T4B[2], xid=79)
    plan = a.reconcile(dry_run=True)
    assert _status(plan, 2)["unhealthy"] is True
    assert _status(plan, 2)["health"] == {"fact": "xid 79", "rule": "fatal-xid", "lastFailure": stamp(0), "strikes": 1}
    assert _in_ledger(plan) == [0, 1, 3]
    assert plan.device_manager["spec"]["labels"][COUNT] == "4"          # decision 26
    assert plan.node_patch["status"]["capacity"]["nvidia.com/gpu.sliced.units"] == "4800k"
    assert _events(plan) == [("Warning", "Devices", "node-t4-b", "AcceleratorUnhealthy")]
    assert plan.events[0].message == (
        f"accelerator {T4B[2]} (index 2) of node node-t4-b is unhealthy: xid 79 (rule fatal-xid); out of service "
        f"until at least {stamp(600)} (failure 1 in the repeat window)")
    assert [(m.uuid, m.to, m.fact, m.rule) for m in plan.health_transitions] == [(T4B[2], "unhealthy", "xid 79", "fatal-xid")]
    # the event was read once; the next pass reads no fact: the clean period starts (600 s, rules/health.yaml)
    clock.at(30)
    plan = a.reconcile(dry_run=True)
    assert _status(plan, 2)["unhealthy"] is True and _status(plan, 2)["health"]["until"] == stamp(630)
    assert plan.events == [] and a.service.wake_at == T0 + timedelta(seconds=630)
    clock.at(629)
    assert _status(a.reconcile(dry_run=True), 2)["unhealthy"] is True
    clock.at(630)
    plan = a.reconcile(dry_run=True)
    assert _status(plan, 2)["unhealthy"] is False
    assert _in_ledger(plan) == [0, 1, 2, 3]
    assert _events(plan) == [("Normal", "Devices", "node-t4-b", "AcceleratorHealthy")]
    assert plan.events[0].message == (f"accelerator {T4B[2]} (index 2) of node node-t4-b is back in service: no fact "
                                      f"of rule fatal-xid for its clean period (ended {stamp(630)})")


def test_an_application_xid_is_no_failure(agent):
    a, backend, _ = agent
    backend.inject(T4B[1], xid=13)
    plan = a.reconcile(dry_run=True)
    assert _status(plan, 1) == {"unhealthy": False, "logicalSliced": {"count": 128, "coresPercentageOvercommit": True},
                                "physicalSliced": {"count": 0}}
    assert plan.events == []


@pytest.mark.parametrize("fact, rule, shown", [
    ({"eccUncorrectableVolatile": 2}, "uncorrectable-ecc", "eccUncorrectableVolatile 2"),
    ({"remappedRowsPending": True}, "row-remap-pending", "remappedRowsPending"),
    ({"retiredPagesPending": True}, "retired-pages-pending", "retiredPagesPending"),
    ({"remappedRowsFailure": True}, "row-remap-failure", "remappedRowsFailure"),
])
def test_counters_and_pending_remaps_hold_the_device_out_while_they_read(agent, fact, rule, shown):
    a, backend, clock = agent
    backend.inject(T4B[0], **fact)
    first = a.reconcile(dry_run=True)
    assert (_status(first, 0)["unhealthy"], _status(first, 0)["health"]["rule"]) == (True, rule)
    clock.at(3600 * 5)              # still read hours later: still out, the record unchanged (no write per pass)
    later = a.reconcile(dry_run=True)
    assert _status(later, 0) == _status(first, 0) and later.events == []
    assert _status(later, 0)["health"]["fact"] == shown
    backend.recover()               # the GPU was reset: the clean period starts now
    clock.at(3600 * 5 + 1)
    assert _status(a.reconcile(dry_run=True), 0)["health"]["until"] == stamp(3600 * 5 + 601)


def test_a_device_that_fails_again_within_the_window_stays_out_longer(agent):
    a, backend, clock = agent
    backend.inject(T4B[3], xid=48)
    a.reconcile(dry_run=True)
    clock.at(10)
    a.reconcile(dry_run=True)               # clean period to 610
    clock.at(610)
    assert _status(a.reconcile(dry_run=True), 3)["unhealthy"] is False
    clock.at(1800)                          # again within the hour: a repeat, twice the clean period
    backend.inject(T4B[3], xid=79)
    plan = a.reconcile(dry_run=True)
    assert _status(plan, 3)["health"] == {"fact": "xid 79", "rule": "fatal-xid", "lastFailure": stamp(1800),
                                          "strikes": 2}
    clock.at(1801)
    assert _status(a.reconcile(dry_run=True), 3)["health"]["until"] == stamp(1801 + 1200)
    clock.at(1801 + 1199)
    assert _status(a.reconcile(dry_run=True), 3)["unhealthy"] is True
    clock.at(1801 + 1200)
    assert _status(a.reconcile(dry_run=True), 3)["unhealthy"] is False
    # a failure read again during its clean period counts as a repeat too
    clock.at(1801 + 1200 + 3600 * 2)        # past the repeat window: forgotten, the record is gone
    assert "health" not in _status(a.reconcile(dry_run=True), 3)


def test_the_history_comes_from_the_devices_so_a_restarted_agent_keeps_it(policy):
    f = facts("node-t4-b")
    f.accelerators[1].health = HealthFacts(xids=[95])
    records, moves, _ = judge(policy, f.accelerators, None, T0)
    assert records == {T4B[1]: {"fact": "xid 95", "rule": "fatal-xid", "lastFailure": stamp(0), "strikes": 1,
                                "unhealthy": True}}
    devices = {"spec": {"groups": [{"accelerators": [
        {"id": T4B[1], "status": {"unhealthy": True, "health": {k: v for k, v in records[T4B[1]].items()
                                                                if k != "unhealthy"}}}]}]}}
    f.accelerators[1].health = None
    later, moves, wake = judge(policy, f.accelerators, devices, T0 + timedelta(seconds=5))
    assert later[T4B[1]]["until"] == stamp(605) and later[T4B[1]]["unhealthy"] is True and moves == []
    assert wake == T0 + timedelta(seconds=605)


def test_a_lost_device_returns_after_the_clean_period_too(agent):
    a, backend, clock = agent
    backend.lose(T4B[0])
    assert _status(a.reconcile(dry_run=True), 0)["health"]["rule"] == "lost"
    backend.recover()
    clock.at(1)
    assert _status(a.reconcile(dry_run=True), 0)["unhealthy"] is True
    clock.at(601)
    assert _status(a.reconcile(dry_run=True), 0)["unhealthy"] is False


def test_each_transition_counts_in_the_agents_metric(agent):
    from prometheus_client import generate_latest

    from runtime.agent.metrics import AgentMetrics
    a, backend, clock = agent
    metrics = AgentMetrics().bind(a)
    backend.inject(T4B[2], xid=79)
    a.reconcile(dry_run=True)
    clock.at(1)
    a.reconcile(dry_run=True)
    clock.at(601)
    a.reconcile(dry_run=True)
    text = generate_latest(metrics.registry).decode()
    for to in ("unhealthy", "healthy"):
        assert (f'accelpolicy_agent_accelerator_health_transitions_total{{accelerator="{T4B[2]}",node="node-t4-b",'
                f'rule="fatal-xid",to="{to}"}} 1.0') in text
    assert f'accelpolicy_agent_accelerator_healthy{{accelerator="{T4B[2]}",group="tesla-t4",node="node-t4-b"}} 1.0' in text
