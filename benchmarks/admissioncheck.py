"""Benchmark of the ``gpustack-node-devices`` verdicts (docs/concepts/pools-and-flavors.md "The AdmissionCheck `gpustack-node-devices`"): not a test, prints figures.

1. Seed snapshot (tests/fixtures/seed/step1 + its derived ResourceFlavors): the median time of one
   ``check_workload`` for a whole, a shared, a sliced A10G/T4 request — cold (the managed nodes'
   labels and ledgers read inside the call) and warm (``managed_nodes`` computed once per snapshot,
   as the controller does per reconcile).
2. Synthetic clusters (benchmarks/derive.py ``generate``, 1,000 nodes by default): the time of
   ``plan_workload_checks`` over W pending Workloads, each assigned a random accelerated flavor.

Usage: ``.venv/bin/python benchmarks/admissioncheck.py [--runs 200] [--nodes 1000] [--workloads 100]``
(``make bench``).
"""
from __future__ import annotations

import argparse
import copy
import random
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from derive import generate  # noqa: E402

from runtime.controller.workloadchecks import plan_workload_checks  # noqa: E402
from runtime.engine import admissioncheck as ac  # noqa: E402
from runtime.engine.pools.derive import derive  # noqa: E402
from runtime.engine.policy import Policy  # noqa: E402
from runtime.engine.snapshot import Snapshot  # noqa: E402
from runtime.rules.loader import load_rules  # noqa: E402
from runtime.snapshots import load_snapshot  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NOW = datetime(2026, 11, 29, 21, 0, tzinfo=timezone.utc)
REQUESTS = {
    "whole 1": {"nvidia.com/gpu": "1"},
    "shared 2": {"nvidia.com/gpu.shared": "2"},
    "sliced 20%": {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": "320k"},
}


def workload(name: str, flavor: str, resource: str, requests: dict) -> dict:
    """A Workload with quota reserved on ``flavor`` for ``resource`` and the check Pending."""
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"podSets": [{"name": "main", "count": 1, "template": {"spec": {
                "containers": [{"name": "main", "resources": {"requests": requests}}]}}}]},
            "status": {"admission": {"clusterQueue": "q", "podSetAssignments": [
                {"name": "main", "flavors": {resource: flavor}}]},
                "conditions": [{"type": "QuotaReserved", "status": "True"}],
                "admissionChecks": [{"name": "gpustack-node-devices", "state": "Pending", "message": "",
                                     "lastTransitionTime": "2026-11-29T20:59:00Z"}]}}


def median_ms(fn, runs: int) -> float:
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--workloads", type=int, default=100)
    args = parser.parse_args(argv)
    policy = Policy(load_rules())

    seed = load_snapshot([ROOT / "tests" / "fixtures" / "seed" / "step1"])
    seed = Snapshot.from_objects(list(seed) + derive(policy, seed).resource_flavors)
    nodes = ac.managed_nodes(policy, seed)
    print(f"seed snapshot (step1, {len(nodes.labels)} managed nodes), median of {args.runs}:")
    for label, requests in REQUESTS.items():
        for flavor in ("gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d",
                       "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-4d"):
            wl = workload("w", flavor, "credits.gpustack.ai/nvidia", requests)
            verdict = ac.check_workload(policy, seed, wl)
            cold = median_ms(lambda: ac.check_workload(policy, seed, wl), args.runs)
            warm = median_ms(lambda: ac.check_workload(policy, seed, wl, nodes), args.runs)
            print(f"  {label:<11} {flavor.split('--')[-1]:<32} {verdict.state:<6} cold {cold:.3f} ms  warm {warm:.3f} ms")

    objects = generate(args.nodes)
    snap = Snapshot.from_objects(objects)
    flavors = [f for f in derive(policy, snap).resource_flavors
               if any(k.startswith(policy.prefix("acceleratable")) for k in f["spec"]["nodeLabels"])]
    rng = random.Random(7)
    credits = policy.prefix("credits")
    workloads = []
    for i in range(args.workloads):
        flavor = rng.choice(flavors)
        akey = next(k for k in flavor["spec"]["nodeLabels"] if k.startswith(policy.prefix("acceleratable"))
                    and "." not in k[len(policy.prefix("acceleratable")):])
        manu = policy.manufacturer_of_key(akey[len(policy.prefix("acceleratable")):])
        label, requests = rng.choice(list(REQUESTS.items()))
        requests = {k.replace("nvidia.com/gpu", manu.base): v for k, v in requests.items()}
        workloads.append(workload(f"w{i}", flavor["metadata"]["name"], f"{credits}{manu.id}", copy.deepcopy(requests)))
    big = Snapshot.from_objects(objects + flavors + workloads)
    plan = plan_workload_checks(policy, big, NOW)
    states = [v.state for v in plan.verdicts.values()]
    ms = median_ms(lambda: plan_workload_checks(policy, big, NOW), max(3, args.runs // 40))
    print(f"synthetic {args.nodes} nodes, {len(flavors)} accelerated flavors, {args.workloads} pending Workloads: "
          f"plan_workload_checks {ms:.1f} ms ({ms / args.workloads:.3f} ms per Workload; "
          f"{states.count('Ready')} Ready, {states.count('Retry')} Retry, {len(plan.errors)} errors)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
