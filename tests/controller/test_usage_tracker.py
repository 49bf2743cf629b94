"""The controller's usage rates kept from what changed (runtime/controller/usagetracker.py) equal the rates of
every object read afresh (tests/usagecluster.py ``usage_rates``), over random edits of the watch
caches, and a pass computes again only the nodes that changed."""
from __future__ import annotations

import copy
import random

import pytest

from runtime.controller.usagetracker import UsageTracker
from runtime.engine.pools.derive import derive
from runtime.engine.snapshot import Snapshot
from tests.usagecluster import A10G, A10G_FLAVOR, A10G_POOL, accelerator_ids, base_objects, caches_of, holder, \
    usage_rates

NODES = ("node-a10g", "node-t4-a", "node-t4-b")


def _everything(caches) -> list[dict]:
    return [obj for cache in caches.values() for obj in cache.objects()]


def _compare(policy, tracker, caches, base) -> None:
    snapshot = Snapshot.from_objects([o for o in base if o["kind"] not in caches] + _everything(caches))
    state = derive(policy, snapshot)
    before = tracker.totals.rates.copy()
    full, changed = tracker.update(policy, state, caches)
    want = usage_rates(policy, snapshot, state.node_flavors, state.resource_flavors, state.cluster_queues,
                       by_node=tracker.by_node)
    assert tracker.totals.rates == want
    if not full:   # what it reports changed is exactly what did
        for which in ("charged", "idle", "capacity", "reserved"):
            old, new = getattr(before, which), getattr(want, which)
            differ = {labels for labels in set(old) | set(new) if old.get(labels) != new.get(labels)}
            assert differ <= {labels for w, labels in changed if w == which}
            assert all(changed[(which, labels)] == new.get(labels) for w, labels in changed if w == which)
    return full


def _random_pod(policy, rng: random.Random, n: int) -> dict:
    node = rng.choice(NODES)
    index = rng.randrange(len(accelerator_ids()[node]))
    mode = rng.choice((1, 2, 3))
    credits = rng.choice((160_000, 400_000, 800_000)) if mode == 3 else None
    return holder(policy, f"p{n}", rng.choice(("team-a", "team-b")), node, [(index, mode, credits)],
                  queue=rng.choice((None, "q")), created=f"2026-01-01T00:{n // 60:02d}:{n % 60:02d}Z",
                  phase=rng.choice(("Running", "Running", "Succeeded")))


@pytest.mark.parametrize("by_node", [False, True])
def test_random_edits_keep_the_rates_of_a_full_read(policy, by_node):
    rng = random.Random(43)
    base = base_objects()
    caches = caches_of(base)
    tracker = UsageTracker(by_node)
    _compare(policy, tracker, caches, base)
    for n in range(60):
        roll = rng.random()
        pods = caches["Pod"].objects()
        if roll < 0.45 or not pods:
            caches["Pod"].observe(_random_pod(policy, rng, n))
        elif roll < 0.6:
            gone = rng.choice(pods)["metadata"]
            caches["Pod"].forget(gone["name"], gone["namespace"])
        elif roll < 0.7:
            moved = copy.deepcopy(rng.choice(pods))
            moved["status"] = {"phase": "Failed"}
            caches["Pod"].observe(moved)
        elif roll < 0.8:
            devices = copy.deepcopy(caches["Devices"].get(rng.choice(NODES)))
            accel = rng.choice(devices["spec"]["groups"][0]["accelerators"])
            accel["status"]["unhealthy"] = not accel["status"]["unhealthy"]
            caches["Devices"].observe(devices)
        elif roll < 0.84:   # a managed flip: the node leaves (or rejoins) its flavors and pools
            i = next(i for i, o in enumerate(base) if o["kind"] == "NodeFeature"
                     and o["metadata"]["name"] == f"{rng.choice(NODES)}-gpustack-worker")
            flipped = copy.deepcopy(base[i])
            labels = flipped["spec"]["labels"]
            labels["gpustack.ai/managed"] = "false" if labels["gpustack.ai/managed"] == "true" else "true"
            base[i] = flipped
        elif roll < 0.9:
            caches["LocalQueue"].observe({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                                          "metadata": {"name": "q", "namespace": rng.choice(("team-a", "team-b"))},
                                          "spec": {"clusterQueue": rng.choice(("cq-1", "cq-2"))}})
        else:
            caches["Workload"].observe({
                "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                "metadata": {"name": f"w{n % 3}", "namespace": "team-a"},
                "status": {"conditions": [{"type": "QuotaReserved", "status": rng.choice(("True", "False"))}],
                           "admission": {"clusterQueue": "cq-1", "podSetAssignments": [
                               {"name": "main", "resourceUsage": {"credits.gpustack.ai/nvidia": n * 1000}}]}}})
        _compare(policy, tracker, caches, base)


def test_a_pass_computes_again_only_the_nodes_that_changed(policy):
    base = base_objects()
    caches = caches_of(base)
    tracker = UsageTracker()
    assert _compare(policy, tracker, caches, base) is True
    assert tracker.recomputed == 3
    assert _compare(policy, tracker, caches, base) is False
    assert tracker.recomputed == 0

    def update():
        return tracker.update(policy, derive(policy, Snapshot.from_objects(_everything(caches))), caches)
    caches["Pod"].observe(holder(policy, "slice", "team-a", "node-a10g", [(0, 3, 400_000)]))
    full, changed = update()
    assert (full, tracker.recomputed) == (False, 1)
    charged = ("charged", ("team-a", A10G_POOL, A10G_FLAVOR, A10G, "sliced", ""))
    assert changed == {charged: 0.25, ("idle", (A10G_POOL, A10G_FLAVOR, A10G, "none", "usable")): None,
                       ("capacity", (A10G_POOL, A10G_FLAVOR, A10G, "none", "usable")): None,
                       ("idle", (A10G_POOL, A10G_FLAVOR, A10G, "sliced", "usable")): 0.75,
                       ("capacity", (A10G_POOL, A10G_FLAVOR, A10G, "sliced", "usable")): 1.0}
    assert update() == (False, {}) and tracker.recomputed == 0
    caches["Pod"].forget("slice", "team-a")
    full, changed = update()
    assert changed[charged] is None
