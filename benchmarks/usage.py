"""Benchmark of showback (docs/tasks/report-usage.md "Cost and cardinality"): not a test, prints figures.

Part 1, the counters' cost per reconcile pass: a synthetic cluster (benchmarks/derive.py ``generate``,
10,000 nodes by default) gets one Pod per charge its ledgers hold (exclusive, each shared holder,
slices, 3g.40gb partitions; 20 team namespaces), held in watch caches as the controller holds them;
it is derived once, then :meth:`runtime.controller.usage.UsageMeter.observe` (the tracker's update and
the counters' accrual) is timed for the first pass, an idle pass and a pass after the Pods of 1 % of
the nodes changed, without and with ``--usage-by-node``, against the floor of the same run: a cold
``derive()`` of the same snapshot. Also reported: one scrape of the counters (``generate_latest``),
its series and bytes.

Part 2, ``accelpolicy usage`` over 30 days of a 1,000-node fleet: the meter of a 1,000-node cluster is
run on a test clock for ``--days`` with a sample every ``--step`` (the Pods drawn again every day), the
samples written as OpenMetrics and backfilled with ``promtool tsdb create-blocks-from openmetrics``
into a fresh TSDB, which a ``prometheus`` (Debian's package) serves on 127.0.0.1 only. Timed: the
whole report (:func:`runtime.report.usage.build_report` over :class:`PrometheusSource`: four queries),
``accelpolicy usage --prometheus`` as a command (start-up included), and the floor, one plain PromQL
``sum by (namespace, pool, product, view) (increase(...[30d]))`` query of the same data. Part 2 is left
out, saying why, when ``promtool``/``prometheus`` are not installed.

Usage: ``.venv/bin/python benchmarks/usage.py [--nodes 10000] [--runs 5] [--fleet 1000] [--days 30]
[--step 900] [--skip-counters] [--skip-prometheus] [--keep DIR]``; Prometheus runs with block
compaction off (min = max block duration) so no compaction of the backfilled blocks runs while it is timed.
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402

from benchmarks.derive import generate  # noqa: E402
from runtime.controller.usage import FAMILIES, UsageMeter  # noqa: E402
from runtime.controller.usagetracker import UsageTracker  # noqa: E402
from testing.caches import caches_of  # noqa: E402
from testing.localcluster.processes import free_port  # noqa: E402
from runtime.engine.pools.derive import derive  # noqa: E402
from runtime.engine.policy import Policy  # noqa: E402
from runtime.engine.snapshot import Snapshot  # noqa: E402
from runtime.report.usage import build_report  # noqa: E402
from runtime.report.usagesource import PrometheusSource, Window  # noqa: E402
from runtime.rules.loader import load_rules  # noqa: E402

ACCELPOLICY = Path(sys.executable).parent / "accelpolicy"
PROFILE = {"name": "3g.40gb", "start": 0, "length": 4}


def holders(policy: Policy, objects: list[dict], rng: random.Random) -> list[dict]:
    """One Pod per charge the generated ledgers hold, with the allocation annotation that charges it."""
    key, pods = policy.key("allocation"), []
    for devices in (o for o in objects if o["kind"] == "Devices"):
        node = devices["metadata"]["name"]
        for group in devices["status"]["groups"]:
            for row in group["accelerators"]:
                mode, allocated = row.get("mode", 0), row.get("allocated", 0)
                count = allocated // 160_000 if mode == 2 else (1 if mode else 0)
                for n in range(count):
                    entry = {"id": row["id"], "index": row["index"], "mode": mode}
                    if mode == 3:
                        entry["allocated"] = allocated
                    if mode == 4:
                        entry.update(allocated=allocated, allocatedPhysicalProfile=PROFILE["name"],
                                     allocatedPhysicalPlacements=[{"start": 0, "length": 4}])
                    allocation = {"main": [{"id": group["id"], "manufacturer": group["manufacturer"],
                                            "accelerators": [entry]}]}
                    pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": {
                        "name": f"{node}-{row['index']}-{n}", "namespace": f"team-{rng.randrange(20):02d}",
                        "creationTimestamp": "2026-01-01T00:00:00Z",
                        "annotations": {key: json.dumps(allocation)}},
                        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "x"}]},
                        "status": {"phase": "Running"}})
    return pods


def cluster(policy: Policy, nodes: int, seed: int = 7):
    objects = generate(nodes, seed)
    snapshot = Snapshot.from_objects(objects + holders(policy, objects, random.Random(seed)))
    return snapshot, derive(policy, snapshot)


def _median(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def touch(caches: dict, nodes: int) -> None:
    """The Pods of ``nodes`` accelerated nodes replaced by new objects (a new resourceVersion)."""
    touched = set(sorted(name for _, name in caches["Devices"].keys())[:nodes])
    for pod in caches["Pod"].objects():
        if pod["spec"]["nodeName"] in touched:
            caches["Pod"].observe({**pod, "metadata": {**pod["metadata"], "resourceVersion": str(time.time_ns())}})


def export_cost(policy: Policy, nodes: int, runs: int) -> None:
    snapshot, state = cluster(policy, nodes)
    caches = caches_of(list(snapshot))
    floor = _median(lambda: derive(policy, snapshot), runs)
    print(f"{nodes} nodes: {snapshot.count('Devices')} Devices, {snapshot.count('Pod')} Pods holding accelerators")
    print(f"  floor: a cold derive() {floor * 1000:.1f} ms (median of {runs})")
    for by_node in (False, True):
        meter = UsageMeter(by_node=by_node)
        registry = CollectorRegistry()
        registry.register(meter)

        def cold():
            meter.tracker = UsageTracker(by_node)
            meter.observe(policy, state, caches)
        first = _median(cold, runs)
        idle = _median(lambda: meter.observe(policy, state, caches), runs)
        changed = []
        for _ in range(runs):
            touch(caches, max(nodes // 100, 1))
            start = time.perf_counter()
            meter.observe(policy, state, caches)
            changed.append(time.perf_counter() - start)
        busy = statistics.median(changed)
        scrape = _median(lambda: generate_latest(registry), runs)
        text = generate_latest(registry).decode()
        series = {f: sum(1 for line in text.splitlines() if line.startswith(f + "_total{")) for f in FAMILIES}
        print(f"  counters{' with the node label' if by_node else ''}: first pass {first * 1000:.1f} ms "
              f"({first / floor:.2f}x derive), an idle pass {idle * 1000:.2f} ms, a pass after the Pods of 1 % "
              f"of the nodes changed {busy * 1000:.1f} ms ({busy / floor:.3f}x); one scrape {scrape * 1000:.1f} ms, "
              f"{len(text)} bytes, series " + ", ".join(f"{f.removeprefix('accelpolicy_')} {n}"
                                                        for f, n in series.items()))


def fleet_samples(policy: Policy, nodes: int, days: int, step: int, end: float, work: Path) -> tuple[list[Path], int]:
    """The counters of a ``nodes``-node fleet over ``days`` ending at ``end`` (Unix seconds, on a 2-hour
    boundary), a sample every ``step`` s, as one OpenMetrics file per day in ``work`` (promtool reads a
    file once per 2-hour block it writes: one file per day keeps that to the day's twelve). Each day's
    Pods are drawn again and its rates are the tracker's (:class:`UsageTracker`); a counter grows at its
    day's rate, as the meter's does between passes. Returns the files and the number of series."""
    objects = generate(nodes, 11)
    daily: list[dict[tuple[str, tuple], float]] = []
    for day in range(days):
        everything = objects + holders(policy, objects, random.Random(day))
        tracker = UsageTracker()
        tracker.update(policy, derive(policy, Snapshot.from_objects(everything)), caches_of(everything))
        rates = tracker.totals.rates
        daily.append({(which, labels): value for which in ("charged", "idle", "capacity", "reserved")
                      for labels, value in getattr(rates, which).items()})
    start, per_day = end - days * 86400, 86400 // step
    keys = sorted({key for rates in daily for key in rates})
    value = dict.fromkeys(keys, 0.0)
    files = []
    for day, rates in enumerate(daily):
        path = work / f"fleet-{day:02d}.om"
        with path.open("w") as out:
            for family, (attr, label_names, _help) in FAMILIES.items():
                out.write(f"# TYPE {family} counter\n")
                for which, labels in (k for k in keys if k[0] == attr):
                    text = ",".join(f'{k}="{v}"' for k, v in sorted(zip(label_names, labels)))
                    rate, base = rates.get((which, labels), 0.0), value[(which, labels)]
                    for i in range(per_day):
                        stamp = start + (day * per_day + i) * step
                        out.write(f"{family}_total{{{text}}} {base + rate * i * step:.3f} {stamp:.0f}\n")
                    value[(which, labels)] = base + rate * per_day * step
            out.write("# EOF\n")
        files.append(path)
    return files, len(keys)


def usage_time(policy: Policy, nodes: int, days: int, step: int, runs: int, keep: Path | None) -> None:
    if not (shutil.which("promtool") and shutil.which("prometheus")):
        print("usage over Prometheus: left out, promtool/prometheus not installed (apt-get install prometheus)")
        return
    with tempfile.TemporaryDirectory(prefix="usage-bench-") as tmp:
        work = keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        stamp = work / "end"
        if stamp.exists():   # --keep: the fleet backfilled by an earlier run
            end = float(stamp.read_text())
            print(f"{nodes} nodes over {days} days: the TSDB kept in {work}")
        else:
            end = (time.time() - 3 * 3600) // 7200 * 7200   # before the head block Prometheus keeps
            t0 = time.perf_counter()
            files, series = fleet_samples(policy, nodes, days, step, end, work)
            t1 = time.perf_counter()
            for path in files:
                subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "--quiet", str(path),
                                str(work / "tsdb")], check=True, stdout=subprocess.DEVNULL)
                path.unlink()
            stamp.write_text(str(end))
            print(f"{nodes} nodes over {days} days, a sample every {step} s: {series} series, "
                  f"{series * days * 86400 // step} samples (generated in {t1 - t0:.0f} s, backfilled by promtool "
                  f"in {time.perf_counter() - t1:.0f} s)")
        port = free_port()
        # min = max block duration: no compaction starts while the queries are timed
        prom = subprocess.Popen(["prometheus", f"--config.file={_config(work)}", f"--storage.tsdb.path={work / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=400d",
                                 "--storage.tsdb.min-block-duration=2h", "--storage.tsdb.max-block-duration=2h",
                                 "--query.max-samples=200000000"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            _report(f"http://127.0.0.1:{port}", end, days, runs)
        finally:
            prom.terminate()
            prom.wait(30)


def _config(work: Path) -> Path:
    """No scrape target at all: the TSDB's backfilled blocks are the only data."""
    path = work / "prometheus.yml"
    path.write_text("global:\n  scrape_interval: 1h\nscrape_configs: []\n")
    return path


def _report(url: str, end: float, days: int, runs: int) -> None:
    source = PrometheusSource(url)
    to = datetime.fromtimestamp(end, timezone.utc)
    window = Window(to - timedelta(days=days), to)
    charged = next(iter(FAMILIES))   # accelpolicy_accelerator_charged_seconds
    plain = f"sum by (namespace, pool, product, view) (increase({charged}_total[{window.seconds}s]))"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if source.query(plain, to).get("result"):
                break
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(1)
    floor = _median(lambda: source.query(plain, to), runs)
    report = _median(lambda: build_report(source, window), runs)
    command = _median(lambda: subprocess.run([str(ACCELPOLICY), "usage", "--prometheus", url, "--to", to.isoformat(),
                                              "--since", f"{days}d", "-o", "json"], check=True,
                                             stdout=subprocess.DEVNULL), runs)
    built = build_report(source, window)
    print(f"  plain PromQL increase() by namespace, pool, product, view: {floor * 1000:.0f} ms (floor)")
    print(f"  the usage report (4 queries): {report * 1000:.0f} ms ({report / floor:.1f}x the floor); "
          f"`accelpolicy usage` as a command: {command * 1000:.0f} ms ({command / floor:.1f}x)")
    print(f"  report: {len(built.charged)} charged rows, {len(built.pools)} pools, "
          f"{built.total().installed:.0f} installed accelerator-hours, idle share {built.total().idle_share:.1%}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--fleet", type=int, default=1000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--step", type=int, default=900, help="seconds between two samples of the fleet")
    parser.add_argument("--skip-prometheus", action="store_true")
    parser.add_argument("--skip-counters", action="store_true", help="part 2 only")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep the backfilled TSDB in this folder, and reuse it when it is there")
    args = parser.parse_args(argv)
    policy = Policy(load_rules())
    if not args.skip_counters:
        export_cost(policy, args.nodes, args.runs)
    if not args.skip_prometheus:
        usage_time(policy, args.fleet, args.days, args.step, args.runs, args.keep)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
