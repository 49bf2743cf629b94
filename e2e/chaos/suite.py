"""The fault suite's runner: load in its own process, each fault injected and measured (docs/reliability.md "Reliability: the fault suite").

:class:`Suite` over a kind cluster with the chart installed (the e2e ``cluster`` fixture's stack):

1. ``start()``: namespace ``chaos-load``; the cluster must agree with the state derived from its facts
   (:func:`chaos.checker.drift` empty, waited for); the baseline ``kubectl get instancetypes``, the
   administrator-authored objects, the pool objects and each Instance's Pod are read; the load generator
   (:mod:`chaos.load`) starts in its own process at ``rate`` creates per second.
2. ``run(fault)``: inject; then measure from the injection
   * **ready**: every controller/admission Deployment with all replicas ready, the agent DaemonSet ready, a
     Lease holder, and a dry-run Instance create answered with our defaulting;
   * **table**: ``kubectl get instancetypes`` (the kubectl binary) equal to the baseline (AGE aside), polled
     once a second from the injection (the first correct reading at or after the fault ended counts);
   * **converged**: :func:`chaos.checker.drift` empty (the cluster equals the derivation from its facts),
     the pool objects identical to the baseline (uid and body), no duplicate or orphan Instance Pod, every
     Instance's Pod the one it had, administrator-authored objects unchanged;
   * from the load's answer log, the reviews sent in the window (injection -> converged + 3 s) and
     their classes; container restarts of the system namespace beyond the ones the fault caused;
   * what Kueue's objects did meanwhile (:class:`Observer`: ResourceFlavor/ClusterQueue deletions,
     re-creations and spec changes, Workloads evicted), sampled every second.
3. ``stop()``: the load drained (its objects deleted), the namespace deleted, the final state compared.

Results are :class:`FaultResult` rows; :func:`markdown` renders the docs' table.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from chaos import checker
from chaos.faults import SYSTEM, Fault, FaultError, Injected, Target, wait
from chaos.load import FAILED, LOAD_LABEL

HERE = Path(__file__).resolve().parent
E2E = HERE.parent
REPO = E2E.parent
LOAD_NAMESPACE = checker.LOAD_NAMESPACE
A10G_TYPE = "gpustack--nvidia-a10g-linux-amd64"     # the sliced Pods' pool (seed step 3)
INSTANCE_TYPE = "gpustack--generic-linux-amd64"      # the load's stopped Instances (a CPU type)
TAIL = 3.0          # seconds of the answer log counted after convergence
SETTLE = 5.0        # seconds between faults
CONVERGE_TIMEOUT = 420.0


@dataclass
class FaultResult:
    fault: str
    round: int
    what: str
    fails_closed: bool
    started: str = ""
    fault_s: float = 0.0            # injection -> the fault itself over
    ready_s: float | None = None    # injection -> ready (module docstring)
    table_s: float | None = None    # injection -> the first correct `kubectl get instancetypes` once it is over
    converged_s: float | None = None
    reviews: int = 0                # creates sent and answered by the API server
    failed: int = 0                 # of them: failed reviews (chaos.load.FAILED)
    classes: dict = field(default_factory=dict)   # create class -> count (skipped and unavailable included)
    deletes_failed: int = 0
    table_wrong_s: float = 0.0      # seconds the table was seen wrong (API answering)
    duplicates: list = field(default_factory=list)
    orphans: list = field(default_factory=list)
    pods_replaced: list = field(default_factory=list)
    admin_changed: list = field(default_factory=list)
    pools_changed: list = field(default_factory=list)
    drift: list = field(default_factory=list)
    restarts_injected: int = 0
    restarts_other: int = 0
    restarts_by_pod: dict = field(default_factory=dict)   # "<pod> (<node>)" -> container restarts in the window
    gap: tuple | None = None        # wall-clock seconds whose answers of the classes ``excused`` are the
    excused: tuple = ()             # fault's documented outcome (Injected.gap, .excused, .gap_what)
    gap_what: str = ""
    gap_classes: dict = field(default_factory=dict)       # create class -> count inside ``gap``
    kueue: dict = field(default_factory=dict)
    notes: dict = field(default_factory=dict)
    error: str = ""
    window: tuple = (0.0, 0.0)      # wall-clock seconds the answers were counted in

    def excused_count(self, cls: str) -> int:
        """Answers of class ``cls`` inside the gap that the fault excuses (0 for the other classes)."""
        return self.gap_classes.get(cls, 0) if cls in self.excused else 0

    def problems(self) -> list[str]:
        """What breaks the suite's rules (empty: the fault passed)."""
        out = []
        if self.error:
            out.append(self.error)
        if self.failed and not self.fails_closed:
            out.append(f"{self.failed} reviews failed: {self.classes}")
        unreviewed = self.classes.get("unreviewed", 0) - self.excused_count("unreviewed")
        if unreviewed:
            out.append(f"{unreviewed} creates stored without our review")
        for label in ("duplicates", "orphans", "pods_replaced", "admin_changed", "pools_changed", "drift"):
            if getattr(self, label):
                out.append(f"{label}: {getattr(self, label)[:5]}")
        if self.restarts_other:
            out.append(f"{self.restarts_other} container restarts beyond the injected ones")
        for label in ("ready_s", "table_s", "converged_s"):
            if getattr(self, label) is None:
                out.append(f"{label}: never")
        return out


