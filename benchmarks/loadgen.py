"""Admission-review load generator (docs/performance.md "The webhook under load"): the client side of benchmarks/webhook.py.

Runs in its own processes (never in the server's), on loopback only, for a bounded time. Every
request is a new AdmissionReview: a fresh uid, a new Pod name and a varied object (labels, image
tag, command, an env value, namespace-independent), so the server's memoisation sees realistic
traffic instead of one object repeated. One keep-alive ``http.client.HTTPSConnection`` per client
with TCP_NODELAY (as kube-apiserver's Go client).

Modes:

- ``paced``: one client sending ``--rps`` requests per second on a fixed schedule (open loop: a
  request sent late is timed from when it was due, so a stall is not hidden);
- ``closed``: ``--clients`` client processes, each sending back to back for ``--seconds``.

Prints one JSON object: ``count``, ``errors``, ``seconds``, ``rps``, ``p50_ms``, ``p90_ms``,
``p99_ms``, ``max_ms`` and ``client_cpu_s`` / ``client_cpu_share`` (user+system CPU of every
client process over the measured window, and that divided by the window: a share near the cores the
client can have means the figure is client-bound). Kinds of review: ``slice`` (a 20 % slice Pod,
mutated by /mutate-pods) and ``rule1`` (whole GPU plus slice: denied by /validate-pods).

Usage: ``python benchmarks/loadgen.py --url https://127.0.0.1:PORT --ca DIR/ca.crt --path
/mutate-pods --kind slice --mode paced --rps 100 --seconds 5``.
"""
from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import os
import resource
import socket
import ssl
import sys
import time
import uuid
from urllib.parse import urlsplit

A10G_QUEUE = "gpustack-fnv64-c4680bb149644f1c"
KINDS = {
    "slice": {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "20"},
    "rule1": {"nvidia.com/gpu": "1", "nvidia.com/gpu.sliced": "1",
              "nvidia.com/gpu.sliced.memory-percentage": "20"},
}
MAX_SECONDS = 120.0  # a load run is always bounded


def review(kind: str, seq: int, tag: str) -> tuple[bytes, bytes]:
    """A CREATE AdmissionReview v1 body for a new Pod of ``kind`` and its request uid: name, uid,
    labels, image tag, command and env vary with ``seq`` so no two requests carry the same object."""
    limits = KINDS[kind]
    name = f"bench-{tag}-{seq}"
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "default", "uid": str(uuid.uuid4()),
                        "labels": {"kueue.x-k8s.io/queue-name": A10G_QUEUE, "app": f"job-{seq % 97}",
                                   "run": str(seq)}},
           "spec": {"containers": [{"name": f"main-{seq % 7}", "image": f"ubuntu:24.{seq % 10:02d}",
                                    "command": ["sleep", str(60 + seq % 3600)],
                                    "env": [{"name": "SEQ", "value": str(seq)}],
                                    "resources": {"limits": dict(limits), "requests": dict(limits)}}]}}
    uid = str(uuid.uuid4())
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"},
                        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
                        "operation": "CREATE", "name": name, "namespace": "default",
                        "userInfo": {"username": "bench"}, "object": pod, "dryRun": False}}
    return json.dumps(body).encode(), uid.encode()


