"""The live controller on a real kube-apiserver + etcd (docs/development/testing.md "Test layers").

The seed cluster (tests/fixtures/seed/common: Nodes, NodeFeatures, Devices with their status,
Namespaces, the settings Secret) is written with kubectl; the controller (runtime.controller) runs
in this process against the same server. Then ``kubectl get`` must print the seed's tables.

PHASE: only Kueue's CRDs are installed, not its controller, so no ClusterQueue ever gets an
``Active`` condition and every InstanceType reads ``Activating`` (docs/concepts/pools-and-flavors.md "InstanceType status": "queue
missing or condition Unknown"). The seed (captured with Kueue running) prints ``Active``; the
tests compare every other column exactly and assert PHASE == ``Activating``. Nor does NFD master
run: Node labels do not follow NodeFeatures by themselves; the controller reads the NodeFeatures
itself, as the engine's snapshot mode does (runtime/engine/pools/nodes.py ``effective_node_labels``).

One controller serves the module (its start and first pass are the ``ctl`` fixture's); each test
leaves the cluster at the seed's step 1 (settings, managed labels, ledger, types) and counts only
the Events and passes of its own, so the tests pass in any order. The running loop is a test's own
(``running``): the tests that call ``reconcile()`` themselves never race it.
"""
from __future__ import annotations

import contextlib
import json
import statistics
import threading
import time

import pytest
import yaml

from testing.hooks import ObservedController as Controller
from runtime.engine.policy import Policy
from runtime.kube.session import connect
from testing.localcluster.testing import parse_table, set_setting, wait_for
from runtime.rules.loader import load_rules
from tests.seedfiles import FIXTURES, seed_file, seed_table

COMMON = FIXTURES / "seed" / "common"
A10G_TYPE = "gpustack--nvidia-a10g-linux-amd64"
GENERIC_TYPE = "gpustack--generic-linux-amd64"
A10G_FLAVOR = "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d"
A10G_CPU_FLAVOR = "gpustack--amd-epyc-7r32-linux-amd64-4c"
OUR_KINDS = ["instancetypes.worker.gpustack.ai", "instancetypeflavors.worker.gpustack.ai",
             "clusterqueues.kueue.x-k8s.io", "resourceflavors.kueue.x-k8s.io",
             "admissionchecks.kueue.x-k8s.io", "devices.worker.gpustack.ai", "nodes"]
FIGURES: dict[str, list[float]] = {}
FIRST_PASS: list = []   # the ctl fixture's first reconcile (one per module run)