class Observer(threading.Thread):
    """Samples, once a second, the `kubectl get instancetypes` table and Kueue's pool objects: table wrong
    (seconds), ResourceFlavors/ClusterQueues deleted, re-created or with a changed spec, Workloads evicted."""

    def __init__(self, suite: "Suite"):
        super().__init__(daemon=True)
        self.suite = suite
        self.stop_event = threading.Event()
        self.table_ok: list[tuple[float, bool]] = []
        self.events: list[str] = []
        self.evicted: set[str] = set()     # Workloads evicted (condition Evicted True) first seen during the fault
        self._evicted_before: set[str] | None = None

    def run(self) -> None:
        s = self.suite
        last: dict[str, tuple[str, str]] | None = None
        while not self.stop_event.is_set():
            now = time.monotonic()
            try:
                out = s.target.kubectl("get", "instancetypes", check=False, timeout=20)
                if out.returncode == 0:
                    self.table_ok.append((now, checker.tables_match(out.stdout, s.baseline_table)))
            except subprocess.TimeoutExpired:
                pass   # the API server did not answer: no sample
            try:
                ident, evicted = {}, set()
                for kind in ("ResourceFlavor", "ClusterQueue"):
                    for o in s.target.session.call("get", s.target.session.ref(kind).path(), timeout=10).get("items") or []:
                        ident[f"{kind} {o['metadata']['name']}"] = (o["metadata"]["uid"],
                                                                    json.dumps(o.get("spec"), sort_keys=True))
                for w in s.target.session.call("get", s.target.session.ref("Workload").path(), timeout=10).get("items") or []:
                    if w["metadata"].get("namespace") == LOAD_NAMESPACE:
                        continue
                    for c in (w.get("status") or {}).get("conditions") or []:
                        if c.get("type") == "Evicted" and c.get("status") == "True":
                            evicted.add(f"{w['metadata']['namespace']}/{w['metadata']['name']}: {c.get('reason')} "
                                        f"{c.get('lastTransitionTime')}")
                if self._evicted_before is None:
                    self._evicted_before = evicted   # evicted before the fault: not the fault's doing
                self.evicted |= evicted - self._evicted_before
            except Exception:  # noqa: BLE001 - the API may be down: no sample
                ident = None
            if ident is not None and last is not None:
                t = round(now - s.fault_t0, 1)
                for k in sorted(set(last) | set(ident)):
                    if k not in ident:
                        self.events.append(f"+{t}s {k} deleted")
                    elif k not in last:
                        self.events.append(f"+{t}s {k} created")
                    elif last[k][0] != ident[k][0]:
                        self.events.append(f"+{t}s {k} re-created")
                    elif last[k][1] != ident[k][1]:
                        self.events.append(f"+{t}s {k} spec changed")
            if ident is not None:
                last = ident
            self.stop_event.wait(max(0.0, 1.0 - (time.monotonic() - now)))

    def stop(self) -> None:
        self.stop_event.set()
        self.join(30)


class _Agrees:
    """A drift check's answer: true when nothing drifted; its text names what did (a failed wait shows it)."""

    def __init__(self, drift: list[str]):
        self.drift = drift

    def __bool__(self) -> bool:
        return not self.drift

    def __str__(self) -> str:
        return "; ".join(self.drift) or "no drift"


