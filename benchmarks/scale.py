"""Live scale benchmark (docs/performance.md "The live controller at 1,000 nodes"): the controller on a local control plane with N nodes.

On a bare local control plane (testing/localcluster: kube-apiserver + etcd built from their Go
modules, every CRD installed; no scheduler, no Kueue, no agents, no kwok) it writes the synthetic
cluster of benchmarks/derive.py directly: Nodes (with status), both NodeFeatures per node and a
Devices object (spec and status ledger) per accelerated node, mixed products and CPUs, some MIG.
Then it starts ``accelpolicy controller`` as a subprocess and measures:

- ``ready_s``: launch -> the end of the first reconcile (rules compiled, leader Lease, caches
  synced, one full pass), and ``correct_s``: launch -> every InstanceType's entrance and summary
  (the ``kubectl get instancetypes`` columns) equal to an offline ``derive()`` of the same objects,
  read from the poller below: the answer time of the first poll with every row correct (it may
  come before the first reconcile ends, whose later writes are not rows);
- settled: the first pass's deferred fit labels written (background batches) and the first
  background audit ended (``background audit:`` line), then no reconcile for 1.5 s; the steps below
  start from there;
- ``flip_s``: one NodeFeature ``gpustack.ai/managed`` flip -> the affected InstanceType rows
  correct (offline derive of the flipped objects), each way, ``--flip-rounds`` times (median and
  max over them), each with the reconcile seconds it cost.
  Every expected table is derived before its step's clock starts: the benchmark's own derive
  (2 s at 10,000 nodes) is not timed, and it does not starve the poller of the interpreter;
- ``idle``: a Namespace annotation (an event that changes nothing) -> that reconcile's writes
  and seconds (goal: 0 writes);
- the fit label batches the controller writes outside its reconciles (``fit labels:`` log lines;
  before the incremental derive they were written inside one reconcile: the biggest later reconcile);
- ``one_node``: one Devices ledger row changes -> the rows correct, the reconciles it cost;
- API writes in all (the controller's ``reconcile:`` and ``fit labels:`` log lines), controller RSS
  settled and peak (``/proc``);
- ``partial``: a poller lists the InstanceTypes every 50 ms from the controller's launch to the
  end, through a churn of ``--churn`` flips, and counts every derived type whose status is
  missing a column or has an empty cell (goal: never).

Usage: ``.venv/bin/python benchmarks/scale.py [--nodes 1000] [--churn 10] [--json] [--tree DIR]``.
Needs the control-plane binaries (``make controlplane``). Loopback only; bounded in time.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.derive import generate  # noqa: E402
from runtime.engine.policy import Policy  # noqa: E402
from runtime.engine.pools import derive  # noqa: E402
from runtime.engine.snapshot import Snapshot  # noqa: E402
from runtime.kube.session import MERGE_PATCH, KubeApiError, connect  # noqa: E402
from runtime.rules.loader import load_rules  # noqa: E402
from testing.localcluster import LocalCluster  # noqa: E402
from testing.localcluster.testing import parse_table, with_crds  # noqa: E402

RECONCILE = re.compile(r"reconcile: (\d+) actions, (\d+) deferred, (\d+) writes, (\d+) errors in ([\d.]+)s"
                       r"(?: \(([\d.]+)s CPU\))?")  # the pass thread's CPU (since the incremental derive)
FIT_BATCH = re.compile(r"fit labels: (\d+) patches, (\d+) errors in ([\d.]+)s")  # written outside the passes
AUDIT = re.compile(r"background audit: (\d+) objects, .* in ([\d.]+)s \(([\d.]+)s CPU\)")  # each run's end
MANAGED = "gpustack.ai/managed"
DERIVED = "schedule.gpustack.ai/derived-from-node"
STEP_TIMEOUT = 120.0  # seconds one step may take; run() raises it to 30 ms a node (10,000 nodes: 300 s)
STEP_SECONDS_PER_NODE = 0.03


def _path(session, kind, namespace=None, name=None, sub=None) -> str:
    return session.ref(kind).path(namespace=namespace, name=name, subresource=sub)


def write_objects(session, objects: list[dict], workers: int = 8) -> float:
    """Create every object (and its status where it has one), kinds in dependency order, 8 at a
    time; returns the seconds taken."""
    t0 = time.monotonic()

    def create(obj: dict) -> None:
        kind, meta = obj["kind"], obj["metadata"]
        ns = meta.get("namespace")
        try:
            live = session.call("post", _path(session, kind, ns), body=obj)
        except KubeApiError as exc:
            if exc.status != 409:
                raise
            live = session.call("get", _path(session, kind, ns, meta["name"]))
        if "status" in obj and kind in ("Node", "Devices"):
            body = {**obj, "metadata": {**meta, "resourceVersion": live["metadata"]["resourceVersion"]}}
            session.call("put", _path(session, kind, ns, meta["name"], "status"), body=body)

    order = ("Namespace", "Secret", "Node", "NodeFeature", "Devices")
    with ThreadPoolExecutor(workers) as pool:
        for kind in order:
            list(pool.map(create, [o for o in objects if o["kind"] == kind]))
    return time.monotonic() - t0


def expected_rows(policy: Policy, objects: list[dict]) -> dict[str, tuple]:
    """InstanceType name -> (entrance, unit, accelerator, cpu) of an offline derive."""
    state = derive(policy, Snapshot.from_objects(objects), live=True)
    return {it["metadata"]["name"]: _row(it) for it in state.instance_types}


def _row(it: dict) -> tuple:
    status = it.get("status") or {}
    summary = status.get("summary") or {}
    return (status.get("entrance"), summary.get("unit"), summary.get("accelerator"), summary.get("cpu"))


def partial(row: tuple) -> bool:
    """A derived type's row with a column missing or an empty cell (e.g. ``/1 10/10 ...``)."""
    entrance, unit, accelerator, cpu = row
    if not entrance or not unit or not accelerator or not cpu:
        return True
    cells = accelerator.split(" ") + [cpu]
    return len(cells) != 5 or any(not part for cell in cells for part in cell.split("/"))


