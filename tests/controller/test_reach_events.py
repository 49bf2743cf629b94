"""The controller's Events and metrics for pools that cannot keep their promises (docs/audit.md "Pools that cannot schedule", docs/concepts/pools-and-flavors.md "Quota follows the usable accelerators"),
offline: :class:`runtime.controller.reach.ReachWatch` driven pass by pass as the reconciler drives it,
over the audit's seed cluster (labels present, every T4 label stripped from the T4 Nodes, one T4 of
node-t4-b unhealthy, back). The live run is tests/controlplane/test_reach_live.py."""
from __future__ import annotations

from datetime import datetime, timezone

from prometheus_client import CollectorRegistry, generate_latest

from runtime.controller.metrics import ControllerMetrics
from runtime.controller.reach import ReachCollector, ReachWatch
from runtime.engine.pools import derive
from runtime.engine.snapshot import Snapshot
from tests.report.test_reach import F1, F4, POOL, T4, _lacks, _objects, _strip, _unhealthy

NOW = datetime(2026, 12, 1, 13, 30, tzinfo=timezone.utc)


def _pass(policy, watch: ReachWatch, objects: list[dict]) -> list[tuple[str, str, str, str]]:
    snapshot = Snapshot.from_objects(objects)
    events = watch.update(policy, snapshot, derive(policy, snapshot, live=True), NOW)
    return [(e["type"], e["reason"], e["involvedObject"]["name"], e["message"]) for e in events]


def _samples(watch: ReachWatch) -> list[str]:
    registry = CollectorRegistry()
    registry.register(ReachCollector(lambda: watch))
    return [line for line in generate_latest(registry).decode().splitlines() if not line.startswith("#")]


def test_the_controller_registry_has_the_families():
    text = generate_latest(ControllerMetrics(CollectorRegistry()).registry).decode()
    for name in ("accelpolicy_resourceflavor_nodes", "accelpolicy_resourceflavor_selected_nodes",
                 "accelpolicy_resourceflavor_accelerators", "accelpolicy_instancetype_reach_findings"):
        assert f"# TYPE {name} gauge\n" in text


def test_events_once_per_change_within_the_pass_that_sees_it(policy):
    watch = ReachWatch()
    assert _pass(policy, watch, _objects()) == []  # the seed cluster: nothing to say
    stripped = _strip(_objects(), {"node-t4-a", "node-t4-b"})
    assert _pass(policy, watch, stripped) == [
        ("Warning", "FlavorSelectsTooFewNodes", POOL,
         f"ResourceFlavor {F1} selects 0 of its 1 nodes ({_lacks('node-t4-a')}): no Pod of pool {POOL} can land on "
         "it while its NodeFeatures still carry the labels (is nfd-master applying them?)"),
        ("Warning", "FlavorSelectsTooFewNodes", POOL,
         f"ResourceFlavor {F4} selects 0 of its 1 nodes ({_lacks('node-t4-b')}): no Pod of pool {POOL} can land on "
         "it while its NodeFeatures still carry the labels (is nfd-master applying them?)")]
    assert _pass(policy, watch, stripped) == []  # the same state: no new Event
    assert 'accelpolicy_resourceflavor_selected_nodes{resourceflavor="%s"} 0.0' % F4 in _samples(watch)
    assert 'accelpolicy_instancetype_reach_findings{instancetype="%s",rule="flavor-selects-nodes"} 2.0' % POOL \
        in _samples(watch)
    assert _pass(policy, watch, _objects()) == [
        ("Normal", "FlavorSelectsItsNodes", POOL, f"ResourceFlavor {F1} of pool {POOL} selects all its nodes again"),
        ("Normal", "FlavorSelectsItsNodes", POOL, f"ResourceFlavor {F4} of pool {POOL} selects all its nodes again")]
    assert not any("reach_findings{" in s for s in _samples(watch))


def test_an_unhealthy_accelerator_is_an_event_and_a_metric(policy):
    watch = ReachWatch()
    assert _pass(policy, watch, _unhealthy(_objects(), "node-t4-b", 2)) == [
        ("Warning", "AcceleratorsUnusable", POOL,
         "node node-t4-b is labelled with 4 nvidia-tesla-t4 accelerators, its Devices can use 3 (1 unhealthy): the "
         f"quota of pool {POOL} counts 3 for it in ResourceFlavor {F4}")]
    samples = _samples(watch)
    assert f'accelpolicy_resourceflavor_accelerators{{resourceflavor="{F4}",source="labels"}} 4.0' in samples
    assert f'accelpolicy_resourceflavor_accelerators{{resourceflavor="{F4}",source="devices"}} 3.0' in samples
    assert f'accelpolicy_resourceflavor_nodes{{resourceflavor="{F4}"}} 1.0' in samples
    assert _pass(policy, watch, _objects()) == [
        ("Normal", "AcceleratorsUsable", POOL, "node node-t4-b: its Devices can use every accelerator its labels "
                                               f"count in ResourceFlavor {F4} of pool {POOL} again")]
    assert T4  # the label prefix the stripped cluster lacks (tests/report/test_reach.py)


def test_rules_without_an_audit_policy_report_nothing_and_the_pass_goes_on(tmp_path):
    """AuditPolicy is not a required kind: without rules/audit.yaml the controller keeps reconciling."""
    import shutil

    from runtime.engine.policy import Policy
    from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules

    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules)
    (rules / "audit.yaml").unlink()
    policy = Policy(load_rules(rules))
    watch = ReachWatch()
    assert _pass(policy, watch, _strip(_objects(), {"node-t4-a", "node-t4-b"})) == []
    assert f'accelpolicy_resourceflavor_selected_nodes{{resourceflavor="{F4}"}} 0.0' in _samples(watch)