class Suite:
    """See the module docstring. ``target``: :class:`chaos.faults.Target`; ``workdir``: where the answer
    log and the results go."""

    def __init__(self, target: Target, workdir: Path, rate: float = 20.0, hold: float = 2.0):
        from runtime.engine.policy import Policy
        from runtime.rules.loader import load_rules
        self.target, self.workdir, self.rate, self.hold = target, Path(workdir), rate, hold
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.policy = Policy(load_rules())
        self.answers = self.workdir / "answers.jsonl"
        self.results: list[FaultResult] = []
        self.load: subprocess.Popen | None = None
        self.run_id = f"chaos{int(time.time()) % 100000}"
        self.fault_t0 = time.monotonic()

    # -- reading the cluster ---------------------------------------------------------------------------
    def objects(self) -> list[dict]:
        return checker.read_cluster(self.target.session, self.policy)

    def instance_type(self, name: str) -> dict:
        return self.target.session.call("get", self.target.session.ref("InstanceType").path(name=name))

    def restart_total(self) -> dict[str, int]:
        return checker.restart_counts(self.objects())

    def ready(self) -> bool:
        t = self.target
        deploys = t.get("deploy", "-n", SYSTEM, "-l", "app.kubernetes.io/name=accelpolicy")["items"]
        if not deploys:
            return False
        for d in deploys:
            want = d["spec"].get("replicas", 1)
            st = d.get("status") or {}
            if st.get("readyReplicas", 0) < want or st.get("updatedReplicas", 0) < want:
                return False
        for ds in t.get("ds", "-n", SYSTEM, "-l", "app.kubernetes.io/name=accelpolicy")["items"]:
            st = ds.get("status") or {}
            if st.get("numberReady", 0) < st.get("desiredNumberScheduled", 1):
                return False
        leader = t.lease_renewed_after(time.time() - 10.0)   # renewed every 5 s (runtime/controller/leader.py)
        pods = {p["metadata"]["name"]: p for p in t.controller_pods()}
        if not leader or leader not in pods or not any(
                c["type"] == "Ready" and c["status"] == "True" for c in pods[leader]["status"].get("conditions") or []):
            return False
        probe = {"apiVersion": "worker.gpustack.ai/v1", "kind": "Instance",
                 "metadata": {"name": "chaos-ready-probe", "namespace": LOAD_NAMESPACE},
                 "spec": {"type": INSTANCE_TYPE, "image": "ubuntu:24.04", "stop": True,
                          "volume": {"ephemeral": {"capacity": "1Gi"}}}}
        out = t.session.call("post", t.session.ref("Instance").path(LOAD_NAMESPACE), body=probe,
                             query={"dryRun": "All"}, timeout=15)
        return bool((out.get("spec") or {}).get("imagePullPolicy"))

    def state(self) -> dict:
        objects = self.objects()
        pods = checker.instance_pods(objects)
        return {"objects": objects, "admin": checker.admin_fingerprints(self.policy, objects),
                "pools": checker.pool_identity(objects), "pods": pods["pods"], "duplicates": pods["duplicates"],
                "orphans": pods["orphans"], "restarts": checker.restart_counts(objects)}

    def converged(self) -> dict | None:
        """The state when the cluster equals its derivation and the baseline's pools; else None."""
        st = self.state()
        st["drift"] = checker.drift(self.policy, st["objects"])
        st["pools_changed"] = checker.identity_changes(self.baseline["pools"], st["pools"])
        return st if not st["drift"] and not st["pools_changed"] else None

    # -- the run ---------------------------------------------------------------------------------------
    def start(self) -> None:
        t = self.target
        t.kubectl("create", "namespace", LOAD_NAMESPACE, check=False)
        wait("InstanceTypes of the load Ready", lambda: (self.instance_type(A10G_TYPE).get("status") or {}).get("entrance")
             and self.instance_type(INSTANCE_TYPE), timeout=120)
        self.queue = self.instance_type(A10G_TYPE)["status"]["entrance"]
        wait("the cluster equal to the state derived from its facts (before any fault)",
             lambda: _Agrees(checker.drift(self.policy, self.objects())), timeout=300, every=2.0)
        self.baseline_table = t.kubectl("get", "instancetypes").stdout
        self.baseline = self.state()
        wait("ready before any fault", self.ready, timeout=300)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(E2E), str(REPO)])}
        self.load_log = (self.workdir / "load.log").open("w")
        self.load = subprocess.Popen([sys.executable, "-m", "chaos.load", "--kubeconfig", str(t.kubeconfig),
                                      "--namespace", LOAD_NAMESPACE, "--run", self.run_id, "--queue", self.queue,
                                      "--instance-type", INSTANCE_TYPE, "--rate", str(self.rate),
                                      "--hold", str(self.hold), "--out", str(self.answers)],
                                     env=env, cwd=str(REPO), stdout=self.load_log, stderr=subprocess.STDOUT)
        self.load_started = time.time()
        time.sleep(SETTLE)
        if self.load.poll() is not None:
            raise FaultError(f"the load generator exited {self.load.returncode}: {(self.workdir / 'load.log').read_text()[-2000:]}")

    def run(self, fault: Fault, round_: int = 1) -> FaultResult:
        res = FaultResult(fault.name, round_, fault.what, fault.fails_closed)
        before = self.state()
        observer = Observer(self)
        self.fault_t0 = time.monotonic()
        wall0 = time.time()
        res.started = time.strftime("%H:%M:%S", time.gmtime(wall0))
        observer.start()
        injected = Injected(cleared=time.monotonic())
        try:
            injected = fault.inject(self.target)
        except Exception as exc:  # noqa: BLE001 - a failed injection is a result, the suite goes on
            res.error = f"{type(exc).__name__}: {exc}"
        res.notes, res.restarts_injected = dict(injected.notes), injected.kills
        res.fault_s = round(injected.cleared - self.fault_t0, 1)
        t0 = self.fault_t0
        try:
            wait("ready", self.ready, timeout=CONVERGE_TIMEOUT, every=0.5)
            res.ready_s = round(time.monotonic() - t0, 1)
        except FaultError as exc:
            res.error = res.error or str(exc)
        try:
            wait("kubectl get instancetypes equal to the baseline",
                 lambda: any(ok for t, ok in observer.table_ok if t >= injected.cleared), timeout=CONVERGE_TIMEOUT)
            res.table_s = round(min(t for t, ok in observer.table_ok if ok and t >= injected.cleared) - t0, 1)
        except FaultError as exc:
            res.error = res.error or str(exc)
        final = None
        try:
            final = wait("the cluster equal to its derivation and to the baseline pools", self.converged,
                         timeout=CONVERGE_TIMEOUT, every=2.0)
            res.converged_s = round(time.monotonic() - t0, 1)
        except FaultError as exc:
            res.error = res.error or str(exc)
            final = self.state()
            final["drift"] = checker.drift(self.policy, final["objects"])
            final["pools_changed"] = checker.identity_changes(self.baseline["pools"], final["pools"])
        time.sleep(TAIL)
        observer.stop()
        wall1 = time.time()
        samples = observer.table_ok
        res.table_wrong_s = float(sum(1 for _, ok in samples if not ok))
        res.kueue = {"events": observer.events, "evicted": sorted(observer.evicted)}
        res.drift, res.pools_changed = final["drift"][:10], final["pools_changed"]
        res.duplicates, res.orphans = final["duplicates"], final["orphans"]
        res.pods_replaced = sorted(k for k, uids in final["pods"].items() if uids != before["pods"].get(k, uids))
        res.admin_changed = checker.changed(before["admin"], final["admin"])
        nodes = {o["metadata"]["name"]: (o.get("spec") or {}).get("nodeName") or "?" for o in final["objects"]
                 if o["kind"] == "Pod" and o["metadata"].get("namespace") == SYSTEM}
        restarted = {p: n - before["restarts"][p] for p, n in final["restarts"].items()
                     if p in before["restarts"] and n > before["restarts"][p]}
        res.restarts_by_pod = {f"{p} ({nodes.get(p, '?')})": n for p, n in sorted(restarted.items())}
        on_injected_nodes = sum(n for p, n in restarted.items() if nodes.get(p) in injected.nodes)
        res.restarts_injected += on_injected_nodes
        res.restarts_other = max(0, sum(restarted.values()) - res.restarts_injected)
        res.gap, res.excused, res.gap_what = injected.gap, tuple(injected.excused), injected.gap_what
        res.window = (wall0, wall1)
        self.count_answers(res, wall0, wall1)
        self.results.append(res)
        time.sleep(SETTLE)
        return res

    def count_answers(self, res: FaultResult, t0: float, t1: float) -> None:
        """Classes of the creates answered in ``[t0, t1]``; those in ``res.gap`` are also counted in
        ``gap_classes``, and ``failed`` leaves out the excused ones there."""
        classes: dict[str, int] = {}
        gap: dict[str, int] = {}
        for entry in self.read_answers():
            if not (t0 <= entry["t"] <= t1):
                continue
            if entry["op"] == "delete":
                res.deletes_failed += entry["class"] != "ok"
                continue
            classes[entry["class"]] = classes.get(entry["class"], 0) + 1
            if res.gap and res.gap[0] <= entry["t"] <= res.gap[1]:
                gap[entry["class"]] = gap.get(entry["class"], 0) + 1
        res.classes, res.gap_classes = classes, gap
        res.reviews = sum(n for c, n in classes.items() if c not in ("skipped", "unavailable"))
        res.failed = sum(classes.get(c, 0) - res.excused_count(c) for c in FAILED)

    def read_answers(self) -> list[dict]:
        if not self.answers.exists():
            return []
        out = []
        for line in self.answers.read_text().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue   # a line being written
            if "op" in entry:
                out.append(entry)
        return out

    def between_faults(self) -> dict:
        """The load's create answers outside every fault window, by class (all should be ``ok``)."""
        classes: dict[str, int] = {}
        for e in self.read_answers():
            if e["op"] == "create" and not any(r.window[0] <= e["t"] <= r.window[1] for r in self.results):
                classes[e["class"]] = classes.get(e["class"], 0) + 1
        return classes

    def stop(self) -> dict:
        """Stop and drain the load, delete its namespace; the load's summary line."""
        summary = {}
        if self.load is not None and self.load.poll() is None:
            self.load.terminate()
            try:
                self.load.wait(300)
            except subprocess.TimeoutExpired:
                self.load.kill()
                self.load.wait(30)
        for line in reversed(self.answers.read_text().splitlines() if self.answers.exists() else []):
            if line.startswith('{"summary"'):
                summary = json.loads(line)["summary"]
                break
        self.target.kubectl("delete", "namespace", LOAD_NAMESPACE, "--wait=true", "--timeout=300s", check=False,
                            timeout=330)
        return summary

    def write(self) -> Path:
        path = self.workdir / "results.json"
        path.write_text(json.dumps([asdict(r) for r in self.results], indent=2))
        (self.workdir / "table.md").write_text(markdown(self.results))
        return path