class Poller(threading.Thread):
    """Lists InstanceTypes every ``interval`` s; keeps the latest rows, when they were answered
    (``at``, monotonic), and counts partial ones."""

    def __init__(self, session, interval: float = 0.05):
        super().__init__(daemon=True)
        self.session, self.interval = session, interval
        self.rows: dict[str, tuple] = {}
        self.at = 0.0
        self.polls = 0
        self.partial: list[tuple[float, str, tuple]] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def run(self) -> None:
        path = _path(self.session, "InstanceType")
        while not self.stop.is_set():
            try:
                items = self.session.call("get", path).get("items") or []
            except KubeApiError:
                items = None
            at = time.monotonic()
            if items is not None:
                rows = {}
                for it in items:
                    name = it["metadata"]["name"]
                    rows[name] = _row(it)
                    derived = (it["metadata"].get("labels") or {}).get(DERIVED) == "true"
                    if derived and it.get("status") and partial(rows[name]):
                        self.partial.append((at, name, rows[name]))
                with self.lock:
                    self.rows, self.at, self.polls = rows, at, self.polls + 1
            self.stop.wait(self.interval)

    def wait_rows(self, want: dict[str, tuple], since: float, names=None, timeout: float | None = None) -> float:
        """Seconds from ``since`` (monotonic) to the answer of the first poll seen whose rows equal
        ``want`` (only ``names`` when given); raises TimeoutError. The expected rows are derived
        before the clock starts, so the benchmark's own derive is not timed."""
        timeout = timeout or STEP_TIMEOUT
        keys = names if names is not None else want
        while time.monotonic() - since < timeout:
            with self.lock:
                rows, at = self.rows, self.at
            if at >= since and all(rows.get(k) == want.get(k) for k in keys) \
                    and (names is not None or set(rows) == set(want)):
                return at - since
            time.sleep(0.005)
        diff = {k: (rows.get(k), want.get(k)) for k in keys if rows.get(k) != want.get(k)}
        raise TimeoutError(f"rows not correct after {timeout}s: {dict(list(diff.items())[:3])}")


