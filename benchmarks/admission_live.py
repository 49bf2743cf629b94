"""The webhooks' latency while the controller is busy, in the chart's layout (docs/performance.md "The webhooks apart from the controller").

On a bare local control plane (as benchmarks/scale.py: kube-apiserver + etcd built from their Go
modules, every CRD, the synthetic cluster of benchmarks/derive.py written directly) it starts the
processes as the chart runs them, then measures the webhook's answer time from a load generator in its
own process (benchmarks/loadgen.py: paced, a new Pod in every review, loopback only), twice:

- ``idle``: nothing else happens;
- ``busy``: at the same time a churn process changes node facts at ``--churn-rate`` events per second
  across every node (each event: one accelerated node's Devices ledger row toggles, or, one event in five,
  a node's worker NodeFeature ``gpustack.ai/managed`` flips, and flips back at that node's next turn), and
  a create process makes unique Instances through the API server at ``--rate`` per second (each one
  reviewed by both Instance webhooks on the way in, then reconciled into a Pod by the controller).

Layouts (``--layout``):

- ``separate`` (the chart's): ``accelpolicy admission`` serves the webhooks from its own caches; the
  controller runs with ``--webhook-registration-only`` and registers them for it;
- ``inprocess`` (the layout before the admission replicas): the controller serves the webhooks itself (``--webhook-port``);
- ``pod``: ``separate`` with both processes pinned to one CPU (``taskset``), as two containers of one
  Pod share a node's CPUs under one limit would; ``separate`` lets the kernel place them.

Figures: idle and busy p50/p99/max of the paced reviews and the ratio busy p99 / idle p99 (goal <= 2);
the server's own answer time from its histogram; the churn and creates achieved, their API latency and
errors; the reconcile passes and controller CPU during the busy window; the admission view's rebuilds
(count, mean seconds) and staleness; RSS of each process, settled and peak.

Usage: ``.venv/bin/python benchmarks/admission_live.py [--nodes 5000] [--layout separate,inprocess]
[--rate 100] [--churn-rate 20] [--review-rps 100] [--seconds 20] [--json]`` (several layouts run in turn
on one cluster: writing 5,000 nodes is the slow part). Needs ``make controlplane``. Loopback
only; every phase bounded in time.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import loadgen  # noqa: E402
from benchmarks.derive import generate  # noqa: E402
from benchmarks.instances_live import (NAMESPACE, TEMPLATE, _create_load, _quantiles, bucket_quantiles,  # noqa: E402
                                       pod_count, scrape, wait)
from benchmarks.scale import (ControllerProcess, _accelerated_nodes, _path, flip, set_ledger_row, set_managed,  # noqa: E402
                              touch_ledger, write_objects)
from runtime.engine.policy import Policy  # noqa: E402
from runtime.kube.session import MERGE_PATCH, KubeApiError, connect  # noqa: E402
from runtime.rules.loader import load_rules  # noqa: E402
from testing.localcluster import LocalCluster  # noqa: E402
from testing.localcluster.processes import free_port  # noqa: E402
from testing.localcluster.testing import service_account_kubeconfig, with_crds  # noqa: E402

STEP_TIMEOUT = 900.0
LAYOUTS = ("separate", "inprocess", "pod")


class AdmissionProcess(ControllerProcess):
    """``accelpolicy admission`` as a subprocess (the RSS and CPU readings of :class:`ControllerProcess`)."""

    def __init__(self, kubeconfig: Path, log: Path, port: int, tls: Path, pin: str | None = None,
                 extra_args: tuple[str, ...] = ()):
        self.log_path = log
        self.log = open(log, "w")
        self.t0 = time.monotonic()
        argv = [str(Path(sys.executable).parent / "accelpolicy"), "admission", "--kubeconfig", str(kubeconfig),
                "--webhook-port", str(port), "--webhook-self-signed", str(tls), *extra_args]
        self.proc = subprocess.Popen((["taskset", "-c", pin] if pin else []) + argv, stdout=self.log,
                                     stderr=subprocess.STDOUT, cwd=ROOT)
        self.rss_peak = 0
        self._stop = threading.Event()
        threading.Thread(target=self._sample, daemon=True).start()


def _readyz(port: int, ca: Path) -> int:
    try:
        context = ssl.create_default_context(cafile=str(ca))
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=context, timeout=5) as answer:
            return answer.status
    except OSError:
        return 0


def _metric(port: int, ca: Path, name: str) -> float | None:
    context = ssl.create_default_context(cafile=str(ca))
    text = urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=context, timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def _flip(session, objects: list[dict], node: str, value: str) -> None:
    """``gpustack.ai/managed`` set to ``value`` on ``node``, in ``objects`` and live (nothing is timed here)."""
    set_managed(objects, node, value)
    flip(session, node, value)


def _churn(kubeconfig: str, objects: list[dict], nodes: list[str], rate: float, seconds: float, out) -> None:
    """The churn process: ``rate`` node-fact events per second for ``seconds`` (see the module docstring)."""
    session = connect(kubeconfig)
    rng = random.Random(21)
    flipped: set[str] = set()
    errors, latencies = 0, []
    t0 = time.monotonic()
    total = int(rate * seconds)
    for i in range(total):
        due = t0 + i / rate
        time.sleep(max(0.0, due - time.monotonic()))
        node = rng.choice(nodes)
        try:
            if node in flipped:
                _flip(session, objects, node, "true")
                flipped.discard(node)
            elif i % 5 == 4:
                _flip(session, objects, node, "false")
                flipped.add(node)
            else:
                touch_ledger(session, node, set_ledger_row(objects, node))
            latencies.append(time.monotonic() - due)
        except (KubeApiError, OSError):
            errors += 1
    for node in sorted(flipped):  # the cluster as it was
        _flip(session, objects, node, "true")
    out.put({"sent": total, "errors": errors, "wall_s": time.monotonic() - t0, "latencies": latencies})


def _reviews(port: int, ca: Path, seconds: float, rps: float) -> dict:
    return loadgen.run(f"https://127.0.0.1:{port}", str(ca), "/mutate-pods", "slice", "paced", seconds, rps)


def _clean_load(session) -> None:
    """Remove the webhook configurations (no server answers them now), then the Instances and Pods a
    layout's run created (no controller runs: finalizers first)."""
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        session.call("delete", f"/apis/admissionregistration.k8s.io/v1/{kind.lower()}s")
    path = _path(session, "Instance", NAMESPACE)
    for item in session.call("get", path).get("items") or []:
        if item["metadata"].get("finalizers"):
            session.call("patch", _path(session, "Instance", NAMESPACE, item["metadata"]["name"]),
                         body={"metadata": {"finalizers": None}}, content_type=MERGE_PATCH)
    session.call("delete", path)
    session.call("delete", _path(session, "Pod", NAMESPACE))
    wait(lambda: len(session.call("get", path).get("items") or []) + pod_count(session, ""), lambda n: n == 0,
         timeout=STEP_TIMEOUT, every=0.5)