def _fmt(v) -> str:
    return "-" if v is None else (f"{v:g}" if isinstance(v, float) else str(v))


def markdown(results: list[FaultResult]) -> str:
    """The docs' fault table: one row per fault run."""
    head = ("| fault | round | fault (s) | reviews sent / failed | API unavailable / not sent | ready (s) | "
            "table (s) | converged (s) | dup / orphan Pods | Instance Pods replaced | admin objects changed | "
            "restarts (injected + other) |")
    rows = [head, "|" + " --- |" * (head.count("|") - 1)]
    for r in results:
        excused = sum(r.excused_count(c) for c in FAILED)
        failed = f"{r.failed} (+{excused} {r.gap_what})" if r.gap else f"{r.failed}"
        rows.append(f"| {r.fault} | {r.round} | {_fmt(r.fault_s)} | {r.reviews} / {failed} | "
                    f"{r.classes.get('unavailable', 0)} / {r.classes.get('skipped', 0)} | {_fmt(r.ready_s)} | "
                    f"{_fmt(r.table_s)} | {_fmt(r.converged_s)} | {len(r.duplicates)} / {len(r.orphans)} | "
                    f"{len(r.pods_replaced)} | {len(r.admin_changed)} | {r.restarts_injected} + {r.restarts_other} |")
    return "\n".join(rows) + "\n"