def _clean(kubectl) -> None:
    """The shared control plane back to no pools: our kinds, the Nodes, the settings Secret, the Lease and
    every Instance (any module may have left one) deleted, their finalizers dropped first so the deletes
    complete without the controller."""
    for name in kubectl.stdout("get", "instancetypes", "-o", "name").split():
        kubectl("patch", name, "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
    for item in json.loads(kubectl.stdout("get", "instances.worker.gpustack.ai", "-A", "-o", "json"))["items"]:
        if item["metadata"].get("finalizers"):
            kubectl("patch", "instances.worker.gpustack.ai", item["metadata"]["name"], "-n",
                    item["metadata"]["namespace"], "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
    kubectl("delete", "instances.worker.gpustack.ai", "--all", "-A", "--wait=true")
    kubectl("delete", "localqueues.kueue.x-k8s.io", "--all", "-A", "--wait=true")
    kubectl("delete", "nodefeatures.nfd.k8s-sigs.io", "--all", "-A", "--wait=true")
    for kind in OUR_KINDS:
        kubectl("delete", kind, "--all", "--wait=true")
    kubectl("delete", "secret", "gpustack-settings", "-n", "gpustack-system", "--ignore-not-found")
    kubectl("delete", "lease", "gpustack-operator-worker", "-n", "gpustack-system", "--ignore-not-found")


def _apply_seed_cluster(kubectl) -> None:
    kubectl("apply", "-f", str(COMMON / "namespaces.yaml"))
    for name in ("nodes.yaml", "nodefeatures.yaml", "devices.yaml", "settings.yaml"):
        kubectl("apply", "--validate=strict", "-f", str(COMMON / name))
    for name, resource in (("nodes.yaml", "node"), ("devices.yaml", "devices.worker.gpustack.ai")):
        for doc in yaml.safe_load_all((COMMON / name).read_text()):
            if doc and doc.get("status"):
                kubectl("patch", resource, doc["metadata"]["name"], "--subresource=status", "--type=merge",
                        "-p", json.dumps({"status": doc["status"]}))


@pytest.fixture(scope="module")
def ctl(control_plane):
    cluster, kubectl = control_plane
    _clean(kubectl)
    _apply_seed_cluster(kubectl)
    # fit labels in the pass that plans them; their window is exercised by test_fit_labels_follow_the_ledger
    controller = Controller(connect(cluster.kubeconfig), Policy(load_rules()), coalesce_seconds=0.1, env={},
                            fit_coalesce_seconds=0)
    controller.start()
    FIRST_PASS[:] = [controller.reconcile()]
    FIGURES.setdefault("first reconcile seconds", []).append(FIRST_PASS[0].seconds)
    yield controller
    controller.stop()
    _clean(kubectl)
    for key, values in FIGURES.items():
        print(f"\n[controller figure] {key}: {', '.join(f'{v:.3f}' for v in values)}")


def rows(kubectl, kind="instancetypes"):
    return parse_table(kubectl.stdout("get", kind))[1]


def seed_rows(table):
    return parse_table(seed_table(table))[1]


def without_phase(rows_):
    return [{k: v for k, v in r.items() if k != "PHASE"} for r in rows_]


def names(kubectl, kind):
    return sorted(r["NAME"] for r in rows(kubectl, kind))


def test_first_reconcile_prints_the_seed_step1_tables(ctl, kubectl):
    assert FIRST_PASS[0].errors == []
    got = rows(kubectl)
    assert without_phase(got) == without_phase(seed_rows("step1-instancetype.txt"))
    assert {r["PHASE"] for r in got} == {"Activating"}  # no Kueue controller: see the module docstring
    assert names(kubectl, "resourceflavors.kueue.x-k8s.io") == sorted(
        r["NAME"] for r in seed_rows("step1-resourceflavor.txt"))
    # PENDING WORKLOADS is Kueue's status.pendingWorkloads: empty without Kueue's controller
    queues = rows(kubectl, "clusterqueues.kueue.x-k8s.io")
    assert [(r["NAME"], r["COHORT"]) for r in queues] == \
        [(r["NAME"], r["COHORT"]) for r in seed_rows("step1-clusterqueue.txt")]
    assert {r["PENDING WORKLOADS"] for r in queues} == {""}
    catalog = rows(kubectl, "instancetypeflavors")
    assert sorted(map(sorted, (r.items() for r in catalog))) == \
        sorted(map(sorted, (r.items() for r in seed_rows("step1-instancetypeflavor.txt"))))


def test_second_reconcile_writes_nothing(ctl):
    assert ctl.reconcile().errors == []   # whatever a test before left to settle
    result = ctl.reconcile()
    FIGURES.setdefault("idle reconcile seconds", []).append(result.seconds)
    FIGURES.setdefault("writes per idle reconcile", []).append(float(len(result.writes)))
    assert result.planned == [] and result.writes == [] and result.errors == []


def _fit(ctl, kubectl, node: str) -> dict[str, str]:
    """The Node's labels under the two fit prefixes of rules/labels.yaml (docs/agent.md "Capacity and fit labels")."""
    prefixes = (ctl.policy.prefix("fitSliced"), ctl.policy.prefix("fitShared"))
    labels = json.loads(kubectl.stdout("get", "node", node, "-o", "json"))["metadata"]["labels"]
    return {k: v for k, v in labels.items() if k.startswith(prefixes)}


def _fit_keys(ctl, akey: str) -> tuple[str, str]:
    return ctl.policy.prefix("fitSliced") + akey, ctl.policy.prefix("fitShared") + akey


def _patch_ledger(ctl, kubectl, **entry) -> None:
    """node-a10g's Devices status = the seed's with ``entry`` on its accelerator; waits for the cache."""
    doc = next(d for d in yaml.safe_load_all((COMMON / "devices.yaml").read_text())
               if d and d["metadata"]["name"] == "node-a10g")
    doc["status"]["groups"][0]["accelerators"][0].update(entry)
    kubectl("patch", "devices.worker.gpustack.ai", "node-a10g", "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": doc["status"]}))
    deadline = time.monotonic() + 10
    while (ctl.cache.get("Devices", "node-a10g") or {}).get("status") != doc["status"]:
        assert time.monotonic() < deadline, "Devices status not seen by the cache"
        time.sleep(0.05)


