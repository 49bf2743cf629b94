"""The seed walkthrough (shared/seed/walkthrough-seed.txt) replayed live, steps 1-6 (docs/development/testing.md "Test layers").

The cluster is the ``cluster`` fixture (``--cluster=local``: kube-apiserver, kube-scheduler,
kube-controller-manager's garbage collector, kwok, nfd-master and Kueue configured by ``runtime.engine.pools.kueueconfig``); around it
:class:`testing.localcluster.walkthrough.Walkthrough` builds the seed's four nodes (kwok fake Nodes),
runs our agent per node (fake NVML backend, recorded facts), our controller (subprocess, with its
admission webhooks) and the device-plugin stand-in. Every step runs the seed's own ``kubectl`` lines
(``Walkthrough.sh``) and waits for the seed's table, column-exact (AGE ignored; the listings the
seed captured out of name order compared as sets). Step 4's custom type reads the entrance of its
own name, ``gpustack-fnv64-d4c0e6cd72686015``, not the capture's stale hash (decision 3).

The steps are one story: the tests run in file order on one cluster, and each starts from the
state the previous one leaves (as the seed does). For every step the seconds from the kubectl line
to the first correct ``kubectl get instancetypes`` table are recorded (``record_step``); the
session summary prints them and their median, and writes them to ``walkthrough-timings.json`` in
the pytest base temporary directory.
"""
from __future__ import annotations

import base64
import json
import re
import subprocess
import time

import pytest
import yaml

from testing.localcluster.walkthrough import (ALLOW_HOST_PATH, AWARE, MANIFESTS, READMIT, RECORDED_FACTS, REPOINT,
                                              RESTART, UNMANAGE, Walkthrough, table_rows, tables_equal, wait_for_table)
from tests.seedfiles import seed_object, seed_table, subset_mismatches

TABLE_TIMEOUT = 300.0          # seconds; the machine is shared and slow, never a timing assertion
STALE_ENTRANCE = "gpustack-fnv64-8cf5b3114035c84a"   # the capture's hash of an older name (decision 3)
RIGHT_ENTRANCE = "gpustack-fnv64-d4c0e6cd72686015"   # FNV-1a of "a10g-12c128g"
NS, SYSTEM = "default", "gpustack-system"

# docs/getting-started.md "Step 6: pinning and volumes" and the seed's troubleshooting row, as kubectl prints the webhook's denial
# ("Instance.worker.gpustack.ai \"pinned-demo\" is invalid: ..." becomes "The Instance \"pinned-demo\" is invalid: ...")
HOST_PATH_DENIED = ('The Instance "pinned-demo" is invalid: spec.additionalVolumes[2].hostPath: '
                    'Forbidden: mounting a host path is not allowed: enable the "instance-host-path-volume-allowed" '
                    'setting to allow it')
PRIVILEGED_DENIED = ('spec.privileged: Forbidden: privileged mode is not allowed: enable the '
                     '"instance-privileged-allowed" setting to allow it')


@pytest.fixture(scope="module")
def walk(cluster, tmp_path_factory, record_step):
    if cluster.stack is not None:   # kind: the chart runs everything; seed node names mapped to kind's
        from kind.kindwalk import KindWalkthrough
        w = KindWalkthrough(cluster.kubeconfig, cluster.stack.kind_node, workdir=tmp_path_factory.mktemp("walkthrough"))
    else:
        w = Walkthrough(cluster.kubeconfig, workdir=tmp_path_factory.mktemp("walkthrough"))
    t0 = time.monotonic()
    w.start()
    w.t0 = t0
    yield w
    w.stop()


def _needs_webhooks(walk: Walkthrough) -> None:
    if not walk.webhooks:
        pytest.xfail("needs the controller's admission webhooks (`accelpolicy controller --webhook-port`, "
                     "branch webhookreg), absent from this checkout")


def instancetypes(walk) -> str:
    return walk.kubectl.stdout("get", "instancetypes")


def expect(walk, name: str, *, kind: str = "instancetypes", as_set: bool = False, fix_entrance: bool = False,
           text: str | None = None) -> tuple[float, str]:
    """Wait for ``kubectl get <kind>`` to equal the seed table ``name`` (or ``text``)."""
    want = text if text is not None else seed_table(name)
    if fix_entrance:
        assert STALE_ENTRANCE in want
        want = want.replace(STALE_ENTRANCE, RIGHT_ENTRANCE)
    want = walk.seed_text(want)   # the Devices listing names the nodes
    if walk.seed_cpu_capacity:
        return wait_for_table(lambda: walk.kubectl.stdout("get", kind), want, timeout=TABLE_TIMEOUT, as_set=as_set,
                              alive=walk.check_processes)
    # kind: real kubelets report this machine's cores, not the seed's: the CPU column and the CPU
    # ResourceFlavors (named with their core count, "-16c") cannot be the seed's; everything else must be.
    return wait_for_table(lambda: without_core_flavors(walk.kubectl.stdout("get", kind)), without_core_flavors(want),
                          timeout=TABLE_TIMEOUT, as_set=as_set, alive=walk.check_processes, ignore=("AGE", "CPU"))