def run(nodes: int, layouts: list[str], rate: float, churn_rate: float, review_rps: float, seconds: float,
        admission_args: tuple[str, ...] = ()) -> dict:
    """The benchmark for each of ``layouts`` in turn on one cluster (see the module docstring); returns
    ``{"nodes", "write_objects_s", "layouts": {layout: figures}}``."""
    policy = Policy(load_rules())
    objects = generate(nodes)
    out: dict = {"nodes": nodes, "layouts": {}}
    with tempfile.TemporaryDirectory(prefix="accelpolicy-admission-") as tmp, LocalCluster() as cluster:
        tmp = Path(tmp)
        _, kubectl = with_crds(cluster)
        session = connect(cluster.kubeconfig)
        out["write_objects_s"] = round(write_objects(session, objects), 2)
        controller = policy.controller
        config = service_account_kubeconfig(kubectl, cluster.kubeconfig, controller.systemNamespace,
                                            controller.controllerServiceAccount, tmp / "controller.kubeconfig")
        for i, layout in enumerate(layouts):
            if i:
                _clean_load(session)
            work = tmp / layout
            work.mkdir()
            out["layouts"][layout] = _layout(cluster, session, config, objects, work, layout, rate, churn_rate,
                                             review_rps, seconds, admission_args)
            print(json.dumps({layout: out["layouts"][layout]}), file=sys.stderr, flush=True)   # kept if a later one fails
    return out


