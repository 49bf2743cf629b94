"""Webhook benchmark (docs/performance.md "The webhook under load", "CPU per review outside decide()"):
unique Pod reviews against the real HTTPS server.

Starts two servers as subprocesses with a self-signed certificate on 127.0.0.1: ``accelpolicy webhook``
with the real rules and, as the floor, the same server and TLS answering every review "allowed" without
rules (``python -m testing.hooks webhook-floor``). With ``--baseline DIR`` (another checkout, e.g. a
``git worktree`` of the base commit, run with this interpreter) its two servers are measured in the same
run, the loads interleaved with this checkout's. The client is benchmarks/loadgen.py in its own
processes: every request a new Pod name, uid and varied object (so the engine's memo sees real traffic),
keep-alive ``http.client``, loopback only, bounded in time. For two reviews (a 20 % slice through
/mutate-pods, a rule-1 denial through /validate-pods) it measures:

- paced: 100 requests per second, one client (p50, p99);
- closed: 8 concurrent client processes back to back (throughput, p50, p99);

each with the ratio to the floor measured in the same run, the client's own CPU share, the server's CPU
per review (process CPU seconds from /proc over the reviews answered: it holds on a busy machine where
wall times do not) and the load average. ``decide()`` alone runs in a child process of each checkout, once
a round (CPU per review on unique reviews, no HTTP); a server's **CPU per review outside decide()** is its CPU per
review less that, set beside the floor's whole review (the goal: at most 1.5 times it). ``--rounds N``
repeats every load N times (checkouts and servers interleaved) and reports the medians.

Goals (docs/performance.md "The webhook under load"): paced p99 <= 3 ms and p50 <= 1.5x floor; 8 clients
>= 1,500 req/s, p99 <= 10 ms; outside decide() <= 1.5x the floor's review. Figures, not pass/fail.
``--pin`` pins each server to CPU 0 and the clients to the other CPUs.
Usage: ``.venv/bin/python benchmarks/webhook.py [--seconds 5] [--rounds 1] [--baseline DIR] [--pin] [--json]``.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import benchmarks.loadgen as loadgen  # noqa: E402
from runtime.engine.admission import AdmissionEngine, admission_view, decide  # noqa: E402
from runtime.engine.policy import Policy  # noqa: E402
from runtime.rules.loader import load_rules  # noqa: E402
from runtime.snapshots import load_snapshot  # noqa: E402

SNAPSHOT = ROOT / "tests" / "fixtures" / "seed" / "common"
CASES = {"slice-20% /mutate-pods": ("/mutate-pods", "slice"), "rule-1 /validate-pods": ("/validate-pods", "rule1")}
MODES = ("paced", "closed")
_FLAGS: dict[Path, tuple[str, str]] = {}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _command(tree: Path) -> list[str]:
    # `python -c` with cwd=tree: the code of that checkout, whatever the venv's editable install points at
    return [sys.executable, "-c", "from runtime.cli import main; main(prog_name='accelpolicy')", "webhook"]


def _flags(tree: Path) -> tuple[str, str]:
    """The self-signed and port options of ``tree``'s `accelpolicy webhook` (renamed --webhook-*; a checkout
    from before the rename has --self-signed and --port)."""
    if tree not in _FLAGS:
        help_text = subprocess.run(_command(tree) + ["--help"], cwd=tree, capture_output=True, text=True).stdout
        _FLAGS[tree] = (("--webhook-self-signed", "--webhook-port") if "--webhook-port" in help_text
                        else ("--self-signed", "--port"))
    return _FLAGS[tree]


class Server:
    """One webhook child process of checkout ``tree`` (`accelpolicy webhook`, or the floor) with its own
    self-signed CA."""

    def __init__(self, tmp: Path, name: str, floor: bool, cpus: set[int] | None, tree: Path = ROOT):
        self.dir = tmp / name
        self.port = _free_port()
        cmd = [sys.executable, "-m", "testing.hooks", "webhook-floor"] if floor else _command(tree)
        self_signed, port = _flags(tree)
        cmd += [self_signed, str(self.dir), port, str(self.port), "--snapshot", str(SNAPSHOT)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tree,
                                     preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
        self.url = f"https://127.0.0.1:{self.port}"
        self.ca = str(self.dir / "ca.crt")

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.proc.stderr.read().decode()}")
            if Path(self.ca).exists():
                try:
                    ctx = ssl.create_default_context(cafile=self.ca)
                    with urllib.request.urlopen(self.url + "/readyz", context=ctx, timeout=1) as r:
                        if r.status == 200:
                            return
                except OSError:
                    pass
            time.sleep(0.1)
        raise RuntimeError("server not ready after 60 s")

    def cpu_seconds(self) -> float:
        """User+system CPU the server process used so far (from /proc)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def engine_and_view() -> tuple[AdmissionEngine, object]:
    """The shipped rules' AdmissionEngine and the admission view of :data:`SNAPSHOT`."""
    policy = Policy(load_rules())
    return AdmissionEngine(policy), admission_view(policy, load_snapshot([SNAPSHOT]))