CORE_FLAVOR = re.compile(r"^\S+-\d+c\s")


def without_core_flavors(table: str) -> str:
    """A ``kubectl get`` table without the rows of CPU ResourceFlavors (``<name>-<cores>c``)."""
    return "\n".join(line for line in table.splitlines() if not CORE_FLAVOR.match(line))


def timed(walk, record_step, label: str, line: str, table: str, **kw) -> str:
    """Run the seed's ``line``, wait for ``table``; record the seconds from the line to that table."""
    t0 = time.monotonic()
    walk.sh(line)
    _, got = expect(walk, table, **kw)
    record_step(label, time.monotonic() - t0)
    return got


def get(walk, *args) -> dict:
    out = walk.kubectl.stdout("get", *args, "-o", "json", check=False)
    return json.loads(out) if out.strip() else {}


def wait_until(fetch, predicate, what: str, timeout: float = TABLE_TIMEOUT):
    t0, value = time.monotonic(), None
    while time.monotonic() - t0 < timeout:
        value = fetch()
        if predicate(value):
            return value
        time.sleep(0.25)
    if isinstance(value, dict) and "status" in value:   # an object's status first: it says why, and 3000 characters end
        value = {"status": value["status"], **value}
    raise AssertionError(f"{what} not reached in {timeout:.0f}s; last: {json.dumps(value)[:3000]}")


def phase(walk, name: str) -> str:
    return walk.kubectl("-n", NS, "get", "instance", name, "-o", "jsonpath={.status.phase}", check=False).stdout


def wait_phase(walk, name: str, want: str) -> None:
    wait_until(lambda: phase(walk, name), lambda p: p == want, f"Instance {name} phase {want}")


def seed_object_mismatches(walk, seed_name: str, resource: str, *, labels_exact: bool = True) -> list[str]:
    """How the live object differs from the seed's: labels exact (our own objects) or a subset (a
    Node carries more labels than the seed shows: hostname, fit labels; docs/getting-started.md "Getting started: the seed walkthrough"), and
    every ``spec``/``status`` field the seed shows."""
    want = json.loads(walk.seed_text(json.dumps(seed_object(seed_name))))
    ns = want["metadata"].get("namespace")
    got = get(walk, resource, want["metadata"]["name"], *(["-n", ns] if ns else []))
    if not got:
        return [f"{resource} {want['metadata']['name']} does not exist"]
    out = [] if (got.get("kind"), got.get("apiVersion")) == (want["kind"], want["apiVersion"]) else \
        [f"kind/apiVersion {got.get('kind')}/{got.get('apiVersion')}"]
    labels, want_labels = got["metadata"].get("labels") or {}, want["metadata"].get("labels") or {}
    if not walk.seed_cpu_capacity:   # kind: "<general>/<group>.count" is the kubelet's core count, not the seed's
        general = walk.policy.prefix("general")
        def seed_only(table: dict) -> dict:
            return {k: v for k, v in table.items() if not (k.startswith(general) and k.endswith(".count"))}
        want_labels = seed_only(want_labels)
        if isinstance((want.get("spec") or {}).get("labels"), dict):   # a NodeFeature's spec.labels
            want["spec"]["labels"] = seed_only(want["spec"]["labels"])
    if labels_exact and labels != want_labels:
        out.append(f"labels: expected {want_labels}, got {labels}")
    elif not labels_exact:
        out += subset_mismatches(want_labels, labels, "metadata.labels")
    for part in ("spec", "status"):
        if part in want:
            out += subset_mismatches(want[part], got.get(part), part)
    return out


def assert_seed_object(walk, seed_name: str, resource: str, *, labels_exact: bool = True) -> None:
    """Wait (NFD and the controller write asynchronously) until the live object matches the seed's."""
    wait_until(lambda: seed_object_mismatches(walk, seed_name, resource, labels_exact=labels_exact),
               lambda m: m == [], f"{seed_name} on the cluster", timeout=120)


# -- the manifests the demo and these tests apply are the seed's objects -----------------------------------
@pytest.mark.parametrize("manifest, seed_name", [
    ("sliced-demo.yaml", "step3-instance-sliced-demo.yaml"), ("a10g-12c128g.yaml", "step4-instancetype-a10g-12c128g.yaml"),
    ("custom-demo.yaml", "step4-instance-custom-demo.yaml"), ("pinned-demo.yaml", "step6-instance-pinned-demo.yaml")])
def test_manifests_are_the_seed_objects(manifest, seed_name):
    assert yaml.safe_load((MANIFESTS / manifest).read_text()) == seed_object(seed_name)


