"""Webhook benchmark (docs/performance.md "The webhook under load"): unique Pod reviews against the real HTTPS server.

Starts two servers as subprocesses with ``--self-signed`` on 127.0.0.1: ``accelpolicy webhook`` with
the real rules and, as the floor, the same server and TLS answering every review "allowed" without
rules (``python -m testing.hooks webhook-floor``). The client is benchmarks/loadgen.py in its own
processes: every request a new Pod name, uid and varied object (so the engine's memo sees real
traffic), keep-alive ``http.client``, loopback only, bounded in time. For two reviews (a 20 % slice
through /mutate-pods, a rule-1 denial through /validate-pods) it measures:

- paced: 100 requests per second, one client (p50, p99);
- closed: 8 concurrent client processes back to back (throughput, p50, p99);

each with the ratio to the floor measured in the same run, the client's own CPU share, the
server's CPU per review (it holds on a busy machine where wall times do not) and the load average. Engine only: ``decide()`` in-process on unique objects (mean,
p99 and CPU per review, no HTTP).

Goals (docs/performance.md "The webhook under load"): paced p99 <= 3 ms and p50 <= 1.5x floor; 8 clients >= 1,500 req/s, p99 <= 10 ms.
Figures, not pass/fail. ``--pin`` pins each server to CPU 0 and the clients to the other CPUs.
Usage: ``.venv/bin/python benchmarks/webhook.py [--seconds 5] [--pin] [--json]``.
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One webhook child process (`accelpolicy webhook`, or the floor) with its own self-signed CA."""

    def __init__(self, tmp: Path, name: str, floor: bool, cpus: set[int] | None):
        self.dir = tmp / name
        self.port = _free_port()
        # `python -c` with cwd=ROOT: the code of this checkout, whatever the venv's editable install points at
        cmd = ([sys.executable, "-m", "testing.hooks", "webhook-floor"] if floor
               else [sys.executable, "-c", "from runtime.cli import main; main(prog_name='accelpolicy')", "webhook"])
        cmd += ["--self-signed", str(self.dir), "--port", str(self.port), "--snapshot", str(SNAPSHOT)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT,
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
        self.proc.wait(timeout=10)


def engine_and_view() -> tuple[AdmissionEngine, object]:
    """The shipped rules' AdmissionEngine and the admission view of :data:`SNAPSHOT`."""
    policy = Policy(load_rules())
    return AdmissionEngine(policy), admission_view(policy, load_snapshot([SNAPSHOT]))


def engine_only(n: int) -> dict:
    """``decide()`` in-process on ``n`` unique reviews per case: mean and p99 ms (no HTTP)."""
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


def _measure(server: Server, path: str, kind: str, mode: str, seconds: float, client_cpus) -> dict:
    cpu0 = server.cpu_seconds()
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
    return r


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="measured window of each load")
    parser.add_argument("--engine-reviews", type=int, default=500)
    parser.add_argument("--pin", action="store_true", help="servers on CPU 0, clients on the others")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cpus = os.cpu_count() or 1
    server_cpus = {0} if args.pin and cpus > 1 else None
    client_cpus = set(range(1, cpus)) if server_cpus else None
    results: dict = {"cpus": cpus, "load_before": os.getloadavg()[0],
                     "engine_only": engine_only(args.engine_reviews)}
    with tempfile.TemporaryDirectory(prefix="accelpolicy-bench-") as tmp:
        servers = {"rules": Server(Path(tmp), "rules", False, server_cpus),
                   "floor": Server(Path(tmp), "floor", True, server_cpus)}
        try:
            for s in servers.values():
                s.wait_ready()
            for label, (path, kind) in CASES.items():
                for mode in ("paced", "closed"):
                    for which, server in servers.items():
                        results.setdefault(label, {}).setdefault(mode, {})[which] = _measure(
                            server, path, kind, mode, args.seconds, client_cpus)
        finally:
            for s in servers.values():
                s.stop()
    results["load_after"] = os.getloadavg()[0]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"machine: {cpus} CPUs, Python {sys.version.split()[0]}, load average "
          f"{results['load_before']:.2f} -> {results['load_after']:.2f}, pinned: {bool(server_cpus)}")
    print("engine only (decide() on unique reviews, no HTTP):")
    for label, r in results["engine_only"].items():
        print(f"  {label:24s} mean {r['mean_ms']:6.3f} ms  p99 {r['p99_ms']:6.3f} ms  CPU {r['cpu_ms']:6.3f} ms/review")
    for label in CASES:
        print(f"{label}:")
        for mode in ("paced", "closed"):
            rules, floor = results[label][mode]["rules"], results[label][mode]["floor"]
            for which, r in (("rules", rules), ("floor", floor)):
                print(f"  {mode:6s} {which:5s} {r['clients']} client(s): {r['rps']:7.1f} req/s  p50 {r['p50_ms']:6.3f} ms"
                      f"  p99 {r['p99_ms']:6.3f} ms  errors {r['errors']}  client CPU {r['client_cpu_share']:.2f}"
                      f"  server CPU {r['server_cpu_ms_per_review']:.3f} ms/review")
            print(f"  {mode:6s} rules/floor: p50 x{rules['p50_ms'] / floor['p50_ms']:.2f}  "
                  f"p99 x{rules['p99_ms'] / floor['p99_ms']:.2f}  req/s x{rules['rps'] / floor['rps']:.2f}  "
                  f"server CPU/review x{rules['server_cpu_ms_per_review'] / floor['server_cpu_ms_per_review']:.2f}")


if __name__ == "__main__":
    main()
