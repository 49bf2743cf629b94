"""Webhook benchmark (issue 5, item 9): Pod CREATE reviews through the real HTTPS server.

Starts two webhook processes with ``--self-signed`` on 127.0.0.1 (`accelpolicy webhook` with the real
rules, and as the floor the same server answering every review "allowed" without rules,
``python -m testing.hooks webhook-floor``), then for two reviews (a 20 % slice through
/mutate-pods, a rule-1 rejection through /validate-pods) measures:

- sequential: N requests on one keep-alive connection (p50, p99, throughput);
- paced: 100 requests per second for a few seconds (p50, p99) -- the goal is p99 <= 5 ms;
- concurrent: 8 client threads, one connection each (p50, p99, throughput);
- engine only: ``json.loads`` + ``decide()`` in-process, no HTTP (cold first review, then mean and
  p99 per review).

Goal (issue 5): p99 <= 5 ms at 100 rps, p50 <= 1.5 x the floor. Figures, not pass/fail.
Usage: ``.venv/bin/python benchmarks/webhook.py [--requests N] [--json]``.
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
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runtime.engine.admission import AdmissionEngine, admission_view, decide, review_for  # noqa: E402
from runtime.engine.policy import Policy  # noqa: E402
from runtime.rules.loader import load_rules  # noqa: E402
from runtime.snapshots import load_snapshot  # noqa: E402

SNAPSHOT = ROOT / "tests" / "fixtures" / "seed" / "common"
A10G_QUEUE = "gpustack-fnv64-c4680bb149644f1c"


def _pod(limits: dict) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "bench", "namespace": "default", "labels": {"kueue.x-k8s.io/queue-name": A10G_QUEUE}},
            "spec": {"containers": [{"name": "main", "image": "ubuntu:24.04", "command": ["sleep", "86400"],
                                     "resources": {"limits": limits, "requests": dict(limits)}}]}}


CASES = {
    "slice-20%  /mutate-pods": ("/mutate-pods", _pod({"nvidia.com/gpu.sliced": "1",
                                                      "nvidia.com/gpu.sliced.memory-percentage": "20"})),
    "rule-1     /validate-pods": ("/validate-pods", _pod({"nvidia.com/gpu": "1", "nvidia.com/gpu.sliced": "1",
                                                          "nvidia.com/gpu.sliced.memory-percentage": "20"})),
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One `accelpolicy webhook` child process with its own self-signed CA."""

    def __init__(self, tmp: Path, name: str, always_allow: bool):
        self.dir = tmp / name
        self.port = _free_port()
        # the floor: the same server and TLS answering "allowed" without rules (testing.hooks.AllowAllState)
        cmd = ([str(ROOT / ".venv" / "bin" / "python"), "-m", "testing.hooks", "webhook-floor"] if always_allow
               else [str(ROOT / ".venv" / "bin" / "accelpolicy"), "webhook"])
        cmd += ["--self-signed", str(self.dir), "--port", str(self.port), "--snapshot", str(SNAPSHOT)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
        self.url = f"https://127.0.0.1:{self.port}"

    def wait_ready(self) -> ssl.SSLContext:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.proc.stderr.read().decode()}")
            if (self.dir / "ca.crt").exists():
                ctx = ssl.create_default_context(cafile=str(self.dir / "ca.crt"))
                try:
                    if httpx.get(self.url + "/readyz", verify=ctx, timeout=1).status_code == 200:
                        return ctx
                except httpx.HTTPError:
                    pass
            time.sleep(0.1)
        raise RuntimeError("server not ready after 60 s")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary(lat: list[float], elapsed: float) -> dict:
    return {"p50_ms": round(_pct(lat, 0.50) * 1000, 3), "p99_ms": round(_pct(lat, 0.99) * 1000, 3),
            "rps": round(len(lat) / elapsed, 1)}