def engine_only(n: int) -> dict:
    """``decide()`` in-process on ``n`` unique reviews per case: mean and p99 ms, CPU ms per review (no
    HTTP)."""
    engine, view = engine_and_view()
    out = {}
    for label, (path, kind) in CASES.items():
        name = engine.by_path(path)
        bodies = [loadgen.review(kind, i, "engine")[0] for i in range(n)]
        lat = []
        cpu0 = time.process_time()
        for body in bodies:  # a fresh parse per review, as the server does
            t = time.perf_counter()
            decide(engine, json.loads(body), view, name)
            lat.append(time.perf_counter() - t)
        out[label] = {"mean_ms": round(statistics.mean(lat) * 1000, 3),
                      "p99_ms": round(loadgen._pct(lat, 0.99) * 1000, 3),
                      "cpu_ms": round((time.process_time() - cpu0) / n * 1000, 3)}
    return out


def engine_only_of(tree: Path, n: int) -> dict:
    """:func:`engine_only` of checkout ``tree``, in a child process of its code."""
    code = f"import json, benchmarks.webhook as w; print(json.dumps(w.engine_only({n})))"
    done = subprocess.run([sys.executable, "-c", code], cwd=tree, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _measure(server: Server, path: str, kind: str, mode: str, seconds: float, client_cpus) -> dict:
    cpu0, load0 = server.cpu_seconds(), os.getloadavg()[0]
    if client_cpus:
        os.sched_setaffinity(0, client_cpus)  # inherited by the spawned client processes
    try:
        r = loadgen.run(server.url, server.ca, path, kind, mode, seconds)
    finally:
        if client_cpus:
            os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
    r["server_cpu_s"] = round(server.cpu_seconds() - cpu0, 3)
    # CPU per answered review (the clients' warm-up reviews counted too): holds on a busy machine
    r["server_cpu_ms_per_review"] = round(r["server_cpu_s"] * 1000 / max(1, r["count"] + r["clients"] * 30), 3)
    r["load"] = round((load0 + os.getloadavg()[0]) / 2, 2)
    return r


def run(trees: dict[str, Path], seconds: float, rounds: int, engine_reviews: int, server_cpus,
        client_cpus) -> dict:
    """``{tree: {"engine_only": [round results], case: {mode: {"rules"|"floor": [round results]}}}}``."""
    results: dict = {name: {"engine_only": []} for name in trees}
    with tempfile.TemporaryDirectory(prefix="accelpolicy-bench-") as tmp:
        servers = {(name, which): Server(Path(tmp), f"{name}-{which}", which == "floor", server_cpus, tree)
                   for name, tree in trees.items() for which in ("rules", "floor")}
        try:
            for s in servers.values():
                s.wait_ready()
            for round_ in range(rounds):
                for name, tree in trees.items():   # decide() alone, once a round, beside the loads
                    results[name]["engine_only"].append(engine_only_of(tree, engine_reviews))
                order = list(servers) if round_ % 2 == 0 else list(reversed(servers))
                for label, (path, kind) in CASES.items():
                    for mode in MODES:
                        for name, which in order:
                            results[name].setdefault(label, {}).setdefault(mode, {}).setdefault(which, []).append(
                                _measure(servers[(name, which)], path, kind, mode, seconds, client_cpus))
        finally:
            for s in servers.values():
                s.stop()
    return results


def summary(results: dict) -> dict:
    """Per checkout, case and mode: the medians over rounds of the server's and the floor's CPU per review,
    ``decide()``'s, the CPU outside it and its ratio to the floor's review, req/s, p50, p99 and load."""
    out: dict = {}
    for name, tree in results.items():
        for label in CASES:
            decide_ms = statistics.median(r[label]["cpu_ms"] for r in tree["engine_only"])
            for mode in MODES:
                runs = tree[label][mode]
                med = {which: {key: statistics.median(r[key] for r in runs[which])
                               for key in ("server_cpu_ms_per_review", "rps", "p50_ms", "p99_ms", "load")}
                       for which in ("rules", "floor")}
                rules, floor = med["rules"]["server_cpu_ms_per_review"], med["floor"]["server_cpu_ms_per_review"]
                out.setdefault(name, {}).setdefault(label, {})[mode] = {
                    "decide_ms": decide_ms, "server_ms": rules, "outside_ms": round(rules - decide_ms, 3),
                    "floor_ms": floor, "outside_x_floor": round((rules - decide_ms) / floor, 2),
                    "rps": med["rules"]["rps"], "floor_rps": med["floor"]["rps"], "p50_ms": med["rules"]["p50_ms"],
                    "p99_ms": med["rules"]["p99_ms"], "floor_p50_ms": med["floor"]["p50_ms"],
                    "load": med["rules"]["load"], "rounds": len(runs["rules"])}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="measured window of each load")
    parser.add_argument("--rounds", type=int, default=1, help="every load this many times; medians reported")
    parser.add_argument("--baseline", type=Path, default=None, metavar="DIR",
                        help="another checkout measured in the same run (e.g. a git worktree of the base commit)")
    parser.add_argument("--engine-reviews", type=int, default=500)
    parser.add_argument("--pin", action="store_true", help="servers on CPU 0, clients on the others")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cpus = os.cpu_count() or 1
    server_cpus = {0} if args.pin and cpus > 1 else None
    client_cpus = set(range(1, cpus)) if server_cpus else None
    trees = {"this": ROOT, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    load_before = os.getloadavg()[0]
    results = run(trees, args.seconds, args.rounds, args.engine_reviews, server_cpus, client_cpus)
    report = {"cpus": cpus, "load_before": load_before, "load_after": os.getloadavg()[0],
              "summary": summary(results), "runs": results}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"machine: {cpus} CPUs, Python {sys.version.split()[0]}, load average {report['load_before']:.2f} -> "
          f"{report['load_after']:.2f}, pinned: {bool(server_cpus)}; medians of {args.rounds} round(s)")
    for name, cases in report["summary"].items():
        print(f"{name} ({trees[name]}):")
        for label, modes in cases.items():
            for mode, r in modes.items():
                print(f"  {label:24s} {mode:6s} server CPU {r['server_ms']:6.3f} ms/review = decide() "
                      f"{r['decide_ms']:.3f} + outside {r['outside_ms']:6.3f} (x{r['outside_x_floor']:.2f} the "
                      f"floor's {r['floor_ms']:.3f});  {r['rps']:7.1f} req/s (floor {r['floor_rps']:.1f}), "
                      f"p50 {r['p50_ms']:.2f} ms (floor {r['floor_p50_ms']:.2f}), p99 {r['p99_ms']:.2f} ms, "
                      f"load {r['load']:.1f}")


if __name__ == "__main__":
    main()