# -- Step 1 ---------------------------------------------------------------------------------------------------
def test_step1_tables(walk, record_step):
    _, got = expect(walk, "step1-instancetype.txt")
    record_step("step 1: cluster up (Nodes created) -> first correct table", time.monotonic() - walk.t0)
    expect(walk, "step1-resourceflavor.txt", kind="resourceflavor")
    expect(walk, "step1-clusterqueue.txt", kind="clusterqueue")
    assert tables_equal(walk.kubectl.stdout("get", "instancetype"), seed_table("step1-instancetype.txt"),
                        ignore=("AGE",) if walk.seed_cpu_capacity else ("AGE", "CPU"))
    expect(walk, "step1-instancetypeflavor.txt", kind="instancetypeflavor", as_set=True)
    expect(walk, "step1-devices.txt", kind="devices", as_set=True)


@pytest.mark.parametrize("seed_name, resource, exact", [
    ("step1-node-a10g.yaml", "node", False),
    ("step1-devices-node-a10g.yaml", "devices.worker.gpustack.ai", True),
    ("step1-resourceflavor-accelerated.yaml", "resourceflavors.kueue.x-k8s.io", True),
    ("step1-resourceflavor-cpu.yaml", "resourceflavors.kueue.x-k8s.io", True),
    ("step1-clusterqueue-a10g.yaml", "clusterqueues.kueue.x-k8s.io", True),
    ("step1-instancetype-a10g.yaml", "instancetypes.worker.gpustack.ai", True),
    ("step1-instancetypeflavor-a10g.yaml", "instancetypeflavors.worker.gpustack.ai", True),
])
def test_step1_objects(walk, seed_name, resource, exact):
    if seed_name == "step1-resourceflavor-cpu.yaml" and not walk.seed_cpu_capacity:
        pytest.skip("kind: the CPU flavor's name carries the node's core count (\"-16c\"), the kubelet's here, "
                    "not the seed's")
    assert_seed_object(walk, seed_name, resource, labels_exact=exact)


# -- Step 2 ---------------------------------------------------------------------------------------------------
def test_step2_remove_and_readmit_a_node(walk, record_step):
    expect(walk, "step2-after-readmit.txt")            # "Before": the step 1 table
    assert_seed_object(walk, "step2-nodefeature-worker-node-a10g.yaml", "nodefeatures.nfd.k8s-sigs.io")
    timed(walk, record_step, "step 2: managed=false patch -> table", UNMANAGE, "step2-after-unmanage.txt")
    wait_until(lambda: get(walk, "node", walk.node("node-a10g"))["metadata"]["labels"].get("gpustack.ai/managed"),
               lambda v: v == "false", "nfd-master propagating managed=false onto node-a10g")
    timed(walk, record_step, "step 2: managed=true patch -> table", READMIT, "step2-after-readmit.txt")
    assert_seed_object(walk, "step2-nodefeature-worker-node-a10g.yaml", "nodefeatures.nfd.k8s-sigs.io")


# -- Step 3 ---------------------------------------------------------------------------------------------------
def test_step3_logical_slice(walk, record_step):
    _needs_webhooks(walk)   # the Instance defaulting webhook and the Pod webhook's .units fold
    t0 = time.monotonic()
    walk.sh("kubectl apply -f sliced-demo.yaml")
    wait_phase(walk, "sliced-demo", "Ready")
    expect(walk, "step3-after-sliced-demo.txt")
    record_step("step 3: apply sliced-demo -> Ready and table", time.monotonic() - t0)
    pod = get(walk, "pod", "sliced-demo", "-n", NS)
    assert pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu.sliced.units"] == "320k"
    ledger = get(walk, "devices", walk.node("node-a10g"))["status"]["groups"][0]["accelerators"][0]
    assert {k: ledger.get(k) for k in ("mode", "allocated", "remaining", "allocatedSlices")} == \
        {"mode": 3, "allocated": 320000, "remaining": 1280000, "allocatedSlices": 1}
    # "Deleting the Instance releases the slice: the row returns to 1/1 10/10 100/100 0/0."
    timed(walk, record_step, "step 3: delete sliced-demo -> table", "kubectl -n default delete instance sliced-demo",
          "step2-after-readmit.txt")


# -- Step 4 ---------------------------------------------------------------------------------------------------
def test_step4_custom_instancetype(walk, record_step):
    _needs_webhooks(walk)   # the InstanceType defaulting webhook enriches the custom type (docs/concepts/pools-and-flavors.md "InstanceType admission")
    timed(walk, record_step, "step 4: apply a10g-12c128g -> table", "kubectl apply -f a10g-12c128g.yaml",
          "step4-after-custom-type.txt", fix_entrance=True)
    t0 = time.monotonic()
    walk.sh("kubectl apply -f custom-demo.yaml")
    wait_phase(walk, "custom-demo", "Ready")
    expect(walk, "step4-after-custom-demo.txt", fix_entrance=True)
    record_step("step 4: apply custom-demo -> Ready and table", time.monotonic() - t0)
    t0 = time.monotonic()
    deleted = walk.sh("kubectl delete instancetype a10g-12c128g", check=False, timeout=TABLE_TIMEOUT)
    # kwok's default pod-delete Stage empties a deleted Pod's finalizers, Kueue's included, so Kueue
    # never finishes custom-demo's Workload; the garbage collector (kube-controller-manager on the local
    # cluster) deletes it once its owner Pod is gone. Without one the ClusterQueue keeps it admitted
    # (finalizer kueue.x-k8s.io/resource-in-use) and the type's deletion waits for it.
    assert deleted.returncode == 0, (deleted.stderr, walk.kubectl.stdout("get", "workloads", "-A"))
    out = deleted.stdout
    assert out.strip() == 'instancetype.worker.gpustack.ai "a10g-12c128g" deleted'
    wait_phase(walk, "custom-demo", "Stopped")
    assert walk.sh("kubectl -n default get instance custom-demo -o jsonpath='{.status.phase}'").stdout == "Stopped"
    expect(walk, "step4-after-delete-custom-type.txt")
    record_step("step 4: delete a10g-12c128g -> Stopped and table", time.monotonic() - t0)
    assert get(walk, "instance", "custom-demo", "-n", NS)["spec"]["stop"] is True
    wait_until(lambda: get(walk, "clusterqueue", "a10g-12c128g"), lambda q: q == {}, "ClusterQueue a10g-12c128g gone")


