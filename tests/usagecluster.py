"""The seed's four nodes (tests/fixtures/seed/step1) with Pods that hold accelerators through their
allocation annotations, for the usage tests (docs/tasks/report-usage.md "What is charged").

``node-a10g``: one A10G; ``node-t4-a``: one T4; ``node-t4-b``: four T4s. A Pod is built by
:func:`holder` from ``(node, accelerator index, mode, allocated)`` charges. :class:`Scraped` keeps what
a Prometheus scraping a :class:`runtime.controller.usage.UsageMeter` every 15 s of a :class:`Clock`
would hold, and reports a window of it as `accelpolicy usage --snapshot` does.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from functools import partial
from typing import Iterable, Mapping

import yaml

from runtime.controller.usage import FAMILIES, UsageMeter
from runtime.engine.pools.derive import derive
from runtime.engine.pools.usage import Placements, RateTotals, UsageRates, local_queues, node_part, workload_part
from runtime.report.usage import build_report
from runtime.report.usagesource import SnapshotSource, Window
from runtime.engine.policy import Policy
from runtime.engine.snapshot import Snapshot, name_of
from testing.caches import caches_of
from tests.builders import pod
from tests.seedfiles import FIXTURES

BASE = FIXTURES / "seed" / "step1" / "base"
A10G_POOL = "gpustack--nvidia-a10g-linux-amd64"
T4_POOL = "gpustack--nvidia-tesla-t4-linux-amd64"
A10G_FLAVOR = "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d"
T4A_FLAVOR = "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-1d"
T4B_FLAVOR = "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-4d"
A10G, T4 = "NVIDIA-A10G", "Tesla-T4"
GROUPS = {"node-a10g": "a10g", "node-t4-a": "tesla-t4", "node-t4-b": "tesla-t4"}


def base_objects() -> list[dict]:
    """Every object of the seed's step 1 (Nodes, NodeFeatures, Devices, Namespaces, settings)."""
    return [doc for path in sorted(BASE.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]


def accelerator_ids() -> dict[str, list[str]]:
    """node -> its accelerators' ids, in index order."""
    return {d["metadata"]["name"]: [a["id"] for g in d["spec"]["groups"] for a in g["accelerators"]]
            for d in base_objects() if d["kind"] == "Devices"}


def holder(policy, name: str, namespace: str, node: str, charges: list[tuple[int, int, int | None]],
           queue: str | None = None, created: str = "2026-01-01T00:00:00Z", phase: str = "Running") -> dict:
    """A Pod on ``node`` whose container ``main`` holds ``charges``: ``(accelerator index, mode,
    allocated credits or None for the mode's implied charge)``."""
    ids = accelerator_ids()[node]
    entries = [{"id": ids[i], "index": i, "mode": mode, **({"allocated": credits} if credits is not None else {})}
               for i, mode, credits in charges]
    allocation = {"main": [{"id": GROUPS[node], "manufacturer": "nvidia", "accelerators": entries}]}
    return pod(name, namespace, node=node, queue=queue, created=created, phase=phase,
               annotations={policy.key("allocation"): json.dumps(allocation)})


def snapshot_with(objects: list[dict], base: list[dict] | None = None) -> Snapshot:
    """The seed (or ``base``) plus ``objects``."""
    return Snapshot.from_objects((base_objects() if base is None else base) + objects)


def rates_of(policy, objects: list[dict], by_node: bool = False, base: list[dict] | None = None):
    """(snapshot, derived state, UsageRates) of the seed (or ``base``) plus ``objects``."""
    snapshot = snapshot_with(objects, base)
    state = derive(policy, snapshot)
    return snapshot, state, usage_rates(policy, snapshot, state.node_flavors, state.resource_flavors,
                                        state.cluster_queues, by_node=by_node)


def observe(meter: UsageMeter, policy, objects: list[dict], base: list[dict] | None = None) -> None:
    """One pass of the controller over the seed (or ``base``) plus ``objects``, told to ``meter``."""
    everything = (base_objects() if base is None else base) + objects
    meter.observe(policy, derive(policy, Snapshot.from_objects(everything)), caches_of(everything))


def by_pool(table: dict[tuple, float], pool_index: int, view_index: int | None = None) -> dict[tuple, float]:
    """Sum a rates table by its pool label (and view label when given)."""
    out: dict[tuple, float] = {}
    for labels, value in table.items():
        key = (labels[pool_index],) + ((labels[view_index],) if view_index is not None else ())
        out[key] = out.get(key, 0.0) + value
    return out


EPOCH = 1_780_000_000.0   # the test clock's 0, as a Unix time
SCRAPE = 15.0


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Scraped:
    """The samples of every scrape: (family, sorted label pairs) -> [(unix time, value)]."""

    def __init__(self):
        self.series: dict[tuple, list[tuple[float, float]]] = {}

    def scrape(self, meter: UsageMeter, clock: Clock) -> None:
        for family in meter.collect():
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                self.series.setdefault(key, []).append((EPOCH + clock.now, sample.value))

    def run(self, meter: UsageMeter, clock: Clock, until: float, every: float = SCRAPE) -> None:
        """Scrape every ``every`` s (15) from now to ``until`` (both included when on the grid)."""
        while clock.now <= until + 1e-9:
            self.scrape(meter, clock)
            clock.now += every
        clock.now -= every

    def openmetrics(self) -> str:
        by_family: dict[str, list[str]] = {f: [] for f in FAMILIES}
        for (name, labels), points in sorted(self.series.items()):
            text = ",".join(f'{k}="{v}"' for k, v in labels)
            by_family[name.removesuffix("_total")] += [f"{name}{{{text}}} {v} {t}" for t, v in points]
        out = []
        for family in FAMILIES:
            out += [f"# TYPE {family} counter", *by_family[family]]
        return "\n".join(out + ["# EOF"]) + "\n"

    def report(self, tmp_path, start: float, end: float):
        path = tmp_path / "usage.om"
        path.write_text(self.openmetrics())
        window = Window(datetime.fromtimestamp(EPOCH + start, timezone.utc),
                        datetime.fromtimestamp(EPOCH + end, timezone.utc))
        return build_report(SnapshotSource(path), window)


SEED_HOUR = FIXTURES / "usage" / "seed-hour.om"   # docs/tasks/report-usage.md "Run accelpolicy usage"


def seed_hour(policy) -> str:
    """An hour of the seed, scraped every minute from EPOCH (2026-05-28T20:26:40Z): team-a holds a 25 %
    slice of the A10G; team-b a whole T4 through the T4 pool's ClusterQueue (its LocalQueue ``q``),
    whose admitted Workload holds two accelerators of quota (:data:`SEED_HOUR` holds this text)."""
    queue = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
             "metadata": {"name": "q", "namespace": "team-b"}, "spec": {"clusterQueue": T4_POOL}}
    workload = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                "metadata": {"name": "w", "namespace": "team-b"},
                "status": {"conditions": [{"type": "QuotaReserved", "status": "True"}], "admission": {
                    "clusterQueue": T4_POOL, "podSetAssignments": [
                        {"name": "main", "resourceUsage": {"credits.gpustack.ai/nvidia": "3200k"}}]}}}
    pods = [holder(policy, "slice", "team-a", "node-a10g", [(0, 3, 400_000)]),
            holder(policy, "whole", "team-b", "node-t4-b", [(0, 1, None)], queue="q"), queue, workload]
    clock, scraped = Clock(), Scraped()
    meter = UsageMeter(clock=clock)
    observe(meter, policy, pods)
    scraped.run(meter, clock, 3600, every=60)
    return scraped.openmetrics()