class Client:
    """One keep-alive HTTPS connection to a loopback webhook."""

    def __init__(self, url: str, cafile: str):
        parts = urlsplit(url)
        if parts.hostname not in ("127.0.0.1", "localhost", "::1"):
            raise SystemExit(f"--url {url}: the load generator targets loopback only")
        ctx = ssl.create_default_context(cafile=cafile)
        self.conn = http.client.HTTPSConnection(parts.hostname, parts.port, context=ctx, timeout=10)
        self.conn.connect()
        self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def post(self, path: str, body: bytes, uid: bytes) -> None:
        """POST one review; raises RuntimeError unless HTTP 200 with a response echoing the uid."""
        self.conn.request("POST", path, body, {"Content-Type": "application/json"})
        resp = self.conn.getresponse()
        data = resp.read()
        if resp.status != 200 or uid not in data:
            raise RuntimeError(f"HTTP {resp.status}: {data[:200]!r}")


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _worker(args: dict, start_at: float, out) -> None:
    """One client process: warm up, wait for the common start, run, send (latencies, errors, cpu)."""
    client = Client(args["url"], args["ca"])
    tag = f"{os.getpid()}"
    seq = 0
    for _ in range(args["warmup"]):
        client.post(args["path"], *review(args["kind"], seq, tag))
        seq += 1
    bodies = [review(args["kind"], seq + i, tag) for i in range(args["prebuilt"])]
    while time.time() < start_at:
        time.sleep(0.001)
    lat: list[float] = []
    errors = 0
    cpu0, t0 = _cpu(), time.perf_counter()
    end = t0 + args["seconds"]
    interval = 1.0 / args["rps"] if args["rps"] else 0.0
    i = 0
    while True:
        due = t0 + i * interval
        now = time.perf_counter()
        if due >= end or now >= end:
            break
        if due > now:
            time.sleep(due - now)
        sent = due if interval else time.perf_counter()
        body, uid = bodies[i] if i < len(bodies) else review(args["kind"], seq + i, tag)
        try:
            client.post(args["path"], body, uid)
            lat.append(time.perf_counter() - sent)
        except (OSError, RuntimeError, http.client.HTTPException):
            errors += 1
            client = Client(args["url"], args["ca"])
        i += 1
    out.put((lat, errors, _cpu() - cpu0, time.perf_counter() - t0))


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def run(url: str, ca: str, path: str, kind: str, mode: str, seconds: float, rps: float = 100.0,
        clients: int = 8, warmup: int = 30) -> dict:
    """Run one load and return its figures (see the module docstring). ``seconds`` is capped at
    MAX_SECONDS; ``paced`` uses one client at ``rps``, ``closed`` uses ``clients`` processes."""
    seconds = min(seconds, MAX_SECONDS)
    n = 1 if mode == "paced" else clients
    # requests are built before the clock starts when they fit in memory (client CPU stays off the path)
    expected = int(seconds * rps) + 1 if mode == "paced" else int(seconds * 4000 / n) + 1
    args = {"url": url, "ca": ca, "path": path, "kind": kind, "seconds": seconds, "warmup": warmup,
            "rps": rps if mode == "paced" else 0.0, "prebuilt": min(expected, 20000)}
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    start_at = time.time() + 1.0 + 0.3 * n  # every client connected and warmed up first
    procs = [ctx.Process(target=_worker, args=(args, start_at, out), daemon=True) for _ in range(n)]
    for p in procs:
        p.start()
    results = [out.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join(timeout=10)
    lat = [x for r in results for x in r[0]]
    errors = sum(r[1] for r in results)
    cpu = sum(r[2] for r in results)
    window = max(r[3] for r in results)
    ms = lambda v: round(v * 1000, 3)  # noqa: E731
    return {"mode": mode, "kind": kind, "path": path, "clients": n, "count": len(lat), "errors": errors,
            "seconds": round(window, 3), "rps": round(len(lat) / window, 1),
            "p50_ms": ms(_pct(lat, 0.50)), "p90_ms": ms(_pct(lat, 0.90)), "p99_ms": ms(_pct(lat, 0.99)),
            "max_ms": ms(max(lat)) if lat else None,
            "client_cpu_s": round(cpu, 3), "client_cpu_share": round(cpu / window, 3)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="https://127.0.0.1:PORT (loopback only)")
    parser.add_argument("--ca", required=True, help="CA certificate the server's certificate chains to")
    parser.add_argument("--path", required=True, help="webhook path, e.g. /mutate-pods")
    parser.add_argument("--kind", choices=sorted(KINDS), default="slice")
    parser.add_argument("--mode", choices=("paced", "closed"), default="paced")
    parser.add_argument("--rps", type=float, default=100.0, help="paced: requests per second")
    parser.add_argument("--clients", type=int, default=8, help="closed: concurrent client processes")
    parser.add_argument("--seconds", type=float, default=5.0, help=f"measured window (at most {MAX_SECONDS:.0f})")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.url, args.ca, args.path, args.kind, args.mode, args.seconds, args.rps, args.clients)))


if __name__ == "__main__":
    sys.exit(main())