# -- Step 5 ---------------------------------------------------------------------------------------------------
def test_step5_cpu_awareness(walk, record_step):
    t0 = time.monotonic()
    walk.sh(AWARE)
    walk.sh(RESTART)
    _, after = expect(walk, "step5-after-aware.txt")
    record_step("step 5: settings patch + controller restart -> 8-row table", time.monotonic() - t0)
    assert len(after.strip().splitlines()) == 9
    expect(walk, "step5-instancetypeflavor.txt", kind="instancetypeflavor", as_set=True)
    if walk.seed_cpu_capacity:   # kind: nodes of one CPU group but different core counts share one "-Nc" flavor
        assert walk.sh("kubectl get resourceflavor --no-headers | wc -l").stdout.strip() == "7"
    expect(walk, "step1-resourceflavor.txt", kind="resourceflavor")   # the same 7 flavors as step 1
    assert_seed_object(walk, "step5-clusterqueue-aware-a10g.yaml", "clusterqueues.kueue.x-k8s.io")
    secret = get(walk, "secret", "-n", SYSTEM, "gpustack-settings")
    assert base64.b64decode(secret["data"]["instance-type-aware-cpu-manufacturer"]) == b"true"


def test_step5_repoint(walk, record_step):
    _needs_webhooks(walk)
    # the excerpt's two rows; "the other six rows are as in step5-after-aware.txt" (seed README)
    headers, aware = table_rows(seed_table("step5-after-aware.txt"), ignore=())
    replaced = {r["NAME"]: r for r in table_rows(seed_table("step5-after-repoint-EXCERPT.txt"), ignore=())[1]}
    rows = [replaced.get(r["NAME"], r) for r in aware]
    widths = [max(len(h), *(len(r[h]) for r in rows)) for h in headers]   # re-aligned as kubectl aligns
    want = "\n".join("   ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
                     for cells in [headers] + [[r[h] for h in headers] for r in rows])
    t0 = time.monotonic()
    walk.sh(REPOINT)
    wait_phase(walk, "custom-demo", "Ready")
    expect(walk, "", text=want)
    record_step("step 5: repoint custom-demo -> Ready and table", time.monotonic() - t0)
    inst = get(walk, "instance", "custom-demo", "-n", NS)
    assert inst["spec"]["type"] == "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64" and inst["spec"]["stop"] is False


# -- Step 6 ---------------------------------------------------------------------------------------------------
def test_step6_pinned_demo(walk, record_step):
    _needs_webhooks(walk)   # the hostPath gate is the Instance validating webhook's (docs/concepts/instances.md "Additional volumes and host access")
    walk.sh("kubectl apply -f model-config.yaml")
    denied = walk.sh("kubectl apply -f pinned-demo.yaml", check=False)
    assert denied.returncode != 0
    assert denied.stderr == HOST_PATH_DENIED + "\n"
    walk.sh(ALLOW_HOST_PATH)
    wait_until(lambda: get(walk, "setting", "instance-host-path-volume-allowed", "-n", SYSTEM),
               lambda s: (s.get("status") or {}).get("value") == "true", "Setting status.value true")
    t0 = time.monotonic()
    walk.sh("kubectl apply -f pinned-demo.yaml")
    # placement on and no InstancePersistentVolume "datasets": no Pod, the reason in phaseMessage (docs/getting-started.md "Step 6: pinning and volumes")
    inst = wait_until(lambda: get(walk, "instance", "pinned-demo", "-n", NS),
                      lambda i: (i.get("status") or {}).get("phaseMessage"), "pinned-demo phaseMessage")
    assert inst["status"] == {"phase": "Starting",
                              "phaseMessage": 'PersistentVolumeClaim "datasets" does not exist in this namespace'}
    record_step("step 6: apply pinned-demo -> phaseMessage", time.monotonic() - t0, table=False)
    assert get(walk, "pod", "pinned-demo", "-n", NS) == {}
    # the claim the seed implies: the InstancePersistentVolume and its volume on node-t4-b (demo/datasets.yaml)
    t0 = time.monotonic()
    walk.sh("kubectl apply -f datasets.yaml")
    wait_until(lambda: get(walk, "pvc", "datasets", "-n", NS),
               lambda c: (c.get("status") or {}).get("phase") == "Bound", "PVC datasets Bound")
    wait_phase(walk, "pinned-demo", "Ready")
    record_step("step 6: apply datasets -> pinned-demo Ready", time.monotonic() - t0, table=False)
    check_pinned_demo(walk)


