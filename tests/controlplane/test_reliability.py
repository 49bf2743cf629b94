"""Reliability of the live controller (docs/development/testing.md "Reliability of the live controller") on the local control plane.

1. **Kill/restart runs.** The seed steps that work without Kueue, NFD and kwok (step 1's objects;
   step 2's NodeFeature un-manage and re-admit; step 4's custom InstanceType, the ``custom-demo``
   Instance, the type's deletion draining it to ``spec.stop: true``; step 5's awareness flip and the
   repoint of ``custom-demo``) are driven with kubectl while ``accelpolicy controller`` runs as a
   subprocess. One undisturbed reference run, then ``--reliability-runs`` runs (default 10, or
   ``$ACCELPOLICY_RELIABILITY_RUNS``) in which the controller is SIGKILLed at seeded-random points
   (before a step's kubectl write, so the write lands while it is down, or a random moment after it)
   and restarted. After every step the ``kubectl get instancetypes`` table must equal the seed's
   (PHASE aside: it reads ``Activating`` without Kueue's controller; while ``custom-demo``'s Pod
   stays Pending the pools keep the counts the seed shows before it went Ready); at the end, once the
   controller is quiescent, every pool, catalog, Instance, Pod, Setting object, the settings Secret
   and the Nodes' labels, normalized (:func:`normalize`), must equal the reference run's.
2. **API-server restart mid-watch** (:meth:`LocalCluster.restart_apiserver`): the in-process
   controller's caches resume, a later NodeFeature patch reaches the table, nothing is created
   twice, no Event is repeated, and an idle reconcile writes nothing.
3. **An administrator's InstanceType** is never modified or deleted: through un-manage (every
   matching ResourceFlavor gone), awareness flips and a controller restart, every change of the
   object (seen by a watch) touches only ``status``, and field manager ``accelpolicy`` owns only
   ``status`` fields, through the status subresource.

The runs print ``[reliability] ...`` summary lines (``-s`` shows them) with the figures.
"""
from __future__ import annotations

import copy
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from testing.hooks import ObservedController as Controller
from runtime.engine.policy import Policy
from runtime.engine.pools import entrance
from runtime.kube.session import MERGE_PATCH, KubeApiError, connect
from testing.localcluster import install_crds
from testing.localcluster.crds import openreports_crds
from testing.localcluster.testing import parse_table, set_setting
from runtime.rules.loader import load_rules
from tests.controlplane.test_controller import loop_running
from tests.seedfiles import FIXTURES, seed_file, seed_object, seed_table

ACCELPOLICY = Path(sys.executable).parent / "accelpolicy"
COMMON = FIXTURES / "seed" / "common"
POLICY = Policy(load_rules())
SYSTEM = "gpustack-system"
NS = "default"
IDENTITY = "reliability"           # one identity across restarts: the Lease is taken back at once
STALE_ENTRANCE = "gpustack-fnv64-8cf5b3114035c84a"   # DECISION 3: the stale entrance of seed step 4
RIGHT_ENTRANCE = "gpustack-fnv64-d4c0e6cd72686015"
AWARE_A10G = "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64"
CUSTOM = "a10g-12c128g"
# What the final-state comparison reads: (kind, namespace or None for every namespace).
COMPARED = [("ResourceFlavor", None), ("ClusterQueue", None), ("LocalQueue", None), ("AdmissionCheck", None),
            ("InstanceType", None), ("InstanceTypeFlavor", None), ("Instance", NS), ("Pod", NS),
            ("Setting", SYSTEM), ("Node", None)]
DROPPED_META = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")
TIME_KEYS = {"lastTransitionTime", "lastUpdateTime", "lastProbeTime", "lastHeartbeatTime", "startTime"}
IDLE_LINE = re.compile(r"reconcile: 0 actions, 0 deferred, 0 writes, 0 errors")
RECONCILE_LINE = re.compile(r"reconcile: \d+ actions")
FIGURES: dict[str, list[float]] = {}
STEP_TIMEOUT = 90.0


