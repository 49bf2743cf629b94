"""Instances through the API server at scale (docs/performance.md "The live controller at 1,000 nodes"): figures, not pass/fail.

On a bare local control plane (as benchmarks/scale.py: kube-apiserver + etcd built from their Go
modules, every CRD, the synthetic cluster of benchmarks/derive.py written directly) it starts
``accelpolicy controller`` as a subprocess, as the ServiceAccount the rules name
(``controllerServiceAccount``), serving and registering its admission webhooks on a loopback port.
Then:

- ``apply_to_pod``: ``--samples`` Instances (seed step 3's ``sliced-demo`` on the A10G type, the
  mutating webhook filling its defaults) created one at a time: POST -> the controller's Pod of the
  same name exists (polled every 20 ms); median and max;
- ``load``: a load generator in its own process (spawned; one keep-alive session, 16 threads)
  creates unique Instances (a new name, image tag and command each) at ``--rate`` per second for
  ``--seconds`` through the API server, which calls the mutating and validating webhooks for each:
  client latency from each request's due time (a late request counts its wait: no coordinated
  omission) p50/p99/max, errors, achieved rate, the client's CPU share;
- the webhook server's own answer time during the load, from the controller's
  ``accelpolicy_admission_review_seconds`` histogram (the difference of two scrapes; a quantile is
  the upper bound of the bucket it falls in, buckets 0.5, 1, 2, 3, 5, 7.5, 10, 25 ms ...);
- ``backlog_s``: the load's end -> every created Instance has its Pod; the reconcile passes from the
  load's start to then (count, writes, the pass thread's CPU); controller CPU and RSS.

Usage: ``.venv/bin/python benchmarks/instances_live.py [--nodes 1000] [--rate 100] [--seconds 10]
[--json]``. Needs ``make controlplane``. Loopback only; every phase bounded in time.
"""
from __future__ import annotations

import argparse
import copy
import json
import multiprocessing
import os
import resource
import ssl
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.derive import generate  # noqa: E402
from benchmarks.scale import ControllerProcess, _path, write_objects  # noqa: E402
from runtime.engine.policy import Policy  # noqa: E402
from runtime.kube.session import KubeApiError, connect  # noqa: E402
from runtime.rules.loader import load_rules  # noqa: E402
from testing.localcluster import LocalCluster  # noqa: E402
from testing.localcluster.processes import free_port  # noqa: E402
from testing.localcluster.testing import service_account_kubeconfig, with_crds  # noqa: E402

TEMPLATE = yaml.safe_load((ROOT / "demo" / "sliced-demo.yaml").read_text())
NAMESPACE = TEMPLATE["metadata"]["namespace"]
STEP_TIMEOUT = 180.0
REVIEW_METRIC = "accelpolicy_admission_review_seconds"


def instance(name: str, i: int) -> dict:
    """Seed step 3's Instance named ``name``, its image tag and command varied by ``i``."""
    doc = copy.deepcopy(TEMPLATE)
    doc["metadata"]["name"] = name
    doc["spec"]["image"] = f"ubuntu:24.{i % 97:02d}"
    doc["spec"]["command"] = ["sleep", str(86400 + i)]
    return doc


def _create_load(kubeconfig: str, rate: float, seconds: float, prefix: str, out) -> None:
    """The load generator's process: ``rate`` creates per second for ``seconds``; puts its figures on ``out``."""
    session = connect(kubeconfig)
    path = _path(session, "Instance", NAMESPACE)
    latencies: list[float] = []
    errors: dict[str, int] = {}
    lock = threading.Lock()

    def create(i: int, due: float) -> None:
        try:
            session.call("post", path, body=instance(f"{prefix}-{i:05d}", i))
            error = None
        except KubeApiError as exc:
            error = f"{exc.status} {exc.reason}"
        except Exception as exc:  # noqa: BLE001 - a transport error is a figure here
            error = type(exc).__name__
        with lock:
            latencies.append(time.monotonic() - due)
            if error:
                errors[error] = errors.get(error, 0) + 1

    cpu0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    total = int(rate * seconds)
    with ThreadPoolExecutor(16) as pool:
        for i in range(total):
            due = t0 + i / rate
            time.sleep(max(0.0, due - time.monotonic()))
            pool.submit(create, i, due)
    wall = time.monotonic() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    out.put({"sent": total, "latencies": latencies, "errors": errors, "wall_s": wall, "client_cpu_s": cpu})


