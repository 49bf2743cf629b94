"""Benchmark of `accelpolicy audit` and of a rules hot reload (docs/audit.md "Auditing a cluster: `accelpolicy audit`, reports, the background audit"): not a test, prints figures.

1. The seed cluster with its edits (tests/fixtures/audit/seed-cluster): median time of one ``audit``.
2. A synthetic reconciled cluster (benchmarks/derive.py ``generate``, 1,000 nodes, plus the derived
   objects) with 5,000 Pods carrying a queue label (varied requests: whole, shared, sliced, some
   invalid), spread over 20 namespaces and bound to nodes: time of one ``audit`` (runs given).
3. Reload: a rules copy edited then ``RulesWatcher.poll`` (fingerprint, lint, compile, swap): median.

Usage: ``.venv/bin/python benchmarks/audit.py [--runs 5] [--nodes 1000] [--pods 5000]``.
"""
from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from derive import generate  # noqa: E402

from runtime.engine.policy import Policy  # noqa: E402
from runtime.engine.pools import derive  # noqa: E402
from runtime.engine.snapshot import Snapshot  # noqa: E402
from runtime.report.audit import audit  # noqa: E402
from runtime.report.results import summary  # noqa: E402
from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules  # noqa: E402
from runtime.reload.watcher import RulesWatcher  # noqa: E402
from runtime.snapshots import load_snapshot  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LIMITS = [{"nvidia.com/gpu": "1"}, {"nvidia.com/gpu.shared": "2"}, {"nvidia.com/gpu": "2"},
          {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "20",
           "nvidia.com/gpu.sliced.cores-percentage": "100"},
          {"nvidia.com/gpu": "1", "nvidia.com/gpu.shared": "1"},  # two families: fails rule 1
          {"cpu": "2"}]


def synthetic(policy: Policy, nodes: int, pods: int, seed: int = 11) -> Snapshot:
    """``generate(nodes)`` + its derived objects + ``pods`` Pods with queue labels, bound to nodes."""
    rng = random.Random(seed)
    objects = generate(nodes)
    state = derive(policy, Snapshot.from_objects(objects))
    objects += state.objects()
    queues = [q["metadata"]["name"] for q in state.local_queues]
    node_names = [o["metadata"]["name"] for o in objects if o["kind"] == "Node"]
    for i in range(pods):
        objects.append({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": f"pod-{i:05d}", "namespace": f"team-{i % 20:02d}",
                                     "labels": {"kueue.x-k8s.io/queue-name": rng.choice(queues)}},
                        "spec": {"nodeName": rng.choice(node_names),
                                 "containers": [{"name": "main", "image": "x",
                                                 "resources": {"limits": dict(rng.choice(LIMITS))}}]}})
    return Snapshot.from_objects(objects)


def _median(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=5000)
    args = parser.parse_args()
    policy = Policy(load_rules())
    seed = load_snapshot([str(ROOT / "tests/fixtures/seed/common"), str(ROOT / "tests/fixtures/audit/seed-cluster")])
    results = audit(policy, seed)
    print(f"seed cluster: {len(results)} results {summary(results)}; audit median "
          f"{_median(lambda: audit(policy, seed), args.runs) * 1000:.1f} ms over {args.runs} runs")
    t0 = time.perf_counter()
    big = synthetic(policy, args.nodes, args.pods)
    built = time.perf_counter() - t0
    t0 = time.perf_counter()
    results = audit(policy, big)
    first = time.perf_counter() - t0
    print(f"synthetic {args.nodes} nodes / {args.pods} Pods ({sum(1 for _ in big)} objects, built in {built:.1f}s): "
          f"{len(results)} results {summary(results)}; first audit {first:.2f}s, median "
          f"{_median(lambda: audit(policy, big), max(1, args.runs // 2)):.2f}s")
    with tempfile.TemporaryDirectory() as tmp:
        rules = Path(tmp) / "rules"
        shutil.copytree(DEFAULT_RULES_DIR, rules)
        watcher = RulesWatcher(rules, lambda rs: None, interval=3600)
        path = rules / "constants.yaml"
        text = path.read_text()
        times = []
        for i in range(args.runs):
            path.write_text(text.replace("sharesPerAccelerator: 10 ", f"sharesPerAccelerator: {10 + (i % 2) * 10} "))
            t0 = time.perf_counter()
            assert watcher.poll() in (True, None)
            times.append(time.perf_counter() - t0)
        print(f"reload (fingerprint + lint + compile + swap): median {statistics.median(times):.2f}s over {args.runs} polls")


if __name__ == "__main__":
    main()
