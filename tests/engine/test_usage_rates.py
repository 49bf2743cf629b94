"""What each accelerator is charged for now (runtime/engine/pools/usage.py; docs/tasks/report-usage.md
"What is charged"): physical fractions from the ledger's credits, by namespace, pool, flavor, product and
view; idle and capacity per pool so that charged + idle = capacity; fractions from the rules' data."""
from __future__ import annotations

import shutil

import pytest

from runtime.engine.policy import Policy
from runtime.engine.pools.usage import OUT_OF_SERVICE, USABLE
from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules
from tests.builders import pod
from tests.usagecluster import (A10G, A10G_FLAVOR, A10G_POOL, T4, T4A_FLAVOR, T4B_FLAVOR, T4_POOL, base_objects,
                                by_pool, holder, rates_of)

SLICE_25 = 400_000   # 25 % of one accelerator's 1,600,000 credits (rules/constants.yaml)


def _quarters(policy, namespaces=("team-a", "team-a", "team-b", "team-b")):
    return [holder(policy, f"slice-{i}", ns, "node-a10g", [(0, 3, SLICE_25)], created=f"2026-01-01T00:00:0{i}Z")
            for i, ns in enumerate(namespaces)]


def test_four_quarter_slices_of_one_a10g_charge_one_accelerator_in_view_sliced(policy):
    _, _, rates = rates_of(policy, _quarters(policy))
    assert rates.charged == {
        ("team-a", A10G_POOL, A10G_FLAVOR, A10G, "sliced", ""): 0.5,
        ("team-b", A10G_POOL, A10G_FLAVOR, A10G, "sliced", ""): 0.5}
    assert rates.capacity[(A10G_POOL, A10G_FLAVOR, A10G, "sliced", USABLE)] == 1.0
    assert rates.idle[(A10G_POOL, A10G_FLAVOR, A10G, "sliced", USABLE)] == 0.0


def test_a_whole_t4_and_two_shares_of_another(policy):
    pods = [holder(policy, "whole", "team-a", "node-t4-b", [(0, 1, None)]),
            holder(policy, "share-1", "team-b", "node-t4-b", [(1, 2, None)], created="2026-01-01T00:00:01Z"),
            holder(policy, "share-2", "team-b", "node-t4-b", [(1, 2, None)], created="2026-01-01T00:00:02Z")]
    _, _, rates = rates_of(policy, pods)
    share = policy.constants.share / policy.constants.creditsPerAccelerator   # 160,000 / 1,600,000
    assert rates.charged == {("team-a", T4_POOL, T4B_FLAVOR, T4, "exclusive", ""): 1.0,
                             ("team-b", T4_POOL, T4B_FLAVOR, T4, "shared", ""): pytest.approx(2 * share)}
    assert share == 0.1
    assert rates.idle == {
        (A10G_POOL, A10G_FLAVOR, A10G, "none", USABLE): 1.0,
        (T4_POOL, T4A_FLAVOR, T4, "none", USABLE): 1.0,
        (T4_POOL, T4B_FLAVOR, T4, "exclusive", USABLE): 0.0,
        (T4_POOL, T4B_FLAVOR, T4, "shared", USABLE): pytest.approx(0.8),
        (T4_POOL, T4B_FLAVOR, T4, "none", USABLE): 2.0}


def test_charged_plus_idle_is_capacity_in_every_pool_and_view(policy):
    pods = _quarters(policy)[:3] + [
        holder(policy, "whole", "team-a", "node-t4-b", [(0, 1, None), (1, 1, None)]),
        holder(policy, "share", "team-c", "node-t4-a", [(0, 2, None)]),
        holder(policy, "done", "team-c", "node-t4-b", [(2, 1, None)], phase="Succeeded")]
    _, _, rates = rates_of(policy, pods)
    charged = by_pool(rates.charged, 1, 4)
    idle, capacity = by_pool(rates.idle, 0, 3), by_pool(rates.capacity, 0, 3)
    assert set(capacity) == {(A10G_POOL, "sliced"), (T4_POOL, "exclusive"), (T4_POOL, "shared"), (T4_POOL, "none")}
    for key, installed in capacity.items():
        assert charged.get(key, 0.0) + idle[key] == pytest.approx(installed), key
    assert capacity == {(A10G_POOL, "sliced"): 1.0, (T4_POOL, "exclusive"): 2.0, (T4_POOL, "shared"): 1.0,
                        (T4_POOL, "none"): 2.0}
    assert charged[(A10G_POOL, "sliced")] == 0.75   # a finished Pod holds nothing
    assert charged[(T4_POOL, "exclusive")] == 2.0