def _quantiles(values: list[float]) -> dict:
    ordered = sorted(values)
    if not ordered:
        return {}
    at = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"p50_ms": round(at(0.50) * 1000, 2), "p99_ms": round(at(0.99) * 1000, 2),
            "max_ms": round(ordered[-1] * 1000, 2)}


def scrape(port: int, ca: Path) -> dict[tuple[str, str], float]:
    """``(webhook, le) -> count`` of the review histogram on the controller's webhook server."""
    context = ssl.create_default_context(cafile=str(ca))
    text = urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=context, timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith(f"{REVIEW_METRIC}_bucket{{"):
            labels, value = line[len(REVIEW_METRIC) + 8:].rsplit("} ", 1)
            fields = dict(item.split("=", 1) for item in labels.split(","))
            out[(fields["webhook"].strip('"'), fields["le"].strip('"'))] = float(value)
    return out


def bucket_quantiles(before: dict, after: dict) -> dict:
    """Per webhook: reviews during the load and the bucket bounds (ms) holding p50 and p99."""
    out = {}
    for webhook in sorted({w for w, _ in after}):
        bounds = sorted(((float(le), after[(w, le)] - before.get((w, le), 0.0)) for w, le in after
                         if w == webhook), key=lambda b: b[0])
        total = bounds[-1][1] if bounds else 0
        if not total:
            continue

        def bound(q: float) -> str:
            le = next(le for le, n in bounds if n >= q * total)
            return "> 1000" if le == float("inf") else f"<= {le * 1000:g}"
        out[webhook] = {"reviews": int(total), "p50_ms": bound(0.5), "p99_ms": bound(0.99)}
    return out


def pod_count(session, prefix: str) -> int:
    pods = session.call("get", _path(session, "Pod", NAMESPACE))["items"]
    return sum(1 for p in pods if p["metadata"]["name"].startswith(prefix))