def test_fit_labels_follow_the_ledger(ctl, kubectl):
    """docs/concepts/pools-and-flavors.md "Kueue's resource charging" on the live cluster: the seed's idle values, the 20 % slice, the coalescing window, and
    an idle pass that writes nothing."""
    a10g, t4 = _fit_keys(ctl, "nvidia-a10g"), _fit_keys(ctl, "nvidia-tesla-t4")
    assert _fit(ctl, kubectl, "node-a10g") == dict(zip(a10g, ("1600000", "1")))
    assert _fit(ctl, kubectl, "node-t4-b") == dict(zip(t4, ("1600000", "4")))
    assert _fit(ctl, kubectl, "node-cpu") == {}
    ctl.fit_window.seconds = 1.0  # the window (rules: 3 s), shortened for the test
    try:
        _patch_ledger(ctl, kubectl, mode=3, allocated=320000, remaining=1280000, allocatedSlices=1)
        first = ctl.reconcile()
        assert [(a.verb, a.kind, a.name) for a in first.deferred] == [("patch", "Node", "node-a10g")]
        assert not [w for w in first.writes if w.kind == "Node"]
        assert _fit(ctl, kubectl, "node-a10g") == dict(zip(a10g, ("1600000", "1")))
        time.sleep(1.0)
        later = ctl.reconcile()
        assert [(w.verb, w.kind, w.name) for w in later.writes] == [("patch", "Node", "node-a10g")]
        assert _fit(ctl, kubectl, "node-a10g") == dict(zip(a10g, ("1280000", "0")))
        idle = ctl.reconcile()
        assert idle.planned == [] and idle.deferred == [] and idle.writes == []
    finally:
        ctl.fit_window.seconds = 0
        _patch_ledger(ctl, kubectl)  # back to the seed's idle ledger for the tests below
        assert ctl.reconcile().errors == []
    assert _fit(ctl, kubectl, "node-a10g") == dict(zip(a10g, ("1600000", "1")))
    assert ctl.reconcile().writes == []