def usage_rates(policy: Policy, snapshot: Snapshot, node_flavors: Mapping[str, list[str]],
                resource_flavors: Iterable[dict], cluster_queues: Iterable[dict],
                by_node: bool = False) -> UsageRates:
    """The rates of :mod:`runtime.engine.pools.usage`, every object read afresh, from ``snapshot``
    (Devices, Pods, Nodes, LocalQueues, Workloads) and the derived ``node_flavors``, ``resource_flavors`` and ``cluster_queues`` (a
    :class:`runtime.engine.pools.derive.DesiredState`'s). ``by_node``: the node name ends the label
    values of charged, idle and capacity. What the controller's tracker, which keeps the same totals up
    to date from the changes alone (:mod:`runtime.controller.usagetracker`), must equal."""
    placements = Placements(policy, partial(snapshot.get, "Node"), node_flavors, resource_flavors,
                            cluster_queues)
    queues = local_queues(snapshot.list("LocalQueue"))
    key = policy.key("allocation")
    pods: dict[str, list[dict]] = {}
    for pod in snapshot.list("Pod"):
        node = (pod.get("spec") or {}).get("nodeName")
        if node and key in ((pod.get("metadata") or {}).get("annotations") or {}):
            pods.setdefault(node, []).append(pod)
    totals = RateTotals()
    for devices in snapshot.list("Devices"):
        node = name_of(devices)
        totals.replace(("Devices", node), node_part(policy, devices, pods.get(node, []), placements.of(node),
                                                    queues, (node,) if by_node else ()))
    for wl in snapshot.list("Workload"):
        totals.replace(("Workload", wl["metadata"].get("namespace", ""), name_of(wl)),
                       workload_part(policy, wl))
    return totals.rates