T4_POOL = "gpustack--nvidia-tesla-t4-linux-amd64"
T4_4D = "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-4d"


def check_pinned_demo(walk) -> None:
    """Seed step 6 as intended (docs/concepts/instances.md, "Pinned to a node"): pinned-demo's Workload
    is admitted on the T4 pool's ``-4d`` flavor (the one holding node-t4-b), its Pod runs on node-t4-b
    with the hostname nodeSelector and never a ``nodeName`` of ours, and node-t4-b's ledger charges it."""
    node = walk.node("node-t4-b")
    pod = wait_until(lambda: get(walk, "pod", "pinned-demo", "-n", NS),
                     lambda p: (p.get("status") or {}).get("phase") == "Running", "Pod pinned-demo Running")
    assert pod["spec"]["nodeName"] == node   # the scheduler's binding
    hostname = get(walk, "node", node)["metadata"]["labels"]["kubernetes.io/hostname"]
    selector = dict(pod["spec"]["nodeSelector"])
    assert selector.pop("kubernetes.io/hostname") == hostname
    flavor = get(walk, "resourceflavors.kueue.x-k8s.io", T4_4D)
    # any other entry is one Kueue merged from the admitted flavor's nodeLabels (docs/concepts/instances.md "Pinned to a node")
    assert selector.items() <= flavor["spec"]["nodeLabels"].items(), selector
    [workload] = [w for w in get(walk, "workloads.kueue.x-k8s.io", "-n", NS)["items"]
                  if any(o.get("name") == "pinned-demo" and o.get("kind") == "Pod"
                         for o in w["metadata"].get("ownerReferences") or [])]
    admission = workload["status"]["admission"]
    assert admission["clusterQueue"] == T4_POOL
    assert {f for a in admission["podSetAssignments"] for f in a["flavors"].values()} == {T4_4D}
    volumes = {v["name"]: {k: x for k, x in v.items() if k != "name"} for v in pod["spec"]["volumes"]}
    assert volumes == {
        "workspace": {"emptyDir": {"sizeLimit": "1Gi"}},
        "additional-0": {"persistentVolumeClaim": {"claimName": "datasets"}},
        "additional-1": {"configMap": {"name": "model-config", "defaultMode": 420}},   # 420: the API server's default
        "additional-2": {"hostPath": {"path": "/var/lib/gpustack-cache", "type": "DirectoryOrCreate"}}}
    main = next(c for c in pod["spec"]["containers"] if c["name"] == "main")
    assert main["volumeMounts"] == [
        {"name": "workspace", "mountPath": "/workspace"},
        {"name": "additional-0", "mountPath": "/mnt/datasets"},
        {"name": "additional-1", "mountPath": "/etc/model/config.json", "subPath": "config.json", "readOnly": True},
        {"name": "additional-2", "mountPath": "/mnt/host-cache", "readOnly": True}]
    assert main["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert all("volumeMounts" not in c for c in pod["spec"]["containers"] if c["name"] != "main")
    ledger = wait_until(lambda: get(walk, "devices", node),
                        lambda d: [a for g in (d.get("status") or {}).get("groups") or []
                                   for a in g["accelerators"] if a.get("allocated")],
                        "node-t4-b's ledger charging pinned-demo")
    charged = [a for g in ledger["status"]["groups"] for a in g["accelerators"] if a.get("allocated")]
    assert [(a["mode"], a["allocated"]) for a in charged] == [(1, 1600000)]   # one whole T4


def test_kind_pinned_demo_mounts_from_inside(walk):
    """Inside pinned-demo's container on node-t4-b's kind node: the ConfigMap key is a file with its
    content, the host path is read-only, the dataset volume is writable."""
    _kind_only(walk)

    def sh(script: str) -> subprocess.CompletedProcess:
        return walk.kubectl("-n", NS, "exec", "pinned-demo", "-c", "main", "--", "sh", "-c", script, check=False)
    config = sh("cat /etc/model/config.json")
    assert (config.returncode, config.stdout) == (0, '{"model": "demo"}'), config.stderr
    host = sh("touch /mnt/host-cache/probe")
    assert host.returncode != 0 and "Read-only file system" in host.stderr, (host.returncode, host.stderr)
    data = sh("echo written > /mnt/datasets/probe && cat /mnt/datasets/probe && rm /mnt/datasets/probe")
    assert (data.returncode, data.stdout) == (0, "written\n"), data.stderr
    workspace = sh("touch /workspace/probe && rm /workspace/probe")
    assert workspace.returncode == 0, workspace.stderr


UNBINDABLE = ('PersistentVolumeClaim "datasets-unbindable" is Pending and nothing binds it to the node a Pod is assigned: '
              'bind it to its PersistentVolume first (spec.volumeName), so the Pods can be placed where that volume is')


def test_troubleshooting_unbindable_claim(walk):
    """An InstancePersistentVolume whose StorageClass does not exist: its PVC stays Pending, nothing binds
    it, and a new Instance mounting it says why in status.phaseMessage (docs/concepts/instances.md "Persistent volumes")."""
    _needs_webhooks(walk)
    doc = next(d for d in yaml.safe_load_all((walk.manifests / "datasets.yaml").read_text())
               if d["kind"] == "InstancePersistentVolume")
    # its own claim (the walkthrough's datasets is bound), of a StorageClass no backend has
    doc["metadata"]["name"] = "datasets-unbindable"
    doc["spec"]["type"] = "accelpolicy-e2e-absent"
    assert not walk.kubectl.stdout("get", "storageclass", doc["spec"]["type"], "--ignore-not-found").strip()
    walk.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))
    wait_until(lambda: get(walk, "pvc", "datasets-unbindable", "-n", NS), bool,
               "PVC datasets-unbindable (docs/concepts/instances.md \"Persistent volumes\")",
               timeout=60)
    walk.sh("kubectl -n gpustack-system patch setting instance-persistent-volume-placement --type merge "
            "-p '{\"spec\":{\"value\":\"true\"}}'")
    # the controller has taken the Setting in (its status.value) before an Instance relies on it
    wait_until(lambda: get(walk, "setting", "instance-persistent-volume-placement", "-n", SYSTEM),
               lambda s: (s.get("status") or {}).get("value") == "true", "Setting status.value true")
    doc = yaml.safe_load((walk.manifests / "pinned-demo.yaml").read_text())
    doc["metadata"]["name"] = "claim-demo"
    # only the claim: the test stands alone (no host-path Setting, no ConfigMap from step 6)
    doc["spec"]["additionalVolumes"] = [{**v, "persistent": {"name": "datasets-unbindable"}}
                                        for v in doc["spec"]["additionalVolumes"] if "persistent" in v]
    walk.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))
    inst = wait_until(lambda: get(walk, "instance", "claim-demo", "-n", NS),
                      lambda i: (i.get("status") or {}).get("phaseMessage") == UNBINDABLE, "unbindable-claim phaseMessage")
    assert inst["status"]["phase"] == "Starting"