def test_live_objects_carry_our_fields(ctl, kubectl):
    flavor = json.loads(kubectl.stdout("get", "resourceflavors.kueue.x-k8s.io", A10G_FLAVOR, "-o", "json"))
    want = yaml.safe_load(seed_file("objects", "step1-resourceflavor-accelerated.yaml").read_text())
    assert flavor["metadata"]["labels"] == want["metadata"]["labels"]
    assert flavor["spec"] == want["spec"]
    assert json.loads(flavor["metadata"]["annotations"]["note.gpustack.ai/feature"])["logicalSliced"]["maxSize"] == 128
    managers = json.loads(kubectl.stdout("get", "resourceflavors.kueue.x-k8s.io", A10G_FLAVOR, "-o", "json",
                                         "--show-managed-fields"))["metadata"]["managedFields"]
    assert {(m["manager"], m["operation"]) for m in managers} == {("accelpolicy", "Apply")}
    queue = json.loads(kubectl.stdout("get", "clusterqueues.kueue.x-k8s.io", A10G_TYPE, "-o", "json"))
    lq = json.loads(kubectl.stdout("get", "localqueues.kueue.x-k8s.io", "-n", "default",
                                   "gpustack-fnv64-c4680bb149644f1c", "-o", "json"))
    assert lq["spec"]["clusterQueue"] == A10G_TYPE
    assert lq["metadata"]["ownerReferences"][0]["uid"] == queue["metadata"]["uid"]
    assert queue["spec"]["admissionChecksStrategy"] == {"admissionChecks": [{"name": "gpustack-node-devices"}]}
    check = json.loads(kubectl.stdout("get", "admissionchecks.kueue.x-k8s.io", "gpustack-node-devices", "-o", "json"))
    assert [(c["type"], c["status"]) for c in check["status"]["conditions"]] == [("Active", "True")]
    it = json.loads(kubectl.stdout("get", "instancetypes", A10G_TYPE, "-o", "json"))
    assert it["metadata"]["labels"]["schedule.gpustack.ai/derived-from-node"] == "true"
    assert it["status"]["detail"]["computeCapability"] == "8.6"
    # the settings Secret was seeded with the missing keys; the stored ones kept
    secret = json.loads(kubectl.stdout("get", "secret", "-n", "gpustack-system", "gpustack-settings", "-o", "json"))
    assert len(secret["data"]) == 11
    assert secret["data"]["instance-type-aware-cpu-manufacturer"] == "ZmFsc2U="


def test_administrator_type_is_never_modified_or_deleted(ctl, kubectl):
    kubectl("apply", "-f", str(seed_file("objects", "step4-instancetype-a10g-12c128g.yaml")))
    before = json.loads(kubectl.stdout("get", "instancetypes", "a10g-12c128g", "-o", "json"))
    # the passes below read the watch cache: wait until it holds what kubectl wrote
    wait_for(lambda: ctl.cache.get("InstanceType", "a10g-12c128g"), lambda it: it is not None and
             it["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"], what="the type in the cache")
    assert ctl.reconcile().errors == []
    assert ctl.reconcile().writes == []
    after = json.loads(kubectl.stdout("get", "instancetypes", "a10g-12c128g", "-o", "json"))
    for field in ("labels", "generation", "finalizers", "annotations"):
        assert after["metadata"].get(field) == before["metadata"].get(field), field
    assert after["spec"] == before["spec"]
    assert after["status"]["entrance"] == "gpustack-fnv64-d4c0e6cd72686015"
    assert after["status"]["summary"]["accelerator"] == "1/1 10/10 100/100 0/0"
    assert "a10g-12c128g" in names(kubectl, "clusterqueues.kueue.x-k8s.io")
    # the administrator deletes it: its queue and LocalQueue go, the derived types stay
    kubectl("delete", "instancetypes", "a10g-12c128g", "--wait=true")
    wait_for(lambda: ctl.cache.get("InstanceType", "a10g-12c128g"), lambda it: it is None, what="the delete in the cache")
    result = ctl.reconcile()
    reserved = ("gpustack-system", "kube-system", "kube-public", "kube-node-lease")   # decision 17: no LocalQueues
    namespaces = [n for n in kubectl.stdout("get", "namespaces", "-o", "name").split()
                  if n.split("/")[1] not in reserved]
    assert sorted((w.verb, w.kind, w.name, w.namespace) for w in result.writes) == [
        ("delete", "ClusterQueue", "a10g-12c128g", "")] + sorted(
        ("delete", "LocalQueue", "gpustack-fnv64-d4c0e6cd72686015", n.split("/")[1]) for n in namespaces)
    assert names(kubectl, "instancetypes") == sorted([GENERIC_TYPE, A10G_TYPE, "gpustack--nvidia-tesla-t4-linux-amd64"])


def _wait_for(kubectl, predicate, timeout=20.0, kind="instancetypes"):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        got = rows(kubectl, kind)
        if predicate(got):
            return time.monotonic() - t0, got
        time.sleep(0.05)
    raise AssertionError(f"{kind} table not reached in {timeout}s: {got}")