def wait(fetch, done, timeout: float = STEP_TIMEOUT, every: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fetch()
        if done(value):
            return value
        time.sleep(every)
    raise TimeoutError(f"not done after {timeout}s (last: {value!r})")


def apply_to_pod(session, samples: int) -> list[float]:
    """Seconds from each sample Instance's create to its Pod existing."""
    out = []
    for i in range(samples):
        name = f"probe-{i:03d}"
        t0 = time.monotonic()
        session.call("post", _path(session, "Instance", NAMESPACE), body=instance(name, i))

        def pod():
            try:
                return session.call("get", _path(session, "Pod", NAMESPACE, name))
            except KubeApiError as exc:
                if exc.status == 404:
                    return None
                raise
        wait(pod, bool)
        out.append(time.monotonic() - t0)
    return out


def run(nodes: int, rate: float, seconds: float, samples: int) -> dict:
    """The whole benchmark (see the module docstring); returns the figures."""
    policy = Policy(load_rules())
    objects = generate(nodes)
    out: dict = {"nodes": nodes, "rate": rate, "seconds": seconds, "load_before": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="accelpolicy-instances-") as tmp, LocalCluster() as cluster:
        tmp = Path(tmp)
        _, kubectl = with_crds(cluster)
        session = connect(cluster.kubeconfig)
        out["write_objects_s"] = round(write_objects(session, objects), 2)
        controller = policy.controller
        config = service_account_kubeconfig(kubectl, cluster.kubeconfig, controller.systemNamespace,
                                            controller.controllerServiceAccount, tmp / "controller.kubeconfig")
        port = free_port()
        ctl = ControllerProcess(config, tmp / "controller.log",
                                ("--webhook-port", str(port), "--webhook-self-signed", str(tmp / "tls")))
        try:
            ctl.wait_reconciles(1)
            type_name = TEMPLATE["spec"]["type"]
            wait(lambda: (session.call("get", _path(session, "InstanceType", name=type_name)).get("status") or {}),
                 lambda status: bool(status.get("entrance")))
            wait(lambda: session.call("get", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations")
                 ["items"], bool)
            out["ready_s"] = round(time.monotonic() - ctl.t0, 2)
            times = apply_to_pod(session, samples)
            out["apply_to_pod_s"] = {"median": round(statistics.median(times), 3), "max": round(max(times), 3),
                                     "samples": len(times)}
            before, cpu0, passes0 = scrape(port, tmp / "tls" / "ca.crt"), ctl.cpu(), len(ctl.reconciles())
            queue = multiprocessing.get_context("spawn").Queue()
            loader = multiprocessing.get_context("spawn").Process(
                target=_create_load, args=(str(cluster.kubeconfig), rate, seconds, "load", queue))
            loader.start()
            load = queue.get(timeout=seconds + STEP_TIMEOUT)
            loader.join(30)
            ended = time.monotonic()
            after = scrape(port, tmp / "tls" / "ca.crt")
            out["load"] = {"sent": load["sent"], "errors": load["errors"], **_quantiles(load["latencies"]),
                           "achieved_per_s": round(load["sent"] / load["wall_s"], 1),
                           "client_cpu_share": round(load["client_cpu_s"] / load["wall_s"], 3)}
            out["webhook_during_load"] = bucket_quantiles(before, after)
            created = load["sent"] - sum(load["errors"].values())
            wait(lambda: pod_count(session, "load-"), lambda n: n >= created, every=0.2)
            out["backlog_s"] = round(time.monotonic() - ended, 2)
            out["controller_cpu_s"] = round(ctl.cpu() - cpu0, 2)
            passes = ctl.reconciles()[passes0:]
            out["passes"] = {"count": len(passes), "writes": sum(p["writes"] for p in passes),
                             "cpu_s": round(sum(p["cpu"] or 0.0 for p in passes), 2)}
            out["rss_mib"] = {"settled": round(ctl.rss() / 1024), "peak": round(ctl.rss_peak / 1024)}
        finally:
            ctl.stop()
    out["load_after"] = os.getloadavg()[0]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000, help="synthetic nodes (default 1000)")
    parser.add_argument("--rate", type=float, default=100.0, help="Instance creates per second (default 100)")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long the load runs (default 10, at most 60)")
    parser.add_argument("--samples", type=int, default=10, help="apply -> Pod samples (default 10)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if not 0 < args.seconds <= 60:
        parser.error("--seconds: must be in (0, 60]")
    figures = run(args.nodes, args.rate, args.seconds, args.samples)
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    load = figures["load"]
    print(f"{figures['nodes']} nodes; controller ready (webhooks registered) after {figures['ready_s']} s")
    print(f"  Instance create -> its Pod: median {figures['apply_to_pod_s']['median']} s, "
          f"max {figures['apply_to_pod_s']['max']} s ({figures['apply_to_pod_s']['samples']} samples)")
    print(f"  {load['sent']} creates at {figures['rate']:g}/s ({load['achieved_per_s']}/s achieved): API p50 "
          f"{load['p50_ms']} ms, p99 {load['p99_ms']} ms, max {load['max_ms']} ms; errors {load['errors'] or 0}; "
          f"client CPU {load['client_cpu_share']:.0%} of a core")
    for webhook, q in figures["webhook_during_load"].items():
        print(f"  webhook {webhook}: {q['reviews']} reviews, p50 {q['p50_ms']} ms, p99 {q['p99_ms']} ms")
    passes = figures["passes"]
    print(f"  {passes['count']} reconcile passes from the load's start to the last Pod: {passes['writes']} writes, "
          f"{passes['cpu_s']} s of the pass thread's CPU")
    print(f"  every Instance's Pod {figures['backlog_s']} s after the load; controller CPU {figures['controller_cpu_s']} s; "
          f"RSS {figures['rss_mib']['settled']} / {figures['rss_mib']['peak']} MiB (settled / peak)")
    print(f"  load average {figures['load_before']:.1f} -> {figures['load_after']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