# -- the cluster through the API (setup, reads) ---------------------------------------------------------
def _path(session, kind, namespace=None, name=None, subresource=None):
    return session.ref(kind).path(namespace=namespace, name=name, subresource=subresource)


def _list(session, kind, namespace=None) -> list[dict]:
    items = session.call("get", _path(session, kind, namespace)).get("items") or []
    for item in items:
        item.setdefault("kind", kind)
    return items


def _get(session, kind, name, namespace=None) -> dict | None:
    try:
        return session.call("get", _path(session, kind, namespace, name))
    except KubeApiError as exc:
        if exc.status == 404:
            return None
        raise


def reset_cluster(session) -> None:
    """Remove everything a walkthrough run leaves (no controller may be running): finalizers of
    InstanceTypes and Instances first, then every object of the kinds involved; waits until gone."""
    for kind, ns in (("InstanceType", None), ("Instance", None)):
        for obj in _list(session, kind, ns):
            if obj["metadata"].get("finalizers"):
                session.call("patch", _path(session, kind, obj["metadata"].get("namespace"), obj["metadata"]["name"]),
                             body={"metadata": {"finalizers": None}}, content_type=MERGE_PATCH)
    namespaces = [n["metadata"]["name"] for n in _list(session, "Namespace")]
    namespaced = ("Instance", "Pod", "LocalQueue", "Setting", "NodeFeature", "Event")
    cluster_scoped = ("InstanceType", "InstanceTypeFlavor", "ClusterQueue", "ResourceFlavor", "AdmissionCheck",
                      "Devices", "Node")
    for kind in namespaced:
        for ns in namespaces:
            if kind == "Pod" and ns != NS:
                continue  # only the Instances' Pods; nothing else runs Pods here
            session.call("delete", _path(session, kind, ns))
    for kind in cluster_scoped:
        session.call("delete", _path(session, kind))
    for name, kind in ((POLICY.settings.secretName, "Secret"), ("gpustack-operator-worker", "Lease")):
        try:
            session.call("delete", _path(session, kind, SYSTEM, name))
        except KubeApiError as exc:
            if exc.status != 404:
                raise
    deadline = time.monotonic() + 60
    for kind in namespaced + cluster_scoped:
        while [o for o in _list(session, kind) if kind != "Pod" or o["metadata"]["namespace"] == NS]:
            assert time.monotonic() < deadline, f"{kind} objects not gone after the reset"
            time.sleep(0.1)


def apply_step1(session, kubectl) -> None:
    """Seed step 1's cluster: Namespaces, Nodes, NodeFeatures, Devices, the settings Secret (kubectl
    apply), then the Nodes' and Devices' status (the status subresource)."""
    kubectl("apply", "--validate=strict", *[f"-f={COMMON / n}" for n in
                                             ("namespaces.yaml", "nodes.yaml", "nodefeatures.yaml", "devices.yaml",
                                              "settings.yaml")])
    for name, kind in (("nodes.yaml", "Node"), ("devices.yaml", "Devices")):
        for doc in yaml.safe_load_all((COMMON / name).read_text()):
            if doc and doc.get("status"):
                session.call("patch", _path(session, kind, None, doc["metadata"]["name"], "status"),
                             body={"status": doc["status"]}, content_type=MERGE_PATCH)


def read_state(session) -> dict[tuple[str, str, str], dict]:
    """Every compared object plus the settings Secret, keyed by (kind, namespace, name)."""
    out = {}
    for kind, ns in COMPARED:
        for obj in _list(session, kind, ns):
            meta = obj["metadata"]
            out[(kind, meta.get("namespace") or "", meta["name"])] = obj
    secret = _get(session, "Secret", POLICY.settings.secretName, SYSTEM)
    if secret is not None:
        secret.setdefault("kind", "Secret")
        out[("Secret", SYSTEM, POLICY.settings.secretName)] = secret
    return out


def versions(state) -> dict:
    return {key: obj["metadata"].get("resourceVersion") for key, obj in state.items()}