def test_an_over_committed_accelerator_charges_its_holders_in_proportion(policy):
    pods = [holder(policy, "big", "team-a", "node-a10g", [(0, 3, 1_200_000)]),
            holder(policy, "more", "team-b", "node-a10g", [(0, 3, 1_200_000)], created="2026-01-01T00:00:01Z")]
    _, _, rates = rates_of(policy, pods)
    assert {labels[0]: v for labels, v in rates.charged.items()} == {"team-a": 0.5, "team-b": 0.5}
    assert rates.idle[(A10G_POOL, A10G_FLAVOR, A10G, "sliced", USABLE)] == 0.0


def test_a_conflicting_charge_is_skipped_as_the_ledger_skips_it(policy):
    pods = [holder(policy, "whole", "team-a", "node-a10g", [(0, 1, None)]),
            holder(policy, "late-slice", "team-b", "node-a10g", [(0, 3, SLICE_25)], created="2026-01-01T00:00:01Z")]
    _, _, rates = rates_of(policy, pods)
    assert rates.charged == {("team-a", A10G_POOL, A10G_FLAVOR, A10G, "exclusive", ""): 1.0}


def test_an_unhealthy_accelerator_is_installed_and_idle_out_of_service(policy):
    objects = base_objects()
    devices = next(d for d in objects if d["kind"] == "Devices" and d["metadata"]["name"] == "node-t4-b")
    devices["spec"]["groups"][0]["accelerators"][3]["status"]["unhealthy"] = True
    _, _, rates = rates_of(policy, [holder(policy, "on-sick", "team-a", "node-t4-b", [(3, 1, None)])], base=objects)
    assert rates.charged == {}
    assert rates.capacity[(T4_POOL, T4B_FLAVOR, T4, "none", OUT_OF_SERVICE)] == 1.0
    assert rates.idle[(T4_POOL, T4B_FLAVOR, T4, "none", OUT_OF_SERVICE)] == 1.0
    assert rates.capacity[(T4_POOL, T4B_FLAVOR, T4, "none", USABLE)] == 3.0


def test_the_admitting_clusterqueue_and_the_node_label(policy):
    queue = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
             "metadata": {"name": "team-a-queue", "namespace": "team-a"}, "spec": {"clusterQueue": A10G_POOL}}
    pods = [holder(policy, "slice", "team-a", "node-a10g", [(0, 3, SLICE_25)], queue="team-a-queue"), queue]
    _, _, rates = rates_of(policy, pods, by_node=True)
    assert rates.charged == {("team-a", A10G_POOL, A10G_FLAVOR, A10G, "sliced", A10G_POOL, "node-a10g"): 0.25}
    assert rates.capacity[(A10G_POOL, A10G_FLAVOR, A10G, "sliced", USABLE, "node-a10g")] == 1.0


def test_an_unmanaged_node_counts_with_no_pool(policy):
    objects = []
    for obj in base_objects():
        if obj["kind"] == "NodeFeature" and obj["metadata"]["name"] == "node-a10g-gpustack-worker":
            obj["spec"]["labels"]["gpustack.ai/managed"] = "false"
        objects.append(obj)
    _, _, rates = rates_of(policy, [holder(policy, "slice", "team-a", "node-a10g", [(0, 3, SLICE_25)])],
                           base=objects)
    assert rates.charged == {("team-a", "", "", A10G, "sliced", ""): 0.25}
    assert rates.capacity[("", "", A10G, "sliced", USABLE)] == 1.0


def test_reserved_quota_of_admitted_workloads(policy):
    def workload(name, credits, reserved="True", finished=None):
        conditions = [{"type": "QuotaReserved", "status": reserved}] + (
            [{"type": "Finished", "status": finished}] if finished else [])
        return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                "metadata": {"name": name, "namespace": "team-a"},
                "status": {"conditions": conditions, "admission": {"clusterQueue": T4_POOL, "podSetAssignments": [
                    {"name": "main", "resourceUsage": {"credits.gpustack.ai/nvidia": credits, "cpu": "8"}}]}}}
    _, _, rates = rates_of(policy, [workload("a", "3200k"), workload("b", 160000), workload("c", "1600k", "False"),
                                    workload("d", "1600k", finished="True")])
    assert rates.reserved == {(T4_POOL, "team-a"): 2.1}


def test_the_fractions_are_the_rules_data(tmp_path):
    """Twenty shares per accelerator, an edit of rules/constants.yaml only: a share charges 0.05."""
    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules)
    constants = rules / "constants.yaml"
    constants.write_text(constants.read_text().replace("sharesPerAccelerator: 10 ", "sharesPerAccelerator: 20 "))
    policy = Policy(load_rules(rules))
    _, _, rates = rates_of(policy, [holder(policy, "share", "team-a", "node-t4-a", [(0, 2, None)])])
    assert rates.charged == {("team-a", T4_POOL, T4A_FLAVOR, T4, "shared", ""): 0.05}


def test_a_pod_without_an_annotation_or_node_is_not_charged(policy):
    _, _, rates = rates_of(policy, [pod("plain", "team-a", node="node-a10g"), pod("pending", "team-a")])
    assert rates.charged == {}