def _client(url: str, ctx) -> httpx.Client:
    """Keep-alive HTTPS client with TCP_NODELAY (as kube-apiserver's Go client; without it Nagle's
    algorithm and delayed ACKs add ~40 ms to every request)."""
    transport = httpx.HTTPTransport(verify=ctx, socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
    return httpx.Client(base_url=url, transport=transport)


def _post(client: httpx.Client, path: str, body: bytes) -> float:
    t = time.perf_counter()
    r = client.post(path, content=body, headers={"content-type": "application/json"})
    dt = time.perf_counter() - t
    if r.status_code != 200 or "response" not in r.json():
        raise RuntimeError(f"bad answer {r.status_code}: {r.text[:200]}")
    return dt


def sequential(url: str, ctx, path: str, body: bytes, n: int) -> dict:
    with _client(url, ctx) as c:
        for _ in range(50):
            _post(c, path, body)
        start = time.perf_counter()
        lat = [_post(c, path, body) for _ in range(n)]
        return _summary(lat, time.perf_counter() - start)


def paced(url: str, ctx, path: str, body: bytes, rps: int, seconds: float) -> dict:
    with _client(url, ctx) as c:
        for _ in range(20):
            _post(c, path, body)
        lat, start, interval = [], time.perf_counter(), 1.0 / rps
        for i in range(int(rps * seconds)):
            due = start + i * interval
            now = time.perf_counter()
            if due > now:
                time.sleep(due - now)
            lat.append(_post(c, path, body))
        return {k: v for k, v in _summary(lat, time.perf_counter() - start).items() if k != "rps"}


def concurrent(url: str, ctx, path: str, body: bytes, n: int, clients: int = 8) -> dict:
    lat: list[float] = []
    lock = threading.Lock()

    def worker(count: int) -> None:
        with _client(url, ctx) as c:
            for _ in range(10):
                _post(c, path, body)
            mine = [_post(c, path, body) for _ in range(count)]
        with lock:
            lat.extend(mine)

    threads = [threading.Thread(target=worker, args=(n // clients,)) for _ in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return _summary(lat, time.perf_counter() - start)


def engine_only(n: int) -> dict:
    policy = Policy(load_rules())
    engine = AdmissionEngine(policy)
    view = admission_view(policy, load_snapshot([SNAPSHOT]))
    out = {}
    for label, (path, pod) in CASES.items():
        name = engine.by_path(path)
        body = json.dumps(review_for(pod, uid="bench"))
        t = time.perf_counter()
        decide(engine, json.loads(body), view, name)
        cold = time.perf_counter() - t
        lat = []
        for _ in range(n):  # a fresh parse per review, as the server does (no identity-cache shortcut)
            t = time.perf_counter()
            decide(engine, json.loads(body), view, name)
            lat.append(time.perf_counter() - t)
        out[label] = {"cold_ms": round(cold * 1000, 3), "mean_ms": round(statistics.mean(lat) * 1000, 3),
                      "p99_ms": round(_pct(lat, 0.99) * 1000, 3)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--paced-seconds", type=float, default=5.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results: dict = {"engine_only": engine_only(args.requests)}
    with tempfile.TemporaryDirectory(prefix="accelpolicy-bench-") as tmp:
        servers = {"rules": Server(Path(tmp), "rules", False), "floor": Server(Path(tmp), "floor", True)}
        try:
            ctxs = {k: s.wait_ready() for k, s in servers.items()}
            for label, (path, pod) in CASES.items():
                body = json.dumps(review_for(pod, uid="bench")).encode()
                for kind, server in servers.items():
                    url, ctx = server.url, ctxs[kind]
                    results.setdefault(label, {})[kind] = {
                        "sequential": sequential(url, ctx, path, body, args.requests),
                        "paced_100rps": paced(url, ctx, path, body, 100, args.paced_seconds),
                        "concurrent_8": concurrent(url, ctx, path, body, args.requests),
                    }
        finally:
            for s in servers.values():
                s.stop()
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    print("engine only (decide(), no HTTP):")
    for label, r in results["engine_only"].items():
        print(f"  {label}: cold {r['cold_ms']} ms, warm mean {r['mean_ms']} ms, p99 {r['p99_ms']} ms")
    for label in CASES:
        print(f"{label}:")
        for mode in ("sequential", "paced_100rps", "concurrent_8"):
            for kind in ("rules", "floor"):
                r = results[label][kind][mode]
                rps = f", {r['rps']} req/s" if "rps" in r else ""
                print(f"  {mode:13s} {kind:5s}: p50 {r['p50_ms']:7.3f} ms  p99 {r['p99_ms']:7.3f} ms{rps}")
            ratio = results[label]["rules"][mode]["p50_ms"] / results[label]["floor"][mode]["p50_ms"]
            print(f"  {mode:13s} p50 rules/floor = {ratio:.2f}")


if __name__ == "__main__":
    main()