def test_troubleshooting_privileged_rejected(walk):
    _needs_webhooks(walk)
    out = walk.sh("kubectl apply -f privileged-demo.yaml", check=False)
    assert out.returncode != 0
    assert out.stderr == f'The Instance "privileged-demo" is invalid: {PRIVILEGED_DENIED}\n'
    assert get(walk, "instance", "privileged-demo", "-n", NS) == {}


# -- kind only (docs/tasks/e2e.md "The offline kind cluster"): real kubelets, PodResources, the chart's RBAC ---
def _kind_only(walk) -> None:
    if not getattr(walk, "kind_node", None):
        pytest.skip("kind backend only: real kubelets run the Instance Pods (--cluster=kind)")


def test_kind_instance_pods_run_in_containers_the_kubelet_started(walk):
    """custom-demo (Ready since step 5) has a Pod whose container the node's kubelet started in containerd,
    with the accelerator the kubelet allocated from the device-plugin stand-in in its environment."""
    _kind_only(walk)
    pod = get(walk, "pod", "custom-demo", "-n", NS)
    assert pod["status"]["phase"] == "Running"
    node = pod["spec"]["nodeName"]
    assert node == walk.node("node-a10g")
    [main] = [c for c in pod["status"]["containerStatuses"] if c["name"] == "main"]
    assert "running" in main["state"] and main["ready"] is True
    runtime, cid = main["containerID"].split("://", 1)
    assert runtime == "containerd"
    info = json.loads(subprocess.run(["docker", "exec", node, "ctr", "-n", "k8s.io", "containers", "info", cid],
                                     capture_output=True, text=True, check=True).stdout)
    assert info["Spec"]["process"]["args"] == ["sleep", "86400"]
    a10g_uuid = next(a["uuid"] for a in yaml.safe_load((RECORDED_FACTS / "node-a10g.yaml").read_text())["accelerators"])
    assert f"ACCELPOLICY_DEVICES_NVIDIA_COM_GPU={a10g_uuid}" in info["Spec"]["process"]["env"]