def load_results(paths: list[Path]) -> list[FaultResult]:
    """The :class:`FaultResult` rows of one or more runs' ``results.json`` (a run directory or the file)."""
    out = []
    for p in paths:
        p = Path(p)
        for row in json.loads((p / "results.json" if p.is_dir() else p).read_text()):
            row["window"] = tuple(row.get("window") or (0.0, 0.0))
            out.append(FaultResult(**row))
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m chaos.suite RUN_DIR...``: the fault table of one or more runs (rows in run order), then each
    fault's notes and what Kueue's objects did."""
    import argparse
    parser = argparse.ArgumentParser(prog="python -m chaos.suite", description=main.__doc__)
    parser.add_argument("runs", nargs="+", type=Path, help="build/chaos/<run> directories (or results.json files)")
    args = parser.parse_args(argv)
    results = load_results(args.runs)
    print(markdown(results))
    for r in results:
        extra = {k: v for k, v in (("kueue events", r.kueue.get("events")), ("evicted", r.kueue.get("evicted")),
                                   ("error", r.error), ("problems", r.problems())) if v}
        print(f"- {r.fault} #{r.round} ({r.started} UTC): {json.dumps(r.notes)}; classes {json.dumps(r.classes)}"
              + (f"; {json.dumps(extra)}" if extra else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