def normalize(state: dict) -> dict:
    """The state without what differs between equal runs: uid, resourceVersion, timestamps,
    managedFields, generation; a uid anywhere (ownerReferences, the Pods' part-of label) becomes
    ``<uid of Kind/namespace/name>`` so a reference to the wrong object still differs."""
    uids = {obj["metadata"]["uid"]: f"<uid of {'/'.join(k for k in key if k)}>" for key, obj in state.items()}

    def walk(value, key=None):
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items() if k not in TIME_KEYS}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, str):
            return uids.get(value, value if key != "uid" else "<uid not in the state>")
        return value

    out = {}
    for key, obj in state.items():
        obj = copy.deepcopy(obj)
        for name in DROPPED_META:
            obj["metadata"].pop(name, None)
        out[key] = walk(obj)
    return out


def differences(want: dict, got: dict, limit: int = 8) -> list[str]:
    out = [f"missing {k}" for k in sorted(set(want) - set(got))]
    out += [f"extra {k}" for k in sorted(set(got) - set(want))]
    for key in sorted(set(want) & set(got)):
        if want[key] != got[key]:
            out.append(f"{key} differs:\n  want {json.dumps(want[key], sort_keys=True)[:1500]}\n"
                       f"  got  {json.dumps(got[key], sort_keys=True)[:1500]}")
    return out[:limit]


def table_rows(kubectl) -> list[dict]:
    return parse_table(kubectl.stdout("get", "instancetypes"))[1]


def without_phase(rows) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "PHASE"} for r in rows]


def seed_rows(name: str) -> list[dict]:
    """A seed table's rows without PHASE (DECISION 3: the custom type's entrance corrected)."""
    return without_phase(parse_table(seed_table(name).replace(STALE_ENTRANCE, RIGHT_ENTRANCE))[1])


