"""Where a served review's CPU goes, counted rather than sampled (docs/performance.md "CPU per review outside
decide()"): the event loop's thread, the worker threads, ``decide()`` inside the server, the cyclic
garbage collector, against ``decide()`` alone.

Serves the webhook app (the shipped rules and the seed snapshot, as `accelpolicy webhook`; or, with
``--floor``, the benchmark's floor answering "allowed") over HTTPS with uvicorn in a thread of this
process, and drives it with benchmarks/loadgen.py in its own processes (unique Pods, loopback only,
bounded in time). Over the measured window it reads, from /proc, the CPU of every thread of this process
but the one waiting for the clients (the server's: the loop's and the workers'), times each ``decide()`` call with the CPU clock of the thread that
runs it, and each collection of the cyclic garbage collector by generation (``gc.callbacks``). Before
serving, ``decide()`` runs alone on unique reviews (no HTTP), as benchmarks/webhook.py measures it.

``--tree DIR`` serves another checkout's code (e.g. a ``git worktree`` of the base commit), with this
checkout's script: it uses only what both have (``WebhookState``, ``build_app``, ``ServerThread``,
``testing.hooks.AllowAllState``) and installs the generation as that checkout's own server does (its
``runtime.webhook.host.WebhookServer`` when it has one).

Usage: ``.venv/bin/python benchmarks/review_cpu.py [--tree DIR] [--kind slice|rule1] [--mode closed|paced]
[--seconds 8] [--floor]``; prints one JSON object (milliseconds of CPU per review).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATHS = {"slice": "/mutate-pods", "rule1": "/validate-pods"}


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose code serves")
    parser.add_argument("--kind", choices=sorted(PATHS), default="slice")
    parser.add_argument("--mode", choices=("closed", "paced"), default="closed")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--engine-reviews", type=int, default=500)
    parser.add_argument("--floor", action="store_true", help="serve the floor (every review allowed, no rules)")
    return parser.parse_args()


def _thread_cpu() -> dict[int, float]:
    """CPU seconds (user + system) of every thread of this process, by thread id."""
    out = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


class _Collections:
    """CPU seconds and count of the cyclic collector's runs by generation, from ``gc.callbacks``."""

    def __init__(self):
        self.seconds, self.runs, self._start = [0.0, 0.0, 0.0], [0, 0, 0], {}
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        ident = threading.get_ident()
        if phase == "start":
            self._start[ident] = time.thread_time()
        elif ident in self._start:
            self.seconds[info["generation"]] += time.thread_time() - self._start.pop(ident)
            self.runs[info["generation"]] += 1


def main() -> None:
    args = _args()
    sys.path[:0] = [str(args.tree.resolve()), str(ROOT)]   # the served tree first: its runtime and its benchmarks/
    import benchmarks.loadgen as loadgen
    from benchmarks.webhook import engine_and_view, engine_only
    from runtime.webhook.app import WebhookState, build_app
    from runtime.webhook.server import ServerThread, self_signed
    from testing.hooks import AllowAllState

    alone = engine_only(args.engine_reviews)
    label = next(k for k in alone if PATHS[args.kind] in k)
    timed = {"calls": 0, "seconds": 0.0}
    base = AllowAllState if args.floor else WebhookState

    class Timed(base):
        def decide(self, *a, **kw):
            started = time.thread_time()
            try:
                return super().decide(*a, **kw)
            finally:
                timed["calls"] += 1
                timed["seconds"] += time.thread_time() - started

    engine, view = engine_and_view()
    state = Timed()
    try:   # installed as this checkout's server installs a generation
        from runtime.webhook.host import settle_heap
    except ImportError:
        settle_heap = None
    state.set_ready(engine, view)
    if settle_heap is not None:
        settle_heap()
    collections = _Collections()
    with tempfile.TemporaryDirectory(prefix="accelpolicy-review-cpu-") as tmp:
        tls = self_signed(tmp)
        server = ServerThread(build_app(state, {s.path: n for n, s in engine.policies.items()}),
                              str(tls["cert"]), str(tls["key"])).start()
        loop = next(t.native_id for t in threading.enumerate() if t is server.thread)
        before, load0 = _thread_cpu(), os.getloadavg()[0]
        collections.seconds, collections.runs = [0.0, 0.0, 0.0], [0, 0, 0]
        timed.update(calls=0, seconds=0.0)
        result = loadgen.run(server.url, str(tls["ca"]), PATHS[args.kind], args.kind, args.mode, args.seconds)
        after = _thread_cpu()
        server.stop()
    reviews = max(1, timed["calls"])
    per = lambda seconds: round(seconds * 1000 / reviews, 3)  # noqa: E731
    loop_cpu = after.get(loop, 0.0) - before.get(loop, 0.0)
    # every other thread but this one (which only waits for the clients): the worker pool's
    others = sum(v - before.get(k, 0.0) for k, v in after.items() if k not in (loop, threading.get_native_id()))
    print(json.dumps({
        "tree": str(args.tree), "served": "floor" if args.floor else "rules", "kind": args.kind, "mode": args.mode,
        "reviews": timed["calls"], "rps": result["rps"], "load": round((load0 + os.getloadavg()[0]) / 2, 2),
        "server_ms": per(loop_cpu + others), "loop_thread_ms": per(loop_cpu), "worker_threads_ms": per(others),
        "decide_in_server_ms": per(timed["seconds"]), "decide_alone_ms": alone[label]["cpu_ms"],
        "gc_ms": per(sum(collections.seconds)), "gc_runs": collections.runs,
        "gc_ms_by_generation": [per(s) for s in collections.seconds]}))


if __name__ == "__main__":
    main()
