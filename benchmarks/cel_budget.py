"""What the CEL run-time budget costs a review (docs/rule-authoring.md "Run-time budget").

Two servers as subprocesses on 127.0.0.1, same rules, same snapshot, same TLS: ``accelpolicy webhook``
(every evaluation counted against its budget) and ``python -m testing.hooks webhook-uncounted`` (the
same server with :class:`runtime.rules.cel.runtime.CelRuntime` ``counting=False``: cel-python's helpers, no
budget). The load is benchmarks/loadgen.py in its own processes, every request a new Pod name, uid
and varied object (so the memo sees real traffic), for the two reviews of benchmarks/webhook.py (a
20 % slice through /mutate-pods, a rule-1 denial through /validate-pods), paced (100 req/s, one
client) and closed (8 client processes back to back). The two servers are measured alternately,
``--rounds`` times, in the same run; the figure is the server's CPU per review (user + system from
/proc, which holds on a busy machine where wall times do not), with p50/p99 beside it.

Engine only (no HTTP, the steadier figure on a shared machine): a child process per server kind runs
``decide()`` on ``--engine-reviews`` unique reviews per case (the memo sees each object once) and
reports its own CPU per review; the two kinds alternate, ``--rounds`` times.

Paired (the steadiest figure): one process holds the rules twice, once bound to the counting runtime
and once to an uncounted one, and judges the same unique reviews with each in alternating blocks of
20, timing each block with the thread's CPU clock: both see the same machine at the same moments.

Figures, not pass/fail (the goal: the budget costs at most 10 % of a review's CPU).
Usage: ``.venv/bin/python benchmarks/cel_budget.py [--seconds 4] [--rounds 2] [--engine-reviews 400]
[--no-http] [--json]``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import benchmarks.loadgen as loadgen  # noqa: E402
from benchmarks.webhook import CASES, SNAPSHOT, Server, _free_port, _measure, engine_and_view  # noqa: E402

COMMANDS = {
    "budget": [sys.executable, "-c", "from runtime.cli import main; main(prog_name='accelpolicy')", "webhook"],
    "uncounted": [sys.executable, "-m", "testing.hooks", "webhook-uncounted"],
}


COMPREHENSION = "xs.map(x, x * 2), 1000 xs"   # the worst case: nothing but counted iterations


class BudgetServer(Server):
    """A :class:`benchmarks.webhook.Server` running one of :data:`COMMANDS`."""

    def __init__(self, tmp: Path, name: str):  # noqa: super().__init__ would start the rules server
        self.dir = tmp / name
        self.port = _free_port()
        cmd = COMMANDS[name] + ["--webhook-self-signed", str(self.dir), "--webhook-port", str(self.port),
                                "--snapshot", str(SNAPSHOT), "--watch-rules-seconds", "0"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
        self.url = f"https://127.0.0.1:{self.port}"
        self.ca = str(self.dir / "ca.crt")


def measure(seconds: float, rounds: int) -> dict:
    """``{case: {mode: {server: [round results]}}}`` (see the module docstring)."""
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="accelpolicy-budget-") as tmp:
        servers = {name: BudgetServer(Path(tmp), name) for name in COMMANDS}
        try:
            for server in servers.values():
                server.wait_ready()
            for round_ in range(rounds):
                order = list(servers) if round_ % 2 == 0 else list(reversed(servers))
                for label, (path, kind) in CASES.items():
                    for mode in ("paced", "closed"):
                        for name in order:
                            results.setdefault(label, {}).setdefault(mode, {}).setdefault(name, []).append(
                                _measure(servers[name], path, kind, mode, seconds, None))
        finally:
            for server in servers.values():
                server.stop()
    return results


def engine_child(counting: bool, n: int) -> dict:
    """In this process: ``decide()`` on ``n`` unique reviews per case with the budget on or off;
    ``{case: CPU ms per review}`` (a warm-up of 50 reviews first)."""
    import time

    from runtime.rules.cel.runtime import CelRuntime, install_runtime

    install_runtime(CelRuntime(counting=counting))
    from runtime.engine.admission import decide

    engine, view = engine_and_view()
    out = {}
    for label, (path, kind) in CASES.items():
        name = engine.by_path(path)
        bodies = [loadgen.review(kind, i, f"engine-{counting}")[0] for i in range(n + 50)]
        for body in bodies[:50]:
            decide(engine, json.loads(body), view, name)
        cpu0 = time.process_time()
        for body in bodies[50:]:  # a fresh parse per review, as the server does
            decide(engine, json.loads(body), view, name)
        out[label] = (time.process_time() - cpu0) / n * 1000
    from runtime.rules.cel.compile import compile_expression
    from runtime.rules.cel.values import to_cel

    loop = compile_expression("xs.map(x, x * 2).size() == size(xs)", "bench")
    xs = {"xs": to_cel(list(range(1000)))}
    cpu0 = time.process_time()
    for _ in range(40):
        loop.evaluate_cel(xs)
    out[COMPREHENSION] = (time.process_time() - cpu0) / 40 * 1000
    return out


def paired(n: int, block: int = 20) -> dict:
    """``{case: {budget|uncounted: CPU ms per review}}`` from one process (see the module docstring)."""
    import time

    from runtime.engine.admission import decide
    from runtime.rules.cel import runtime as celruntime

    counted = engine_and_view()   # bound to the process's (counting) runtime
    process_runtime = celruntime.cel_runtime()
    celruntime._RUNTIME = celruntime.CelRuntime(counting=False)   # a program keeps the runtime it was built with
    try:
        uncounted = engine_and_view()
    finally:
        celruntime._RUNTIME = process_runtime
    out = {}
    for label, (path, kind) in CASES.items():
        bodies = [loadgen.review(kind, i, "paired")[0] for i in range(n)]
        spent = {"budget": 0.0, "uncounted": 0.0}
        ratios = []   # budget / uncounted of each adjacent pair of blocks: robust to the machine's bursts
        for name, (engine, view) in (("budget", counted), ("uncounted", uncounted)):  # warm-up
            for body in bodies[:block]:
                decide(engine, json.loads(body), view, engine.by_path(path))
        for start in range(0, n, block):
            order = (("budget", counted), ("uncounted", uncounted))
            pair = {}
            for name, (engine, view) in (order if start // block % 2 == 0 else order[::-1]):
                t = time.thread_time()
                for body in bodies[start:start + block]:
                    decide(engine, json.loads(body), view, engine.by_path(path))
                pair[name] = time.thread_time() - t
                spent[name] += pair[name]
            ratios.append(pair["budget"] / pair["uncounted"])
        out[label] = {name: seconds / n * 1000 for name, seconds in spent.items()}
        out[label]["median_pair_ratio"] = statistics.median(ratios)
    return out


def engine_only(n: int, rounds: int) -> dict:
    """``{case: {budget|uncounted: [CPU ms/review per round]}}`` from alternating child processes."""
    out: dict = {}
    for round_ in range(rounds):
        for name in (("budget", "uncounted") if round_ % 2 == 0 else ("uncounted", "budget")):
            child = subprocess.run([sys.executable, __file__, "--engine-child", name, str(n)], cwd=ROOT,
                                   capture_output=True, text=True, check=True)
            for label, ms in json.loads(child.stdout).items():
                out.setdefault(label, {}).setdefault(name, []).append(ms)
    return out


def summary(results: dict) -> dict:
    """Per case and mode: each server's median CPU ms/review, p50, p99, errors, and the budget's
    share of a review's CPU (budget / uncounted - 1)."""
    out: dict = {}
    for label, modes in results.items():
        for mode, servers in modes.items():
            row = {}
            for name, runs in servers.items():
                row[name] = {"cpu_ms": statistics.median(r["server_cpu_ms_per_review"] for r in runs),
                             "p50_ms": statistics.median(r["p50_ms"] for r in runs),
                             "p99_ms": statistics.median(r["p99_ms"] for r in runs),
                             "rps": statistics.median(r["rps"] for r in runs),
                             "errors": sum(r["errors"] for r in runs)}
            row["budget_cpu_share"] = round(row["budget"]["cpu_ms"] / row["uncounted"]["cpu_ms"] - 1, 4)
            out.setdefault(label, {})[mode] = row
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="measured window of each load")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per server")
    parser.add_argument("--engine-reviews", type=int, default=400)
    parser.add_argument("--no-http", action="store_true", help="the engine-only figures alone")
    parser.add_argument("--engine-child", nargs=2, metavar=("KIND", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.engine_child:
        print(json.dumps(engine_child(args.engine_child[0] == "budget", int(args.engine_child[1]))))
        return
    load_before = os.getloadavg()[0]
    pairs = paired(args.engine_reviews * 2)
    engine = {label: {name: statistics.median(ms) for name, ms in runs.items()}
              for label, runs in engine_only(args.engine_reviews, args.rounds).items()}
    table = {} if args.no_http else summary(measure(args.seconds, args.rounds))
    if args.json:
        print(json.dumps({"cpus": os.cpu_count(), "load_before": load_before, "load_after": os.getloadavg()[0],
                          "paired": pairs, "engine_only": engine, "results": table}, indent=2))
        return
    print(f"machine: {os.cpu_count()} CPUs, load average {load_before:.2f} -> {os.getloadavg()[0]:.2f}; "
          f"{args.rounds} rounds, medians")
    for label, row in pairs.items():
        share = row["budget"] / row["uncounted"] - 1
        print(f"  paired      {label:24s} budget {row['budget']:.3f}  uncounted {row['uncounted']:.3f} "
              f"CPU ms/review: budget's share {share * 100:+.1f} % (median of block pairs "
              f"{(row['median_pair_ratio'] - 1) * 100:+.1f} %)")
    for label, row in engine.items():
        share = row["budget"] / row["uncounted"] - 1
        print(f"  engine only {label:24s} budget {row['budget']:.3f}  uncounted {row['uncounted']:.3f} "
              f"CPU ms/review (evaluation): budget's share {share * 100:+.1f} %")
    for label, modes in table.items():
        print(f"{label}:")
        for mode, row in modes.items():
            for name in COMMANDS:
                r = row[name]
                print(f"  {mode:6s} {name:9s} server CPU {r['cpu_ms']:.3f} ms/review  p50 {r['p50_ms']:.3f} ms  "
                      f"p99 {r['p99_ms']:.3f} ms  {r['rps']:.0f} req/s  errors {r['errors']}")
            print(f"  {mode:6s} budget's share of a review's CPU: {row['budget_cpu_share'] * 100:+.1f} %")


if __name__ == "__main__":
    main()