# -- the controller as a process --------------------------------------------------------------------
class ControllerProcess:
    """``accelpolicy controller`` with one fixed identity; its output lines are kept with the
    monotonic time they arrived. :meth:`kill` is SIGKILL; :meth:`start` starts a new process."""

    def __init__(self, kubeconfig: Path):
        self.kubeconfig = kubeconfig
        self.proc: subprocess.Popen | None = None
        self.lines: list[tuple[float, str]] = []
        self.kills = 0
        self.starts: list[float] = []
        self._reader: threading.Thread | None = None

    def start(self) -> None:
        self.starts.append(time.monotonic())
        self.proc = subprocess.Popen(
            [str(ACCELPOLICY), "controller", "--kubeconfig", str(self.kubeconfig), "--identity", IDENTITY,
             "--coalesce-seconds", "0.1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        proc = self.proc

        def read() -> None:
            for line in proc.stdout:
                self.lines.append((time.monotonic(), line.rstrip("\n")))
        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()

    def kill(self) -> None:
        assert self.proc is not None
        assert self.proc.poll() is None, "controller exited by itself:\n" + self.tail()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(20)
        self._reader.join(5)
        self.kills += 1

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def reconcile_lines(self, since: float) -> list[tuple[float, str]]:
        return [(t, ln) for t, ln in self.lines if t >= since and RECONCILE_LINE.search(ln)]

    def tail(self, n: int = 30) -> str:
        return "\n".join(ln for _, ln in self.lines[-n:])


def wait_for(what: str, check, timeout: float = STEP_TIMEOUT, ctl: ControllerProcess | None = None):
    """Poll ``check()`` (None/False = not yet) until it returns a value; returns it."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"{what} not reached in {timeout:.0f}s; controller output:\n"
                         + (ctl.tail() if ctl else ""))


def wait_quiescent(session, ctl: ControllerProcess, settle: float = 1.0) -> dict:
    """The state once the controller is quiescent: its last reconcile planned, deferred and wrote
    nothing, and neither a new reconcile nor any compared object's resourceVersion changed during
    ``settle`` seconds after it. Returns :func:`read_state`'s answer."""
    def quiet():
        lines = ctl.reconcile_lines(ctl.starts[-1])
        if not lines or not IDLE_LINE.search(lines[-1][1]):
            return None
        before = read_state(session)
        time.sleep(settle)
        after = read_state(session)
        if ctl.reconcile_lines(lines[-1][0] + 1e-6) or versions(before) != versions(after):
            return None
        return after
    return wait_for("quiescence", quiet, ctl=ctl)


def first_idle_after(ctl: ControllerProcess, t0: float, timeout: float = STEP_TIMEOUT) -> float:
    """Seconds from ``t0`` to the controller's first idle reconcile line after it."""
    def idle():
        return next((t for t, ln in ctl.lines if t >= t0 and IDLE_LINE.search(ln)), None)
    return wait_for("an idle reconcile after the restart", idle, timeout, ctl=ctl) - t0


# -- the walkthrough ----------------------------------------------------------------------------------
def _custom_demo() -> dict:
    doc = copy.deepcopy(seed_object("step4-instance-custom-demo.yaml"))
    doc["spec"]["resources"].update({"cpu": "12", "ram": "128Gi", "localStorage": "15Gi"})  # as the webhook
    return doc


@dataclass
class Step:
    """One kubectl write of the walkthrough and the condition that shows it took effect."""

    name: str
    act: object          # (kubectl) -> None
    done: object         # (session, kubectl) -> truthy when reached


def _table_is(name: str):
    want = seed_rows(name)
    return lambda session, kubectl: without_phase(table_rows(kubectl)) == want


def _patch_managed(value: str):
    return lambda kubectl: kubectl("-n", SYSTEM, "patch", "nodefeature", "node-a10g-gpustack-worker", "--type=merge",
                                   "-p", json.dumps({"spec": {"labels": {"gpustack.ai/managed": value}}}))


def _pod_on_queue(entrance: str, table: str):
    """custom-demo's Pod queued at ``entrance``, the Instance ``Scheduling`` and the table ``table``:
    no kubelet runs the Pod and no agent charges the ledger, so the pools keep the counts of the
    seed's table before the Instance went Ready (step 4's ``after-custom-type``, step 5's
    ``after-aware``) rather than the ``0/0`` the seed shows once it runs."""
    def done(session, kubectl):
        pod = _get(session, "Pod", "custom-demo", NS)
        inst = _get(session, "Instance", "custom-demo", NS) or {}
        return (pod is not None and pod["metadata"]["labels"].get("kueue.x-k8s.io/queue-name") == entrance
                and (inst.get("status") or {}).get("phase") == "Scheduling"
                and _table_is(table)(session, kubectl))
    return done


def _drained(session, kubectl):
    inst = _get(session, "Instance", "custom-demo", NS) or {}
    return (inst.get("spec", {}).get("stop") is True and (inst.get("status") or {}).get("phase") == "Stopped"
            and _get(session, "Pod", "custom-demo", NS) is None and _get(session, "InstanceType", CUSTOM) is None
            and _table_is("step4-after-delete-custom-type.txt")(session, kubectl))


def walkthrough() -> list[Step]:
    custom_type = seed_file("objects", "step4-instancetype-a10g-12c128g.yaml")
    aware_entrance = entrance(POLICY, AWARE_A10G)
    return [
        Step("step1", lambda kubectl: None, _table_is("step1-instancetype.txt")),
        Step("step2-unmanage", _patch_managed("false"), _table_is("step2-after-unmanage.txt")),
        Step("step2-readmit", _patch_managed("true"), _table_is("step2-after-readmit.txt")),
        Step("step4-custom-type", lambda kubectl: kubectl("apply", "-f", str(custom_type)),
             _table_is("step4-after-custom-type.txt")),
        Step("step4-custom-demo", lambda kubectl: kubectl("apply", "-f", "-", input=yaml.safe_dump(_custom_demo())),
             _pod_on_queue(RIGHT_ENTRANCE, "step4-after-custom-type.txt")),
        Step("step4-delete-type", lambda kubectl: kubectl("delete", "instancetype", CUSTOM, "--wait=false"),
             _drained),
        Step("step5-aware", lambda kubectl: set_setting(
            kubectl, POLICY.settings, "instance-type-aware-cpu-manufacturer", "true"),
             _table_is("step5-after-aware.txt")),
        Step("step5-repoint", lambda kubectl: kubectl(
            "-n", NS, "patch", "instance", "custom-demo", "--type=merge",
            "-p", json.dumps({"spec": {"type": AWARE_A10G, "stop": False}})),
             _pod_on_queue(aware_entrance, "step5-after-aware.txt")),
    ]


@dataclass
class RunResult:
    kills: int
    state: dict
    restart_to_idle: list[tuple[float, float]] = field(default_factory=list)
    plan: list[tuple[str, str, float]] = field(default_factory=list)


def run_walkthrough(session, kubectl, kubeconfig, rng: random.Random | None) -> RunResult:
    """One run on a reset cluster; ``rng`` None is the undisturbed reference run. A kill is
    ``(step, "before", pause)``: SIGKILL, the step's write while the controller is down, restart
    after ``pause`` s; or ``(step, "after", delay)``: the write, SIGKILL ``delay`` s later, restart."""
    steps = walkthrough()
    plan: list[tuple[str, str, float]] = []
    if rng is not None:
        for _ in range(rng.choice((1, 1, 2, 2, 3))):
            step = rng.choice(steps).name
            mode = rng.choice(("before", "after"))
            if not any(k[:2] == (step, mode) for k in plan):
                plan.append((step, mode, round(rng.uniform(0.0, 2.0), 2)))
    reset_cluster(session)
    apply_step1(session, kubectl)
    ctl = ControllerProcess(kubeconfig)
    restart_to_idle = []

    def restart():
        ctl.start()
        seconds = first_idle_after(ctl, ctl.starts[-1])
        leading = next(t for t, ln in ctl.lines if t >= ctl.starts[-1] and "leading; reconciling" in ln)
        restart_to_idle.append((seconds, ctl.starts[-1] + seconds - leading))
    ctl.start()
    try:
        for step in steps:
            kills = [k for k in plan if k[0] == step.name]
            for _, mode, pause in (k for k in kills if k[1] == "before"):
                ctl.kill()
                time.sleep(pause)
            step.act(kubectl)
            if any(k[1] == "before" for k in kills):
                restart()
            for _, mode, delay in (k for k in kills if k[1] == "after"):
                time.sleep(delay)
                ctl.kill()
                restart()
            wait_for(f"{step.name} (kills {kills})", lambda: step.done(session, kubectl), ctl=ctl)
        state = wait_quiescent(session, ctl)
    finally:
        ctl.stop()
    return RunResult(ctl.kills, state, restart_to_idle, plan)


def _runs(config) -> int:
    value = config.getoption("--reliability-runs", None) or os.environ.get("ACCELPOLICY_RELIABILITY_RUNS")
    return int(value) if value else 10


def _seed(config) -> int:
    value = config.getoption("--reliability-seed", None) or os.environ.get("ACCELPOLICY_RELIABILITY_SEED")
    return int(value) if value else random.SystemRandom().randrange(1, 2**31)


@pytest.fixture(scope="module")
def session(control_plane):
    """A client of the session cluster, with the openreports.io CRDs installed (the background audit of
    every restarted controller then writes its Reports while the first pass runs, as in a full `make
    test` session: the race of the reliability flake); after the module the cluster is reset (other
    modules start from their own clean-up and must not meet this module's objects)."""
    install_crds(control_plane[1], openreports_crds())
    session = connect(control_plane[0].kubeconfig)
    yield session
    reset_cluster(session)
    for key, values in FIGURES.items():
        print(f"\n[reliability figure] {key}: {', '.join(f'{v:.2f}' for v in values)}")


@pytest.mark.slow
def test_kill_restart_runs_end_in_the_reference_state(control_plane, session, pytestconfig):
    cluster, kubectl = control_plane
    runs, seed = _runs(pytestconfig), _seed(pytestconfig)
    print(f"\n[reliability] seed {seed} (rerun: --reliability-seed {seed}), {runs} runs")
    reference = run_walkthrough(session, kubectl, cluster.kubeconfig, None)
    want = normalize(reference.state)
    assert reference.kills == 0
    kills = identical = 0
    mismatches = []
    restart_to_idle: list[tuple[float, float]] = []
    for run in range(runs):
        result = run_walkthrough(session, kubectl, cluster.kubeconfig, random.Random(seed * 1000 + run))
        kills += result.kills
        restart_to_idle += result.restart_to_idle
        diff = differences(want, normalize(result.state))
        print(f"[reliability] run {run + 1}: kills {result.plan}: {'identical' if not diff else 'DIFFERENT'}")
        if diff:
            mismatches.append((run + 1, result.plan, diff))
        else:
            identical += 1
    FIGURES["restart -> first idle reconcile, seconds"] = [a for a, _ in restart_to_idle]
    median = statistics.median(a for a, _ in restart_to_idle) if restart_to_idle else float("nan")
    leading = statistics.median(b for _, b in restart_to_idle) if restart_to_idle else float("nan")
    print(f"[reliability] {runs} runs, {kills} kills, {identical}/{runs} identical final states; "
          f"restart -> quiescent (first idle reconcile) median {median:.2f}s over {len(restart_to_idle)} restarts, "
          f"of which leader Lease taken -> quiescent median {leading:.2f}s (seed {seed})")
    assert kills >= runs
    assert not mismatches, "\n".join(f"run {r} {plan}:\n" + "\n".join(d) for r, plan, d in mismatches)
    # the reference itself: the drained Instance repointed, its Pod on the aware queue, seven flavors
    assert ("InstanceType", "", CUSTOM) not in want
    assert want[("Instance", NS, "custom-demo")]["spec"]["type"] == AWARE_A10G
    assert len([k for k in want if k[0] == "ResourceFlavor"]) == 7


# -- 2. API-server restart mid-watch ------------------------------------------------------------------
def _in_process_controller(kubeconfig) -> Controller:
    controller = Controller(connect(kubeconfig), POLICY, coalesce_seconds=0.1, env={}, fit_coalesce_seconds=0)
    return controller.start()


def _events(session) -> list[tuple]:
    return sorted((e["metadata"]["namespace"], e["metadata"]["name"], e.get("reason"), e.get("count"))
                  for e in _list(session, "Event"))


def _cache_matches_server(controller, session) -> list[str]:
    """Kinds whose cache differs from a fresh list (by namespace, name and resourceVersion)."""
    out = []
    for kind, cache in controller.cache.caches.items():
        w = cache.watched
        live = [o for o in _list(session, kind, w.namespace)
                if not w.field_selector or f"metadata.name={o['metadata']['name']}" == w.field_selector]
        key = lambda o: (o["metadata"].get("namespace") or "", o["metadata"]["name"], o["metadata"]["resourceVersion"])  # noqa: E731
        if sorted(map(key, live)) != sorted(map(key, cache.objects())):
            out.append(kind)
    return out


def test_controller_resumes_after_an_apiserver_restart(control_plane, session):
    cluster, kubectl = control_plane
    reset_cluster(session)
    apply_step1(session, kubectl)
    controller = _in_process_controller(cluster.kubeconfig)
    caches = controller.cache.caches
    try:
        with loop_running(controller):
            assert controller.wait_idle(60)
            assert without_phase(table_rows(kubectl)) == seed_rows("step1-instancetype.txt")
            # one Warning Event to see whether the restart repeats it (docs/concepts/settings.md "Settings")
            set_setting(kubectl, POLICY.settings, "instance-type-mixed-on-node", "maybe")
            wait_for("the InvalidSetting Event", lambda: [e for e in _events(session) if e[2] == "InvalidSetting"])
            assert controller.wait_idle(60)
            before = read_state(session)
            queues = sorted(k for k in before if k[0] == "LocalQueue")
            events = _events(session)
            lists = {kind: c.lists for kind, c in caches.items()}
            old_streams = {kind: c._stream for kind, c in caches.items()}
            passes = len(controller.reconciles)

            restart_seconds = cluster.restart_apiserver()
            ready = time.monotonic()

            def resumed():  # every kind watches again on a new connection
                return all(c._stream is not None and c._stream is not old_streams[k] for k, c in caches.items())
            wait_for("every cache watching again", resumed, timeout=60)
            resume_seconds = time.monotonic() - ready
            assert controller.wait_idle(60)
            stale = _cache_matches_server(controller, session)
            assert stale == [], f"caches differ from the server after the restart: {stale}"
            after_restart = controller.reconciles[passes:]
            # nothing was (re)created or written because of the restart
            assert [a for r in after_restart for a in r.planned] == []
            assert [w for r in after_restart for w in r.writes] == []

            _patch_managed("false")(kubectl)
            t0 = time.monotonic()
            wait_for("the un-manage table after the restart",
                     lambda: without_phase(table_rows(kubectl)) == seed_rows("step2-after-unmanage.txt"))
            patch_seconds = time.monotonic() - t0
            _patch_managed("true")(kubectl)
            wait_for("the re-admit table", lambda: without_phase(table_rows(kubectl)) == seed_rows(
                "step2-after-readmit.txt"))
            assert controller.wait_idle(60)
            relisted = {k: c.lists - lists[k] for k, c in caches.items() if c.lists != lists[k]}
        idle = controller.reconcile()
        assert idle.planned == [] and idle.writes == [] and idle.errors == []
        after = read_state(session)
        assert sorted(k for k in after if k[0] == "LocalQueue") == queues
        # the restart repeated no Event; the un-manage and re-admit after it wrote one each on the Node
        assert [e[2:] for e in events] == [("InvalidSetting", 1)]
        new = [e for e in _events(session) if e not in events]
        assert set(events) <= set(_events(session))
        assert sorted((e[0], e[1].split(".")[:2], e[2], e[3]) for e in new) == [
            ("default", ["node-a10g", "nodejoinedpool"], "NodeJoinedPool", 1),
            ("default", ["node-a10g", "nodeleftpool"], "NodeLeftPool", 1)]
        # the pools are what they were: same objects (by uid where create-only), same content
        assert differences(normalize(before), normalize(after)) == []
        for key in queues + [k for k in before if k[0] == "InstanceType"]:
            assert after[key]["metadata"]["uid"] == before[key]["metadata"]["uid"], key
    finally:
        controller.stop()
        set_setting(kubectl, POLICY.settings, "instance-type-mixed-on-node", "true")
    FIGURES["API-server restart (SIGTERM -> readyz), seconds"] = [restart_seconds]
    FIGURES["readyz -> every watch reopened, seconds"] = [resume_seconds]
    print(f"\n[reliability] API-server restart: {restart_seconds:.1f}s SIGTERM->readyz (old process gone after "
          f"{cluster.restart_stop_seconds:.1f}s); watches reopened "
          f"{resume_seconds:.2f}s after readyz; kinds relisted: {sorted(relisted)} "
          f"({len(relisted)}/{len(caches)}); NodeFeature patch -> table {patch_seconds:.2f}s; "
          f"{len(after_restart)} passes after the restart planned nothing")


# -- 3. an administrator's InstanceType -----------------------------------------------------------------
class ObjectWatch:
    """Every watch event of one object from ``resource_version`` on, in a thread."""

    def __init__(self, session, kind: str, name: str, resource_version: str):
        self.events: list[dict] = []
        self._stream = session.stream(_path(session, kind), {
            "watch": "true", "fieldSelector": f"metadata.name={name}", "resourceVersion": resource_version,
            "timeoutSeconds": 1800}, timeout=1830)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for event in self._stream:
                self.events.append(event)
        except Exception:  # noqa: BLE001 - aborted from stop()
            pass

    def stop(self) -> None:
        self._stream.abort()
        self._thread.join(10)


def _outside_status(obj: dict) -> dict:
    out = copy.deepcopy(obj)
    out.pop("status", None)
    for name in ("managedFields", "resourceVersion"):
        out["metadata"].pop(name, None)
    return out


def test_administrator_instance_type_is_only_given_status(control_plane, session):
    cluster, kubectl = control_plane
    reset_cluster(session)
    apply_step1(session, kubectl)
    controller = _in_process_controller(cluster.kubeconfig)
    controllers = [controller]
    custom = lambda: _get(session, "InstanceType", CUSTOM)  # noqa: E731
    try:
        with loop_running(controller):
            assert controller.wait_idle(60)
            kubectl("apply", "-f", str(seed_file("objects", "step4-instancetype-a10g-12c128g.yaml")))
            created = wait_for("the custom type", custom)
            watch = ObjectWatch(session, "InstanceType", CUSTOM, created["metadata"]["resourceVersion"])
            wait_for("its status", lambda: (custom().get("status") or {}).get("entrance") == RIGHT_ENTRANCE)
            assert controller.wait_idle(60)
            rows = {r["NAME"]: r for r in without_phase(table_rows(kubectl))}
            assert rows[CUSTOM] == {r["NAME"]: r for r in seed_rows("step4-after-custom-type.txt")}[CUSTOM]

            _patch_managed("false")(kubectl)    # node-a10g leaves: every flavor the type matches is deleted
            wait_for("the un-manage table", lambda: [r for r in without_phase(table_rows(kubectl))
                                                     if r["NAME"] != CUSTOM] == seed_rows("step2-after-unmanage.txt"))
            assert controller.wait_idle(60)
            assert [f["metadata"]["name"] for f in _list(session, "ResourceFlavor") if "nvidia-a10g" in
                    f["metadata"]["name"]] == []
            assert next(r for r in table_rows(kubectl) if r["NAME"] == CUSTOM)["ACCELERATOR(EX/SH/SL/PT)"] == \
                "0/0 0/0 0/0 0/0"
            _patch_managed("true")(kubectl)
            for value in ("true", "false"):   # awareness on, then off again
                set_setting(kubectl, POLICY.settings, "instance-type-aware-cpu-manufacturer", value)
                if value == "true":
                    wait_for("the aware table", lambda: [r for r in without_phase(table_rows(kubectl))
                                                         if r["NAME"] != CUSTOM] == seed_rows("step5-after-aware.txt"))
                assert controller.wait_idle(60)
        controller.stop()
        controller = _in_process_controller(cluster.kubeconfig)   # a restart: new caches, new process state
        controllers.append(controller)
        with loop_running(controller):
            assert controller.wait_idle(60)
            _patch_managed("false")(kubectl)
            wait_for("the custom type emptied again", lambda: next(
                r for r in table_rows(kubectl) if r["NAME"] == CUSTOM)["ACCELERATOR(EX/SH/SL/PT)"] == "0/0 0/0 0/0 0/0")
            assert controller.wait_idle(60)
        final = custom()
        watch.stop()
    finally:
        controller.stop()
        _patch_managed("true")(kubectl)

    assert final is not None and final["metadata"]["uid"] == created["metadata"]["uid"]
    for field_ in ("labels", "annotations", "finalizers", "generation"):
        assert final["metadata"].get(field_) == created["metadata"].get(field_), field_
    assert final["spec"] == created["spec"]
    # every change since it was created: status only, never a delete
    kinds = [e["type"] for e in watch.events]
    assert "DELETED" not in kinds and set(kinds) <= {"MODIFIED"}, kinds
    previous = created
    for event in watch.events:
        assert _outside_status(event["object"]) == _outside_status(previous), event["object"]["metadata"]
        previous = event["object"]
    assert previous["metadata"]["resourceVersion"] == final["metadata"]["resourceVersion"]
    # field manager accelpolicy owns status fields only, written through the status subresource
    ours = [m for m in final["metadata"]["managedFields"] if m["manager"] == "accelpolicy"]
    assert [(m["operation"], m.get("subresource"), sorted(m["fieldsV1"])) for m in ours] == \
        [("Apply", "status", ["f:status"])]
    others = [m for m in final["metadata"]["managedFields"] if m["manager"] != "accelpolicy"]
    assert others == [m for m in created["metadata"]["managedFields"] if m["manager"] != "accelpolicy"]
    planned = {a.verb for c in controllers for r in c.reconciles for a in r.planned
               if a.kind == "InstanceType" and a.name == CUSTOM}
    assert planned == {"apply-status"}
    print(f"\n[reliability] administrator InstanceType {CUSTOM}: {len(watch.events)} changes, all status-only "
          f"(field manager accelpolicy: status subresource only); spec, labels, annotations, finalizers, "
          f"generation {final['metadata'].get('generation')} unchanged; never deleted")