class ControllerProcess:
    """``accelpolicy controller`` as a subprocess (``extra_args`` appended to its command line), its
    log parsed, its RSS sampled."""

    def __init__(self, kubeconfig: Path, log: Path, extra_args: tuple[str, ...] = (), tree: Path | None = None):
        self.log_path = log
        self.log = open(log, "w")
        env = {**os.environ, "LOGURU_LEVEL": "INFO"}
        if tree is not None:  # that checkout's code first on the path (an A/B of two commits)
            env["PYTHONPATH"] = str(tree)
        # trees before the compiled-rules cache and background audit start (docs/performance.md "Fast to start, light to hold") do not log the end of an audit run (their first ran beside the first pass)
        source = (tree or ROOT) / "runtime" / "controller" / "backgroundaudit.py"
        self.logs_audits = "background audit: " in source.read_text()
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen([str(Path(sys.executable).parent / "accelpolicy"), "controller",
                                      "--kubeconfig", str(kubeconfig), "--identity", "scale-bench", *extra_args],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        self.rss_peak = 0
        self._stop = threading.Event()
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while not self._stop.wait(0.1):
            self.rss_peak = max(self.rss_peak, self.rss())

    def cpu(self) -> float:
        """User+system CPU seconds the controller used so far (load-independent, unlike wall time)."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss(self) -> int:
        """Resident set in KiB (0 once exited)."""
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        except OSError:
            pass
        return 0

    def reconciles(self) -> list[dict]:
        """Every ``reconcile:`` line so far: actions, deferred, writes, errors, seconds."""
        out = []
        for m in RECONCILE.finditer(self.log_path.read_text(errors="replace")):
            a, d, w, e, s, cpu = m.groups()
            out.append({"actions": int(a), "deferred": int(d), "writes": int(w), "errors": int(e), "seconds": float(s),
                        "cpu": float(cpu) if cpu else None})
        return out

    def fit_batches(self) -> list[dict]:
        """Every ``fit labels:`` line so far (the controller's background fit label batches)."""
        return [{"writes": int(w), "errors": int(e), "seconds": float(s)}
                for w, e, s in FIT_BATCH.findall(self.log_path.read_text(errors="replace"))]

    def audits(self) -> list[dict]:
        """Every ``background audit:`` line so far (the first runs after the first pass, then hourly)."""
        return [{"objects": int(n), "seconds": float(s), "cpu": float(c)}
                for n, s, c in AUDIT.findall(self.log_path.read_text(errors="replace"))]

    def wait_settled(self, deferred: int, timeout: float | None = None) -> list[dict]:
        """Wait until the start's work is done: the ``deferred`` fit labels of the first pass written
        (the background batches), the first background audit ended, then :meth:`wait_quiet`. A flip
        measured before would share the interpreter with them (the audit at 10,000 nodes: about 10 s of
        CPU after the first pass; the fit labels: 6,000 patches over 30-40 s)."""
        deadline = time.monotonic() + (timeout or STEP_TIMEOUT)
        while time.monotonic() < deadline:
            audited = bool(self.audits()) or not self.logs_audits
            if sum(b["writes"] + b["errors"] for b in self.fit_batches()) >= deferred and audited:
                return self.wait_quiet(timeout=max(1.0, deadline - time.monotonic()))
            time.sleep(0.1)
        raise TimeoutError(f"fit labels or the first audit not done after {timeout or STEP_TIMEOUT}s")

    def wait_reconciles(self, count: int, timeout: float | None = None) -> list[dict]:
        timeout = timeout or STEP_TIMEOUT
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"controller exited: {self.log_path.read_text()[-2000:]}")
            got = self.reconciles()
            if len(got) >= count:
                return got
            time.sleep(0.02)
        raise TimeoutError(f"fewer than {count} reconciles after {timeout}s")

    def wait_quiet(self, seconds: float = 1.5, timeout: float | None = None) -> list[dict]:
        """Wait until no reconcile line appeared for ``seconds`` and the last one planned nothing."""
        deadline = time.monotonic() + (timeout or STEP_TIMEOUT)
        last, since = -1, time.monotonic()
        while time.monotonic() < deadline:
            got = self.reconciles()
            if len(got) != last:
                last, since = len(got), time.monotonic()
            elif time.monotonic() - since >= seconds and got and got[-1]["actions"] == 0 and got[-1]["deferred"] == 0:
                return got
            time.sleep(0.05)
        raise TimeoutError("controller not quiet")

    def stop(self) -> None:
        self._stop.set()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def set_managed(objects: list[dict], node: str, value: str) -> None:
    """Set ``gpustack.ai/managed`` on ``node``'s worker NodeFeature in ``objects`` (what the cluster
    will hold once :func:`flip` is sent): the expected rows are derived before the clock starts."""
    name = f"{node}-gpustack-worker"
    for obj in objects:
        if obj["kind"] == "NodeFeature" and obj["metadata"]["name"] == name:
            obj["spec"]["labels"][MANAGED] = value


def flip(session, node: str, value: str) -> None:
    """Set ``gpustack.ai/managed`` on ``node``'s worker NodeFeature, live (one merge patch)."""
    session.call("patch", _path(session, "NodeFeature", "gpustack-system", f"{node}-gpustack-worker"),
                 body={"spec": {"labels": {MANAGED: value}}}, content_type=MERGE_PATCH)


def set_ledger_row(objects: list[dict], node: str) -> dict:
    """An event touching one node, in ``objects``: the first ledger row of ``node``'s Devices turns
    free (mode 0, remaining D) or, when free, exclusively held (mode 1, allocated D); returns the
    Devices status :func:`touch_ledger` sends."""
    devices = next(o for o in objects if o["kind"] == "Devices" and o["metadata"]["name"] == node)
    row = devices["status"]["groups"][0]["accelerators"][0]
    was_free = row.get("mode", 0) == 0 and row.get("remaining", 0) == 1_600_000
    for key in ("mode", "allocated", "remaining", "allocatedSlices", "allocatedProfiles"):
        row.pop(key, None)
    row.update({"mode": 1, "allocated": 1_600_000} if was_free else {"mode": 0, "remaining": 1_600_000})
    return json.loads(json.dumps(devices["status"]))


def touch_ledger(session, node: str, status: dict) -> None:
    """Replace ``node``'s Devices status with ``status`` (of :func:`set_ledger_row`), live."""
    live = session.call("get", _path(session, "Devices", name=node))
    session.call("put", _path(session, "Devices", name=node, sub="status"), body={**live, "status": status})


def _accelerated_nodes(objects: list[dict], count: int) -> list[str]:
    devices = {o["metadata"]["name"] for o in objects if o["kind"] == "Devices"}
    managed = [o["metadata"]["name"] for o in objects if o["kind"] == "Node"
               and o["metadata"]["name"] in devices and o["metadata"]["labels"].get(MANAGED) == "true"]
    return managed[:count]


def run(nodes: int, churn: int, tree: Path | None = None, rounds: int = 3) -> dict:
    """The whole benchmark for one size (see the module docstring); returns the figures. ``tree``: a
    checkout whose controller is measured (default: this one's); ``rounds``: flips each way."""
    global STEP_TIMEOUT
    STEP_TIMEOUT = max(STEP_TIMEOUT, nodes * STEP_SECONDS_PER_NODE)
    policy = Policy(load_rules())
    objects = generate(nodes)
    out: dict = {"nodes": nodes, "objects": len(objects), "load_before": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="accelpolicy-scale-") as tmp, LocalCluster() as cluster:
        _, kubectl = with_crds(cluster)
        session = connect(cluster.kubeconfig)
        out["write_objects_s"] = round(write_objects(session, objects), 2)
        t = time.monotonic()
        want = expected_rows(policy, objects)
        out["offline_derive_s"] = round(time.monotonic() - t, 3)
        poller = Poller(connect(cluster.kubeconfig))
        poller.start()
        ctl = ControllerProcess(cluster.kubeconfig, Path(tmp) / "controller.log", tree=tree)
        try:
            out["correct_s"] = round(poller.wait_rows(want, ctl.t0), 2)  # may come before the first pass ends
            out["correct_cpu_s"] = round(ctl.cpu(), 2)
            first = ctl.wait_reconciles(1)
            out["ready_s"] = round(time.monotonic() - ctl.t0, 2)
            out["ready_cpu_s"] = round(ctl.cpu(), 2)
            out["first_reconcile"] = first[0]
            settled = ctl.wait_settled(first[0]["deferred"])
            out["settled_cpu_s"] = round(ctl.cpu(), 2)
            out["start_audit"] = (ctl.audits() or [None])[0]
            out["fit_label_reconcile"] = max(settled[1:], key=lambda r: r["writes"]) if len(settled) > 1 else None
            batches = ctl.fit_batches()
            out["fit_label_batch"] = max(batches, key=lambda b: b["writes"]) if batches else None
            out["rss_settled_mib"] = round(ctl.rss() / 1024, 1)
            # flips each way, on one node, ``rounds`` times
            flips = []
            node = _accelerated_nodes(objects, 1)[0]
            for value in ("false", "true") * rounds:
                set_managed(objects, node, value)
                want = expected_rows(policy, objects)
                with poller.lock:
                    changed = [k for k in want if poller.rows.get(k) != want[k]] or list(want)
                before, cpu0 = len(ctl.reconciles()), ctl.cpu()
                t = time.monotonic()
                flip(session, node, value)
                flips.append({"to": value, "seconds": round(poller.wait_rows(want, t, names=changed), 3),
                              "rows": len(changed)})
                after = ctl.wait_quiet()
                flips[-1]["reconciles"] = [r["seconds"] for r in after[before:]]
                flips[-1]["reconcile_cpu"] = [r["cpu"] for r in after[before:]]
                flips[-1]["cpu_s"] = round(ctl.cpu() - cpu0, 2)  # the event's passes, fit labels included
            out["flips"] = flips
            seconds = sorted(f["seconds"] for f in flips)
            out["flip_s"] = {"median": round(statistics.median(seconds), 3), "max": seconds[-1]}
            # an event that changes nothing
            before, cpu0 = len(ctl.reconciles()), ctl.cpu()
            session.call("patch", _path(session, "Namespace", name="team-00"),
                         body={"metadata": {"annotations": {"bench/touch": str(time.time())}}}, content_type=MERGE_PATCH)
            idle = ctl.wait_reconciles(before + 1)[before:]
            out["idle"] = {"writes": sum(r["writes"] for r in idle), "seconds": [r["seconds"] for r in idle],
                           "reconcile_cpu": [r["cpu"] for r in idle],
                           "cpu_s": round(ctl.cpu() - cpu0, 2)}
            # an event that touches one node: one Devices ledger row changes
            node = _accelerated_nodes(objects, 2)[1]
            status = set_ledger_row(objects, node)
            want = expected_rows(policy, objects)
            before, cpu0 = len(ctl.reconciles()), ctl.cpu()
            t = time.monotonic()
            touch_ledger(session, node, status)
            seconds = round(poller.wait_rows(want, t), 3)
            one = ctl.wait_quiet()[before:]
            out["one_node"] = {"seconds": seconds, "reconciles": [r["seconds"] for r in one],
                               "reconcile_cpu": [r["cpu"] for r in one],
                               "writes": sum(r["writes"] for r in one), "cpu_s": round(ctl.cpu() - cpu0, 2)}
            # churn: flips in quick succession, the poller watching for partial rows
            churned = [(node, "false" if i % 2 == 0 else "true")
                       for i, node in enumerate(_accelerated_nodes(objects, churn))]
            for node, value in churned:
                set_managed(objects, node, value)
            want = expected_rows(policy, objects)
            t = time.monotonic()
            for node, value in churned:
                flip(session, node, value)
                time.sleep(0.1)
            out["churn_correct_s"] = round(poller.wait_rows(want, t), 2)  # from the first flip sent
            ctl.wait_quiet()
            rows = parse_table(kubectl.stdout("get", "instancetypes"))[1]
            out["kubectl_rows"] = len(rows)
            out["kubectl_matches"] = all(
                (r["ENTRANCE"], r["UNIT(CPU/RAM)/STORAGE"], r["ACCELERATOR(EX/SH/SL/PT)"], r["CPU"])
                == poller.rows[r["NAME"]] for r in rows)
            all_reconciles = ctl.reconciles()
            out["reconciles"] = len(all_reconciles)
            batches = ctl.fit_batches()
            out["fit_label_batches"] = len(batches)
            out["api_writes"] = sum(r["writes"] for r in all_reconciles) + sum(b["writes"] for b in batches)
            out["errors"] = sum(r["errors"] for r in all_reconciles) + sum(b["errors"] for b in batches)
            out["rss_peak_mib"] = round(ctl.rss_peak / 1024, 1)
        finally:
            poller.stop.set()
            ctl.stop()
        out["polls"] = poller.polls
        out["partial_observed"] = len(poller.partial)
        out["partial_examples"] = [(n, r) for _, n, r in poller.partial[:3]]
    out["load_after"] = os.getloadavg()[0]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="1000", help="comma-separated sizes")
    parser.add_argument("--churn", type=int, default=10, help="NodeFeature flips in quick succession")
    parser.add_argument("--flip-rounds", type=int, default=3, help="measured flips each way (one at a time)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--tree", type=Path, help="a checkout whose controller to measure (its code first on "
                        "PYTHONPATH; e.g. `git worktree add /tmp/before main`); default: this one")
    args = parser.parse_args()
    results = [run(int(n), args.churn, args.tree, args.flip_rounds) for n in args.nodes.split(",")]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for r in results:
        print(f"{r['nodes']} nodes ({r['objects']} objects written in {r['write_objects_s']} s; offline derive "
              f"{r['offline_derive_s']} s; load average {r['load_before']:.1f} -> {r['load_after']:.1f}):")
        print(f"  launch -> first reconcile {r['ready_s']} s ({r['first_reconcile']['writes']} writes, "
              f"{r['first_reconcile']['seconds']} s; controller CPU {r['ready_cpu_s']} s); launch -> correct table "
              f"{r['correct_s']} s; settled after {r['settled_cpu_s']} s of CPU")
        if r["start_audit"]:
            a = r["start_audit"]
            print(f"  the first background audit (after the first pass): {a['objects']} objects in {a['seconds']} s, "
                  f"{a['cpu']} s of CPU")
        if r["fit_label_reconcile"]:
            f = r["fit_label_reconcile"]
            print(f"  biggest later reconcile: {f['writes']} writes in {f['seconds']} s")
        if r["fit_label_batch"]:
            f = r["fit_label_batch"]
            print(f"  biggest fit label batch (outside the reconciles): {f['writes']} patches in {f['seconds']} s; "
                  f"{r['fit_label_batches']} batches")
        for f in r["flips"]:
            print(f"  NodeFeature managed -> {f['to']}: rows correct in {f['seconds']} s "
                  f"(reconciles {f['reconciles']} s, their CPU {f['reconcile_cpu']} s; controller CPU {f['cpu_s']} s)")
        print(f"  flip -> rows correct: median {r['flip_s']['median']} s, max {r['flip_s']['max']} s "
              f"over {len(r['flips'])} flips")
        print(f"  idle reconcile: {r['idle']['writes']} writes, {r['idle']['seconds']} s (its CPU "
              f"{r['idle']['reconcile_cpu']} s), controller CPU {r['idle']['cpu_s']} s")
        o = r["one_node"]
        print(f"  one node's ledger row changes: rows correct in {o['seconds']} s (reconciles {o['reconciles']} s, "
              f"their CPU {o['reconcile_cpu']} s, "
              f"{o['writes']} writes; controller CPU {o['cpu_s']} s)")
        print(f"  churn of flips -> correct in {r['churn_correct_s']} s; partial rows observed "
              f"{r['partial_observed']} in {r['polls']} polls {r['partial_examples']}")
        print(f"  kubectl get instancetypes: {r['kubectl_rows']} rows, equal to the API: {r['kubectl_matches']}")
        print(f"  {r['reconciles']} reconciles, {r['api_writes']} API writes, {r['errors']} errors; RSS settled "
              f"{r['rss_settled_mib']} MiB, peak {r['rss_peak_mib']} MiB")


if __name__ == "__main__":
    main()