def test_kind_ledger_came_from_podresources(walk):
    """The agent runs with ``--allocation-source=podresources`` (the chart value the stack sets); the Pod's
    allocation annotation, which the agent writes from what the kubelet's PodResources API reports, names
    the A10G the kubelet allocated from the device-plugin stand-in (its recorded UUID: nothing else on
    kind knows which device a container got); and the a10g ledger charges custom-demo."""
    _kind_only(walk)
    from runtime.engine.policy import Policy
    from runtime.rules.loader import load_rules
    ds = get(walk, "daemonset", "gpustack-operator-device-manager", "-n", SYSTEM)
    args = ds["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--allocation-source=podresources" in args
    key = Policy(load_rules()).key("allocation")
    pod = wait_until(lambda: get(walk, "pod", "custom-demo", "-n", NS),
                     lambda p: key in (p["metadata"].get("annotations") or {}), "custom-demo's allocation annotation")
    a10g_uuid = next(a["uuid"] for a in yaml.safe_load((RECORDED_FACTS / "node-a10g.yaml").read_text())["accelerators"])
    [group] = json.loads(pod["metadata"]["annotations"][key])["main"]
    assert (group["id"], group["manufacturer"]) == ("a10g", "nvidia")
    assert [(a["id"], a["allocated"]) for a in group["accelerators"]] == [(a10g_uuid, 1600000)]
    ledger = wait_until(lambda: get(walk, "devices", walk.node("node-a10g")),
                        lambda d: d and d["status"]["groups"][0]["accelerators"][0].get("allocated"),
                        "the a10g ledger charging custom-demo")
    acc = ledger["status"]["groups"][0]["accelerators"][0]
    assert {k: acc.get(k) for k in ("mode", "allocated")} == {"mode": 1, "allocated": 1600000}   # a whole A10G: 1600k credits


def test_kind_background_audit_reports_the_instance_pods(walk):
    """The chart's controller runs the background audit (every 20 s here) and, with the chart's RBAC alone,
    applies an openreports.io Report for namespace default whose results name custom-demo's Pod, passed."""
    _kind_only(walk)

    def custom_demo_results(report):
        return [r for r in (report or {}).get("results") or []
                if any(o.get("kind") == "Pod" and o.get("name") == "custom-demo" for o in r.get("resources") or [])]
    report = wait_until(lambda: get(walk, "reports.openreports.io", "accelpolicy-audit", "-n", NS),
                        custom_demo_results, "the background audit's Report naming custom-demo", timeout=120)
    assert report["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "accelpolicy"
    assert {r["result"] for r in custom_demo_results(report)} == {"pass"}


def test_kind_controller_did_it_with_the_charts_rbac_alone(walk):
    """Every binding naming the controller's (and the agent's) ServiceAccount is the chart's own, none binds
    cluster-admin, and no controller or agent log line reports a refusal (forbidden / 403)."""
    _kind_only(walk)
    accounts = {("gpustack-system", "gpustack-controller"), ("gpustack-system", "gpustack-device-manager"),
                ("gpustack-system", "gpustack-admission")}
    bindings = get(walk, "clusterrolebindings")["items"] + get(walk, "rolebindings", "-A")["items"]
    ours = [b for b in bindings if any((s.get("namespace"), s.get("name")) in accounts
                                       for s in b.get("subjects") or [] if s.get("kind") == "ServiceAccount")]
    assert ours, "no binding names the chart's ServiceAccounts"
    for b in ours:
        meta = b["metadata"]
        assert (meta.get("annotations") or {}).get("meta.helm.sh/release-name") == "accelpolicy", meta["name"]
        assert b["roleRef"]["name"] != "cluster-admin", meta["name"]
    pods = get(walk, "pods", "-n", SYSTEM)["items"]
    assert {p["metadata"]["labels"].get("app.kubernetes.io/component") for p in pods} >= {"controller", "agent", "admission"}
    refusals = []
    for p in pods:
        assert p["spec"]["serviceAccountName"] in {name for _, name in accounts}
        if p["metadata"].get("deletionTimestamp"):
            continue   # a replica the step 5 rollout is removing
        log = walk.kubectl.stdout("-n", SYSTEM, "logs", p["metadata"]["name"], "--all-containers")
        refusals += [f"{p['metadata']['name']}: {line}" for line in log.splitlines()
                     if "forbidden" in line.lower() or " 403 " in line]
    assert refusals == []


# -- after the walkthrough: nothing loops (testing/steadystate.py; docs/reliability.md, "Steady state") -------
def test_steady_state_after_the_walkthrough(walk, record_step):
    """For ``$ACCELPOLICY_STEADY_SECONDS`` (300; CI 120): no Workload evicted, no Instance Pod replaced, no
    container restarted, the controller's idle passes write nothing, every Instance in a stated phase."""
    from testing.steadystate import observe
    state = observe(lambda *args: get(walk, *args))
    print(state.summary())
    record_step(f"steady state: {state.counts()}", state.seconds, table=False)
    assert state.steady, state.summary()


# -- after the walkthrough, kind only: one accelerator fails under a running Instance (docs/concepts/out-of-service.md)
OOS_CLEAN_SECONDS = 20


def _oos_configmap_key(walk, name: str, key: str, edit) -> str:
    """Replace ``key`` of ConfigMap ``name`` (gpustack-system) by ``edit(old text)``; returns the old text."""
    cm = get(walk, "configmap", name, "-n", SYSTEM)
    old = cm["data"][key]
    patch = {"data": {key: edit(old)}}
    walk.kubectl("-n", SYSTEM, "patch", "configmap", name, "--type=merge", "-p", json.dumps(patch))
    return old


def _oos_t4(walk) -> tuple[str, dict, dict]:
    """(the T4 row's EX capacity, the T4 ClusterQueue's quota per flavor, Kueue's usage per flavor)."""
    it = get(walk, "instancetype", T4_POOL).get("status") or {}
    queue = get(walk, "clusterqueue", T4_POOL)
    quota = {f["name"]: f["resources"][0]["nominalQuota"] for g in queue["spec"]["resourceGroups"] for f in g["flavors"]}
    usage = {f["name"]: r["total"] for f in (queue.get("status") or {}).get("flavorsUsage") or []
             for r in f.get("resources") or [] if r["name"].startswith("credits.")}
    return (it.get("accelerator") or {}).get("capacity", ""), quota, usage


def test_kind_a_failed_card_under_a_running_instance_moves_views_and_quota_only(walk):
    """Through the kind device-plugin stand-in and the chart's agent: an XID 79 on the T4 that the walkthrough's
    running pinned-demo holds on node-t4-b's kind node (its recorded facts in the agent's facts ConfigMap) leaves
    every ResourceFlavor, Kueue's usage of the 4d flavor and pinned-demo's Pod as they were, takes the T4 row's EX
    capacity 5 -> 4 and the 4d quota 6400k -> 4800k, is one AllocationConflict; read no more, it comes back after
    the clean period (20 s: the rules ConfigMap's health.yaml, which the agents reload live).

    pinned-demo is the running Instance: a kind node has this machine's cores, not the seed's, and a second T4
    Instance (800m CPU) fits node-t4-b's kind node on a 2-core machine only when no other Pod landed there."""
    _kind_only(walk)
    from runtime.engine.policy import Policy
    from runtime.rules.loader import load_rules
    key = Policy(load_rules()).key("allocation")
    node = walk.node("node-t4-b")
    pod = wait_until(lambda: get(walk, "pod", "pinned-demo", "-n", NS),
                     lambda p: p and key in (p["metadata"].get("annotations") or {})
                     and p["status"].get("phase") == "Running", "pinned-demo running with its allocation")
    assert pod["spec"]["nodeName"] == node
    held = [a["id"] for g in json.loads(pod["metadata"]["annotations"][key])["main"] for a in g["accelerators"]]
    facts_cm, facts_key = "gpustack-operator-device-manager-facts", f"{node}.yaml"
    facts = get(walk, "configmap", facts_cm, "-n", SYSTEM)["data"][facts_key]
    rules = _oos_configmap_key(walk, "accelpolicy-rules", "health.yaml",
                               lambda t: t.replace("cleanSeconds: 600", f"cleanSeconds: {OOS_CLEAN_SECONDS}"))
    try:
        flavors = sorted(walk.kubectl.stdout("get", "resourceflavors", "-o", "name").split())
        before = wait_until(lambda: _oos_t4(walk), lambda t: t[2].get(T4_4D) not in (None, "0"), "Kueue's usage")
        assert before[0] == "5" and before[1][T4_4D] == "6400k"

        def with_xid(text: str) -> str:
            doc = yaml.safe_load(text)
            next(a for a in doc["accelerators"] if a["uuid"] == held[0])["health"] = {"xids": [79]}
            return yaml.safe_dump(doc, sort_keys=False)
        _oos_configmap_key(walk, facts_cm, facts_key, with_xid)
        after = wait_until(lambda: _oos_t4(walk), lambda t: t[0] == "4" and t[1][T4_4D] == "4800k",
                           "EX capacity 4 and quota 4800k", timeout=TABLE_TIMEOUT * 2)
        assert after[2] == before[2]                                         # Kueue's usage of 4d unchanged
        assert sorted(walk.kubectl.stdout("get", "resourceflavors", "-o", "name").split()) == flavors
        conflicts = json.loads(walk.kubectl.stdout("get", "events", "-n", "default", "-o", "json", "--field-selector",
                                                   "reason=AllocationConflict"))["items"]
        mine = [e for e in conflicts if held[0] in e["message"]]
        assert len(mine) == 1 and mine[0].get("count", 1) == 1, mine
        _oos_configmap_key(walk, facts_cm, facts_key, lambda _: facts)      # the XID is read no more
        wait_until(lambda: _oos_t4(walk), lambda t: t[0] == "5" and t[1][T4_4D] == "6400k",
                   "capacity and quota back after the clean period", timeout=TABLE_TIMEOUT * 2)
        same = get(walk, "pod", "pinned-demo", "-n", NS)                   # the Instance runs on, not replaced
        assert (same["metadata"]["uid"], same["status"]["phase"]) == (pod["metadata"]["uid"], "Running")
    finally:
        _oos_configmap_key(walk, facts_cm, facts_key, lambda _: facts)
        _oos_configmap_key(walk, "accelpolicy-rules", "health.yaml", lambda _: rules)