@contextlib.contextmanager
def loop_running(controller):
    """The controller's loop in a daemon thread for the duration of the block."""
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield controller
    finally:
        stop.set()
        thread.join(10)


@pytest.fixture
def running(ctl):
    with loop_running(ctl):
        yield ctl


def _patch_managed(kubectl, value):
    kubectl("-n", "gpustack-system", "patch", "nodefeature", "node-a10g-gpustack-worker", "--type=merge",
            "-p", json.dumps({"spec": {"labels": {"gpustack.ai/managed": value}}}))


def _uid(kubectl, resource, name) -> str:
    return json.loads(kubectl.stdout("get", resource, name, "-o", "json"))["metadata"]["uid"]


def _wait_for_events(kubectl, uid: str, reason: str, count: int = 1, timeout: float = 20.0) -> list[tuple]:
    """(type, reason, message, reportingComponent) of the Events with ``reason`` on the object ``uid``
    (any namespace), once ``count`` exist; polls until ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        items = json.loads(kubectl.stdout("get", "events", "-A", "--field-selector",
                                          f"involvedObject.uid={uid},reason={reason}", "-o", "json"))["items"]
        got = sorted((e["type"], e["reason"], e["message"], e.get("reportingComponent")) for e in items)
        if len(got) >= count or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def test_unmanage_and_readmit_with_the_running_loop(running, kubectl):
    want = without_phase(seed_rows("step2-after-unmanage.txt"))
    node_uid = _uid(kubectl, "node", "node-a10g")
    left = len(_wait_for_events(kubectl, node_uid, "NodeLeftPool", timeout=0))   # other tests' flips
    joined = len(_wait_for_events(kubectl, node_uid, "NodeJoinedPool", timeout=0))
    _patch_managed(kubectl, "false")
    seconds, got = _wait_for(kubectl, lambda r: without_phase(r) == want)
    FIGURES.setdefault("NodeFeature patch -> correct table, seconds", []).append(seconds)
    flavors = names(kubectl, "resourceflavors.kueue.x-k8s.io")
    assert len(flavors) == 5 and A10G_FLAVOR not in flavors and A10G_CPU_FLAVOR not in flavors
    assert "gpustack--nvidia-a10g" not in names(kubectl, "instancetypeflavors")
    a10g = next(r for r in got if r["NAME"] == A10G_TYPE)
    assert a10g["ACCELERATOR(EX/SH/SL/PT)"] == "0/0 0/0 0/0 0/0"
    assert next(r for r in got if r["NAME"] == GENERIC_TYPE)["CPU"] == "48/68"
    # one Event on the Node for the transition (rules/controller.yaml events.nodeLeftPool)
    assert _wait_for_events(kubectl, node_uid, "NodeLeftPool", count=left + 1) == [(
        "Normal", "NodeLeftPool", f"node node-a10g left the pool: no longer contributes to ResourceFlavors "
        f"{A10G_FLAVOR}, {A10G_CPU_FLAVOR}", "accelpolicy")] * (left + 1)

    want = without_phase(seed_rows("step2-after-readmit.txt"))
    _patch_managed(kubectl, "true")
    seconds, _ = _wait_for(kubectl, lambda r: without_phase(r) == want)
    FIGURES["NodeFeature patch -> correct table, seconds"].append(seconds)
    assert len(names(kubectl, "resourceflavors.kueue.x-k8s.io")) == 7
    assert _wait_for_events(kubectl, node_uid, "NodeJoinedPool", count=joined + 1) == [(
        "Normal", "NodeJoinedPool", f"node node-a10g joined the pool: contributes to ResourceFlavors "
        f"{A10G_FLAVOR}, {A10G_CPU_FLAVOR}", "accelpolicy")] * (joined + 1)
    assert running.wait_idle(10)
    # once per transition: the passes after it wrote no second Event
    assert len(_wait_for_events(kubectl, node_uid, "NodeLeftPool", timeout=0)) == left + 1
    assert len(_wait_for_events(kubectl, node_uid, "NodeJoinedPool", timeout=0)) == joined + 1


def test_broken_watches_resume_and_an_expired_version_relists(running, kubectl):
    """Every watch connection is cut; the NodeFeature cache is also sent back to resourceVersion 1,
    which the API server answers with 410 Gone. The caches resume (the others without a new list),
    and the loop still follows a NodeFeature patch."""
    caches = running.cache.caches
    lists = {kind: c.lists for kind, c in caches.items()}
    nf = caches["NodeFeature"]
    relists = nf.relists
    nf._version = "1"
    for cache in caches.values():
        if cache._stream is not None:
            cache._stream.abort()
    _patch_managed(kubectl, "false")
    seconds, _ = _wait_for(kubectl, lambda r: without_phase(r) == without_phase(seed_rows("step2-after-unmanage.txt")))
    FIGURES.setdefault("after cut watches: NodeFeature patch -> correct table, seconds", []).append(seconds)
    assert nf.relists == relists + 1 and nf.lists == lists["NodeFeature"] + 1
    assert {kind: c.lists for kind, c in caches.items() if kind != "NodeFeature"} == \
        {kind: n for kind, n in lists.items() if kind != "NodeFeature"}
    _patch_managed(kubectl, "true")
    _wait_for(kubectl, lambda r: without_phase(r) == without_phase(seed_rows("step1-instancetype.txt")))
    assert running.wait_idle(10)


def test_flavor_with_changed_node_labels_is_recreated(running, kubectl):
    before = json.loads(kubectl.stdout("get", "resourceflavors.kueue.x-k8s.io", A10G_FLAVOR, "-o", "json"))
    kubectl("patch", "resourceflavors.kueue.x-k8s.io", A10G_FLAVOR, "--type=merge",
            "-p", '{"spec":{"nodeLabels":{"zone":"a"}}}')

    def recreated():
        got = json.loads(kubectl.stdout("get", "resourceflavors.kueue.x-k8s.io", A10G_FLAVOR, "-o", "json",
                                        check=False) or "{}")
        return got.get("metadata", {}).get("uid") not in (None, before["metadata"]["uid"]) and got
    deadline = time.monotonic() + 20
    while not (got := recreated()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert got, "flavor not recreated"
    assert got["spec"]["nodeLabels"] == before["spec"]["nodeLabels"]
    assert running.wait_idle(10)


def test_deleted_derived_type_loses_queue_then_finalizer_and_is_authored_again(running, kubectl):
    name = "gpustack--nvidia-tesla-t4-linux-amd64"
    before = json.loads(kubectl.stdout("get", "instancetypes", name, "-o", "json"))
    assert before["metadata"]["finalizers"] == ["gpustack.ai/controlled"]
    kubectl("delete", "instancetypes", name, "--wait=false")
    deadline = time.monotonic() + 20
    got = {}
    while time.monotonic() < deadline:
        got = json.loads(kubectl.stdout("get", "instancetypes", name, "-o", "json", check=False) or "{}")
        if got.get("metadata", {}).get("uid") not in (None, before["metadata"]["uid"]) and got.get("status"):
            break
        time.sleep(0.05)
    assert got["metadata"]["uid"] != before["metadata"]["uid"], "type not authored again"
    assert got["spec"] == before["spec"] and got["status"]["summary"] == before["status"]["summary"]
    assert name in names(kubectl, "clusterqueues.kueue.x-k8s.io")
    assert running.wait_idle(10)
    assert without_phase(rows(kubectl)) == without_phase(seed_rows("step1-instancetype.txt"))
    assert _wait_for_events(kubectl, before["metadata"]["uid"], "InstanceTypeDraining") == [(
        "Normal", "InstanceTypeDraining", f"InstanceType {name} is being deleted: its ClusterQueue {name} drains "
        "(HoldAndDrain) and is deleted", "accelpolicy")]


def _settings_events(result) -> list:
    """The Events a pass wrote in the system namespace (the transition Events are on Nodes and types,
    in namespace default)."""
    return [w for w in result.writes if w.kind == "Event" and w.namespace == "gpustack-system"]


def test_unparsable_setting_reads_as_default_with_a_warning_event(running, kubectl):
    start = len(running.reconciles)
    before = {e["metadata"]["uid"] for e in json.loads(kubectl.stdout("get", "events", "-n", "gpustack-system",
                                                                      "-o", "json"))["items"]}
    set_setting(kubectl, running.policy.settings, "instance-type-mixed-on-node", "maybe")
    try:
        deadline = time.monotonic() + 20
        events = []
        while time.monotonic() < deadline and not events:
            events = [e for e in json.loads(kubectl.stdout("get", "events", "-n", "gpustack-system", "-o", "json"))[
                "items"] if e.get("reason") == "InvalidSetting" and e["metadata"]["uid"] not in before]
            time.sleep(0.1)
        assert [(e["type"], e["involvedObject"]["name"]) for e in events] == [("Warning", "gpustack-settings")]
        assert "instance-type-mixed-on-node" in events[0]["message"]
        assert running.wait_idle(10)
        assert len(names(kubectl, "resourceflavors.kueue.x-k8s.io")) == 7  # the default (true) still applies
        # one pass wrote the one Event, the pass that also planned the Setting view's new status.value
        event_passes = [r for r in running.reconciles[start:] if _settings_events(r)]
        assert len(event_passes) == 1 and len(_settings_events(event_passes[0])) == 1
        assert [(a.verb, a.kind, a.name) for a in event_passes[0].planned] == [
            ("apply-status", "Setting", "instance-type-mixed-on-node")]
    finally:
        set_setting(kubectl, running.policy.settings, "instance-type-mixed-on-node", "true")
        assert running.wait_idle(10)


def test_settings_change_takes_effect_without_restart(running, kubectl):
    start = len(running.reconciles)
    step1 = without_phase(seed_rows("step1-instancetype.txt"))
    set_setting(kubectl, running.policy.settings, "instance-type-aware-cpu-manufacturer", "true")
    try:
        want = without_phase(seed_rows("step5-after-aware.txt"))
        seconds, _ = _wait_for(kubectl, lambda r: without_phase(r) == want)
        FIGURES.setdefault("settings Secret patch -> correct table, seconds", []).append(seconds)
        # the table is one write of the pass and the catalog's writes may follow it: wait for both
        catalog = sorted(map(sorted, (r.items() for r in seed_rows("step5-instancetypeflavor.txt"))))
        _wait_for(kubectl, lambda r: sorted(map(sorted, (row.items() for row in r))) == catalog,
                  kind="instancetypeflavors")
        assert len(names(kubectl, "resourceflavors.kueue.x-k8s.io")) == 7
        assert running.wait_idle(10)
        mine = running.reconciles[start:]
        idle = [r for r in mine if not r.planned]
        # reconciles with nothing planned wrote nothing; a settings change writes no Event
        assert idle and sum(len(r.writes) for r in idle) == 0
        assert not [r for r in mine if _settings_events(r)]
        FIGURES.setdefault("median reconcile seconds (loop)", []).append(
            statistics.median(r.seconds for r in running.reconciles))
    finally:
        # back to step 1: the aware types are create-only (docs/reference/decisions.md "Decision 18: derived
        # InstanceTypes are create-only"), so the ones step 1 does not hold are deleted by hand
        set_setting(kubectl, running.policy.settings, "instance-type-aware-cpu-manufacturer", "false")
        catalog = sorted(map(sorted, (r.items() for r in seed_rows("step1-instancetypeflavor.txt"))))
        _wait_for(kubectl, lambda r: sorted(map(sorted, (row.items() for row in r))) == catalog,
                  kind="instancetypeflavors")
        assert running.wait_idle(10)
        for name in set(names(kubectl, "instancetypes")) - {row["NAME"] for row in step1}:
            kubectl("delete", "instancetypes", name, "--wait=false")
        _wait_for(kubectl, lambda r: without_phase(r) == step1)
        assert running.wait_idle(10)