def _layout(cluster, session, config: Path, objects: list[dict], tmp: Path, layout: str, rate: float,
            churn_rate: float, review_rps: float, seconds: float, admission_args: tuple[str, ...]) -> dict:
    """One layout's processes started, measured idle and busy, stopped; its figures."""
    out: dict = {"layout": layout, "rate": rate, "churn_rate": churn_rate, "review_rps": review_rps,
                 "seconds": seconds, "admission_args": list(admission_args), "load_before": os.getloadavg()[0]}
    ctx = multiprocessing.get_context("spawn")
    port, tls = free_port(), tmp / "tls"
    admission = None
    if layout == "inprocess":
        ctl = ControllerProcess(config, tmp / "controller.log",
                                ("--webhook-port", str(port), "--webhook-self-signed", str(tls)))
    else:
        pin = "0" if layout == "pod" else None
        admission = AdmissionProcess(cluster.kubeconfig, tmp / "admission.log", port, tls, pin, admission_args)
        wait(lambda: (admission.proc.poll(), _readyz(port, tls / "ca.crt")),
             lambda got: got[0] is not None or got[1] == 200, timeout=STEP_TIMEOUT, every=0.2)
        if admission.proc.poll() is not None:
            raise RuntimeError(f"admission exited: {(tmp / 'admission.log').read_text()[-2000:]}")
        out["admission_ready_s"] = round(time.monotonic() - admission.t0, 2)
        ctl = ControllerProcess(config, tmp / "controller.log",
                                ("--webhook-registration-only", "--webhook-url-base", f"https://127.0.0.1:{port}",
                                 "--webhook-ca", str(tls / "ca.crt")))
        if pin:
            subprocess.run(["taskset", "-a", "-p", "-c", pin, str(ctl.proc.pid)], check=True, capture_output=True)
    ca = tls / "ca.crt"
    try:
        ctl.wait_reconciles(1, timeout=STEP_TIMEOUT)
        wait(lambda: session.call("get", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations")
             ["items"], bool, timeout=STEP_TIMEOUT)
        wait(lambda: _readyz(port, ca), lambda status: status == 200, timeout=STEP_TIMEOUT)
        type_name = TEMPLATE["spec"]["type"]
        wait(lambda: (session.call("get", _path(session, "InstanceType", name=type_name)).get("status") or {}),
             lambda status: bool(status.get("entrance")), timeout=STEP_TIMEOUT)
        ctl.wait_quiet(seconds=3.0, timeout=STEP_TIMEOUT)
        out["ready_s"] = round(time.monotonic() - ctl.t0, 2)
        out["idle"] = _reviews(port, ca, seconds, review_rps)
        rebuilds0 = _metric(port, ca, "accelpolicy_admission_view_rebuilds_total") if admission else None
        rebuild_s0 = _metric(port, ca, "accelpolicy_admission_view_rebuild_seconds_total") if admission else None
        before, cpu0, passes0 = scrape(port, ca), ctl.cpu(), len(ctl.reconciles())
        admission_cpu0 = admission.cpu() if admission else None
        churn_q, create_q = ctx.Queue(), ctx.Queue()
        churner = ctx.Process(target=_churn, args=(str(cluster.kubeconfig), objects,
                                                   _accelerated_nodes(objects, len(objects)), churn_rate, seconds + 4,
                                                   churn_q))
        creator = ctx.Process(target=_create_load, args=(str(cluster.kubeconfig), rate, seconds + 4, "load", create_q))
        churner.start()
        creator.start()
        time.sleep(2.0)   # both loads running before the measured window opens
        stale = []
        sampler_stop = threading.Event()

        def sample_stale() -> None:
            while admission and not sampler_stop.wait(0.5):
                value = _metric(port, ca, "accelpolicy_admission_view_stale_seconds")
                if value is not None:
                    stale.append(value)
        sampler = threading.Thread(target=sample_stale, daemon=True)
        sampler.start()
        out["busy"] = _reviews(port, ca, seconds, review_rps)
        sampler_stop.set()
        churn, creates = churn_q.get(timeout=seconds + STEP_TIMEOUT), create_q.get(timeout=seconds + STEP_TIMEOUT)
        churner.join(30)
        creator.join(30)
        after = scrape(port, ca)
        out["ratio_p99"] = round(out["busy"]["p99_ms"] / out["idle"]["p99_ms"], 2)
        out["ratio_p50"] = round(out["busy"]["p50_ms"] / out["idle"]["p50_ms"], 2)
        out["server_during_busy"] = bucket_quantiles(before, after)
        out["churn"] = {"sent": churn["sent"], "errors": churn["errors"],
                        "achieved_per_s": round(churn["sent"] / churn["wall_s"], 1), **_quantiles(churn["latencies"])}
        out["creates"] = {"sent": creates["sent"], "errors": creates["errors"],
                          "achieved_per_s": round(creates["sent"] / creates["wall_s"], 1),
                          **_quantiles(creates["latencies"])}
        passes = ctl.reconciles()[passes0:]
        out["controller_busy"] = {"passes": len(passes), "writes": sum(p["writes"] for p in passes),
                                  "pass_cpu_s": round(sum(p["cpu"] or 0.0 for p in passes), 2),
                                  "cpu_s": round(ctl.cpu() - cpu0, 2)}
        if admission:
            rebuilds = _metric(port, ca, "accelpolicy_admission_view_rebuilds_total") - rebuilds0
            spent = _metric(port, ca, "accelpolicy_admission_view_rebuild_seconds_total") - rebuild_s0
            out["admission_busy"] = {"cpu_s": round(admission.cpu() - admission_cpu0, 2),
                                     "view_rebuilds": int(rebuilds),
                                     "view_rebuild_mean_s": round(spent / rebuilds, 3) if rebuilds else None,
                                     "view_stale_max_s": round(max(stale), 2) if stale else None}
        created = creates["sent"] - sum(creates["errors"].values())
        wait(lambda: pod_count(session, "load-"), lambda n: n >= created, timeout=STEP_TIMEOUT, every=0.5)
        out["rss_mib"] = {"controller": {"settled": round(ctl.rss() / 1024), "peak": round(ctl.rss_peak / 1024)}}
        if admission:
            out["rss_mib"]["admission"] = {"settled": round(admission.rss() / 1024),
                                           "peak": round(admission.rss_peak / 1024)}
    finally:
        ctl.stop()
        if admission:
            admission.stop()
    out["load_after"] = os.getloadavg()[0]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000, help="synthetic nodes (default 5000)")
    parser.add_argument("--layout", default="separate",
                        help=f"comma-separated, each of {', '.join(LAYOUTS)}, run in turn on one cluster (default separate)")
    parser.add_argument("--rate", type=float, default=100.0, help="Instance creates per second (default 100)")
    parser.add_argument("--churn-rate", type=float, default=20.0, help="node-fact events per second (default 20)")
    parser.add_argument("--review-rps", type=float, default=100.0, help="measured reviews per second (default 100)")
    parser.add_argument("--seconds", type=float, default=20.0, help="each measured window (default 20, at most 60)")
    parser.add_argument("--admission-arg", action="append", default=[], metavar="ARG",
                        help="an extra argument of `accelpolicy admission` (repeat), e.g. --admission-arg=--view-refresh-seconds=5")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    layouts = [part.strip() for part in args.layout.split(",") if part.strip()]
    if not layouts or set(layouts) - set(LAYOUTS):
        parser.error(f"--layout: each of {', '.join(LAYOUTS)}")
    if not 0 < args.seconds <= 60:
        parser.error("--seconds: must be in (0, 60]")
    figures = run(args.nodes, layouts, args.rate, args.churn_rate, args.review_rps, args.seconds,
                  tuple(args.admission_arg))
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(f"{figures['nodes']} nodes written in {figures['write_objects_s']} s")
    for layout, f in figures["layouts"].items():
        idle, busy = f["idle"], f["busy"]
        print(f"layout {layout} {' '.join(f['admission_args'])}: ready after {f['ready_s']} s "
              f"(load average {f['load_before']:.1f} -> {f['load_after']:.1f})")
        print(f"  reviews at {f['review_rps']:g}/s, idle: p50 {idle['p50_ms']} ms, p99 {idle['p99_ms']} ms, "
              f"max {idle['max_ms']} ms, errors {idle['errors']}")
        print(f"  reviews at {f['review_rps']:g}/s, busy: p50 {busy['p50_ms']} ms, p99 {busy['p99_ms']} ms, "
              f"max {busy['max_ms']} ms, errors {busy['errors']}, answered {busy['rps']}/s; busy/idle p99 "
              f"x{f['ratio_p99']}, p50 x{f['ratio_p50']}")
        churn, creates = f["churn"], f["creates"]
        print(f"  churn {churn['sent']} events ({churn['achieved_per_s']}/s), errors {churn['errors']}; creates "
              f"{creates['sent']} ({creates['achieved_per_s']}/s), API p50 {creates.get('p50_ms')} ms, p99 "
              f"{creates.get('p99_ms')} ms, errors {creates['errors'] or 0}")
        c = f["controller_busy"]
        print(f"  controller while busy: {c['passes']} passes, {c['writes']} writes, pass CPU {c['pass_cpu_s']} s, "
              f"process CPU {c['cpu_s']} s")
        if "admission_busy" in f:
            a = f["admission_busy"]
            print(f"  admission while busy: CPU {a['cpu_s']} s, {a['view_rebuilds']} view rebuilds (mean "
                  f"{a['view_rebuild_mean_s']} s), view stale at most {a['view_stale_max_s']} s")
        for name, rss in f["rss_mib"].items():
            print(f"  RSS {name}: settled {rss['settled']} MiB, peak {rss['peak']} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
