"""Benchmark of one scrape of the controller's metrics (docs/observability.md "Observability: metrics, logs, Events and the dashboard"): not a test, prints figures.

A synthetic cluster (benchmarks/derive.py ``generate``: 1,000 Nodes by default, their NodeFeatures and
Devices) is derived once; the watch caches of a :class:`runtime.controller.metrics.ControllerMetrics`
registry are filled with those objects plus the derived InstanceTypes (with their status) and
ClusterQueues, as the live controller's caches hold them, and the applier's write log with
``--writes`` new writes per scrape. Reported: the median wall time of ``generate_latest`` over the
registry (the whole ``/metrics`` answer), its size in bytes and series, and the share spent reading
the InstanceType statuses.

Usage: ``.venv/bin/python benchmarks/metrics_scrape.py [--nodes 1000] [--runs 21] [--writes 1000]``
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client import generate_latest  # noqa: E402

from benchmarks.derive import generate  # noqa: E402
from runtime.controller.metrics import ControllerMetrics, view_samples  # noqa: E402
from runtime.controller.reconciler import WATCHED  # noqa: E402
from runtime.engine.pools.derive import derive  # noqa: E402
from runtime.engine.policy import Policy  # noqa: E402
from runtime.engine.snapshot import Snapshot  # noqa: E402
from runtime.kube.applier import Write  # noqa: E402
from runtime.kube.cache import KindCache, WatchedKind  # noqa: E402
from runtime.rules.loader import load_rules  # noqa: E402


def controller_state(nodes: int) -> SimpleNamespace:
    """What ControllerMetrics reads of a controller (caches, applier), filled from a derived cluster."""
    policy = Policy(load_rules())
    objects = generate(nodes)
    state = derive(policy, Snapshot.from_objects(objects))
    objects += state.instance_types + state.cluster_queues + state.resource_flavors
    caches = {kind: KindCache(None, WatchedKind(kind)) for kind in WATCHED}
    for obj in objects:
        cache = caches.get(obj["kind"])
        if cache is not None:
            meta = obj["metadata"]
            cache._items[(meta.get("namespace") or "", meta["name"])] = obj
    return SimpleNamespace(cache=SimpleNamespace(caches=caches), applier=SimpleNamespace(writes=[]), observers=[])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--writes", type=int, default=1000, help="new applier writes counted per scrape")
    args = parser.parse_args(argv)
    controller = controller_state(args.nodes)
    metrics = ControllerMetrics().bind(controller)
    types = controller.cache.caches["InstanceType"].objects()
    batch = [Write("patch", "Node", f"node-{i}") for i in range(args.writes)]
    times, reads = [], []
    for _ in range(args.runs):
        controller.applier.writes.extend(batch)
        start = time.perf_counter()
        text = generate_latest(metrics.registry)
        times.append(time.perf_counter() - start)
        start = time.perf_counter()
        sum(1 for it in types for _ in view_samples(it))
        reads.append(time.perf_counter() - start)
    series = sum(1 for line in text.decode().splitlines() if line and not line.startswith("#"))
    counts = {kind: len(c.objects()) for kind, c in controller.cache.caches.items() if c.objects()}
    print(f"{args.nodes} nodes: caches {counts}")
    print(f"one scrape: median {statistics.median(times) * 1000:.2f} ms (min {min(times) * 1000:.2f}, "
          f"max {max(times) * 1000:.2f}) over {args.runs} runs, {args.writes} new writes each; "
          f"{len(text)} bytes, {series} series; InstanceType status reads {statistics.median(reads) * 1000:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
