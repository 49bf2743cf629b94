"""The controller's reconcile passes, CPU per pass, on one prepared cluster (docs/performance.md "A pass proportional to what changed"): not a test.

Wall times on a shared 2-core machine swing with the neighbours' load; the CPU the pass's own thread
spends (``time.thread_time``) does not. This benchmark writes the synthetic cluster of
benchmarks/derive.py once to a bare local control plane (as benchmarks/scale.py does), then runs,
for each code tree given (default: this checkout), a controller in a child process with that tree
first on ``PYTHONPATH`` (an A/B of two commits on the same objects, in the same minutes):

- the first pass (everything derived, nothing kept) and an idle pass (median of 5; 0 writes wanted);
- an event touching one node, 4 times each: one Devices ledger row changes (``ledger``) and one
  NodeFeature ``gpustack.ai/managed`` flip (``flip``): the pass serving the event and its 2 echoes.

Fit labels are written inside the pass (``fit_coalesce_seconds=0``, as ``--once``) so that every
pass is counted. Usage: ``.venv/bin/python benchmarks/reconcile_cpu.py [--nodes 1000]
[--tree DIR]... [--profile PREFIX]`` (a tree: a checkout, e.g. ``git worktree add /tmp/before main``). Needs the
control-plane binaries (``make controlplane``).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MANAGED = "gpustack.ai/managed"


def child(kubeconfig: str, node: str) -> dict:
    """One controller of the code on ``sys.path`` against the prepared cluster; the figures (ms)."""
    from runtime.controller.reconciler import Controller
    from runtime.engine.policy import Policy
    from runtime.kube.session import MERGE_PATCH, connect
    from runtime.rules.loader import load_rules

    session = connect(kubeconfig)
    ctl = Controller(connect(kubeconfig), Policy(load_rules()), env={}, fit_coalesce_seconds=0).start()

    def one() -> dict:
        cpu, wall = time.thread_time(), time.monotonic()
        writes = len(ctl.reconcile().writes)
        return {"cpu_ms": round((time.thread_time() - cpu) * 1000, 1),
                "wall_ms": round((time.monotonic() - wall) * 1000, 1), "writes": writes}

    def until_cached(kind: str, name: str, test, namespace: str = "") -> None:
        deadline = time.monotonic() + 30
        while not test(ctl.cache.get(kind, name, namespace) if namespace else ctl.cache.get(kind, name)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{kind} {name} not seen by the cache")
            time.sleep(0.02)

    def ledger(i: int) -> None:
        body = copy.deepcopy(session.call("get", session.ref("Devices").path(name=node)))
        row = body["status"]["groups"][0]["accelerators"][0]
        for key in ("mode", "allocated", "remaining", "allocatedSlices", "allocatedProfiles"):
            row.pop(key, None)
        row.update({"mode": 1, "allocated": 1_600_000} if i % 2 == 0 else {"mode": 0, "remaining": 1_600_000})
        session.call("put", session.ref("Devices").path(name=node, subresource="status"), body=body)
        until_cached("Devices", node, lambda o: (o or {}).get("status") == body["status"])

    def flip(i: int) -> None:
        name, value = f"{node}-gpustack-worker", "false" if i % 2 == 0 else "true"
        session.call("patch", session.ref("NodeFeature").path(namespace="gpustack-system", name=name),
                     body={"spec": {"labels": {MANAGED: value}}}, content_type=MERGE_PATCH)
        until_cached("NodeFeature", name, lambda o: ((o or {}).get("spec") or {}).get("labels", {}).get(MANAGED) == value,
                     "gpustack-system")

    out: dict = {"first": one()}
    for _ in range(6):  # settle: the echoes of the first pass's writes
        time.sleep(1.0)
        if one()["writes"] == 0:
            break
    idle = [one() for _ in range(5)]
    out["idle"] = {"cpu_ms": statistics.median(p["cpu_ms"] for p in idle), "writes": sum(p["writes"] for p in idle)}
    profile_to = os.environ.get("RECONCILE_CPU_PROFILE")
    for name, event in (("ledger", ledger), ("flip", flip)):
        out[name] = []
        for i in range(4):
            event(i)
            if profile_to and name == "flip" and i < 2:   # --profile: the un-manage and the re-admit pass
                import cProfile
                profiler = cProfile.Profile()
                pass_ = profiler.runcall(one)
                profiler.dump_stats(f"{profile_to}.{'unmanage' if i == 0 else 'readmit'}")
            else:
                pass_ = one()
            out[name].append({"event": pass_, "echoes": [one(), one()]})
    ctl.stop()
    return out


def summary(r: dict) -> str:
    """One line per tree: medians of the event passes and of their echoes."""
    def med(kind: str, key: str, part: str = "event") -> float:
        passes = [x[part] for x in r[kind]] if part == "event" else [e for x in r[kind] for e in x["echoes"]]
        return round(statistics.median(p[key] for p in passes), 1)
    return (f"{r['tree']} (load average {r['load'][0]} -> {r['load'][1]}): first pass {r['first']['cpu_ms']} ms CPU; "
            f"idle pass {r['idle']['cpu_ms']} ms CPU, {r['idle']['writes']} writes; one ledger row: "
            f"{med('ledger', 'cpu_ms')} ms CPU ({med('ledger', 'wall_ms')} ms wall), echoes {med('ledger', 'cpu_ms', 'echoes')}"
            f" ms; NodeFeature flip: {med('flip', 'cpu_ms')} ms CPU ({med('flip', 'wall_ms')} ms wall), echoes "
            f"{med('flip', 'cpu_ms', 'echoes')} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--tree", action="append", help="a code tree to measure (repeatable; default: this checkout)")
    parser.add_argument("--child", nargs=2, metavar=("KUBECONFIG", "NODE"), help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--profile", metavar="PREFIX", help="cProfile the first un-manage and re-admit passes "
                        "into PREFIX.unmanage and PREFIX.readmit (python -m pstats); their CPU then includes "
                        "the profiler's")
    args = parser.parse_args()
    if args.child:
        print("JSON" + json.dumps(child(*args.child)))
        return
    sys.path.insert(0, str(ROOT))
    from benchmarks.derive import generate
    from benchmarks.scale import _accelerated_nodes, write_objects
    from runtime.kube.session import connect
    from testing.localcluster import LocalCluster
    from testing.localcluster.testing import with_crds

    objects = generate(args.nodes)
    with LocalCluster() as cluster:
        with_crds(cluster)
        seconds = write_objects(connect(cluster.kubeconfig), objects)
        print(f"{args.nodes} nodes ({len(objects)} objects) written in {seconds:.0f} s", flush=True)
        node = _accelerated_nodes(objects, 3)[2]
        for tree in args.tree or [str(ROOT)]:
            load = os.getloadavg()[0]
            proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", str(cluster.kubeconfig), node],
                                  env={**os.environ, "PYTHONPATH": tree, "LOGURU_LEVEL": "ERROR",
                                       **({"RECONCILE_CPU_PROFILE": str(Path(args.profile).resolve())}
                                          if args.profile else {})}, cwd=tree,
                                  capture_output=True, text=True, timeout=600)
            lines = [line for line in proc.stdout.splitlines() if line.startswith("JSON")]
            if not lines:
                print(f"{tree}: failed\n{proc.stderr[-3000:]}")
                continue
            result = {**json.loads(lines[0][4:]), "tree": tree, "nodes": args.nodes,
                      "load": [round(load, 1), round(os.getloadavg()[0], 1)]}
            print(json.dumps(result) if args.json else summary(result), flush=True)


if __name__ == "__main__":
    main()
