"""The kind walkthrough with a DRA node (docs/tasks/e2e.md "The offline kind cluster"): an A10G published by a DRA driver joins the
device-plugin A10G's pool, serves an Instance through the derived DeviceClass, and leaves again.

Runs on the ``--cluster=kind`` stack after the seed walkthrough (and the attack suite), on the cluster's
DRA worker (e2e/kind/stack.py ``dra_nodes``: the fourth worker, parked since the cluster came up: no
kubelet, no Node object, so nothing of the walkthrough saw it). Here:

1. **join**: its kubelet starts (the Node registers again) and two DaemonSets start their Pods there,
   as on a new node of a mixed cluster: the DRA driver stand-in (e2e/kind/kind_draplugin, driver
   ``gpu.nvidia.com``), which publishes its A10G (kind_draplugin/nodes/node-a10g-dra.yaml) as a
   ResourceSlice, and the chart's one agent DaemonSet, ``agent.backend: auto`` on every node
   (stack.helm_values): on the seed nodes it reads their recorded facts, on this node the slice once
   the driver publishes it (its recorded document holds node-a10g's CPU and no accelerator, so the node
   groups with node-a10g). No device plugin runs there. The A10G pools gain one exclusive accelerator
   (EX +1), their SH/SL/PT are unchanged (a DRA accelerator offers the exclusive view only, docs/concepts/dra.md "Views per manufacturer"); no ResourceFlavor is added (same CPU, same count);
2. ``kubectl get deviceclasses`` lists the class the controller derived (docs/concepts/dra.md "The ledger from claims"), and
   ``accelpolicy explain instancetype`` on a snapshot of the live cluster names the DRA node and its
   source;
3. **an Instance of the A10G type**, pinned to the DRA node (``spec.nodeName``, seed step 6: the Pod gets
   a hostname nodeSelector and still queues through Kueue), lands there: its Pod asks ``nvidia.com/gpu: 1`` and gets it through the derived DeviceClass (the
   scheduler's ResourceClaim, allocated to the mock device, prepared by the stand-in); the agent
   charges the ledger from that claim (mode 1, 1600k credits; the Pod's allocation annotation names
   the GPU) and the pools' EX remaining drops by one;
4. the Instance deleted: the claim is unprepared and deleted, the ledger and EX remaining come back;
5. **leave**: the stand-in removed, the kubelet stopped and the Node deleted (its Pods, the chart
   agent's among them, are deleted; the garbage collector removes its NodeFeatures, Devices and
   ResourceSlices, owned by the Node): every table is the one this suite started from, for the suites
   after it.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import yaml

from testing.localcluster.walkthrough import table_rows

NS, SYSTEM = "default", "gpustack-system"
TIMEOUT = 300.0                      # seconds: the machine is shared and slow; never a timing assertion
DRA_UUID = "GPU-5b2f7c1e-8a3d-4e6b-b1f0-2d9c4a7e6f13"   # e2e/kind/kind_draplugin/nodes/node-a10g-dra.yaml
A10G_GROUP = "nvidia-a10g"          # the accelerator key of the A10G pools (seed step 1)
INSTANCE = "dra-demo"
EX = "ACCELERATOR(EX/SH/SL/PT)"


# -- helpers ------------------------------------------------------------------------------------------------
def wait_until(what: str, fetch, timeout: float = TIMEOUT, interval: float = 0.5, fail=None):
    """``fetch()``'s first true value within ``timeout`` seconds; else AssertionError naming ``what`` with
    the last value, or ``fail(last)`` (the evidence that says why) when given."""
    t0, value = time.monotonic(), None
    while time.monotonic() - t0 < timeout:
        value = fetch()
        if value:
            return value
        time.sleep(interval)
    last = fail(value) if fail else json.dumps(value, default=str)[:3000]
    raise AssertionError(f"{what} not reached in {timeout:.0f}s; last: {last}")


def ours(labels: dict) -> dict:
    """The accelerator and CPU labels the agent publishes through its NodeFeature, without the per-node
    counts (``.cores``, ``.count``)."""
    return {k: v for k, v in labels.items() if k.startswith(("acceleratable.", "general."))
            and not k.endswith((".cores", ".count"))}


def node_meta(dra, node: str) -> dict:
    """Node ``node``'s metadata, {} while it cannot be read."""
    return dra.get("node", node).get("metadata") or {}


def nfd_evidence(dra) -> str:
    """Why a Node lacks its NodeFeature's labels: the node's NodeFeatures (their labels), its nfd
    annotations and nfd-master's last log lines."""
    from runtime.engine.policy import Policy
    from runtime.rules.loader import load_rules
    from testing.localcluster.components import NFD_NAMESPACE
    node_key = Policy(load_rules()).key("nodeFeatureNode")   # rules/labels.yaml
    features = dra.get("nodefeatures.nfd.k8s-sigs.io", "-A", "-l", f"{node_key}={dra.node}")
    annotations = node_meta(dra, dra.node).get("annotations") or {}
    log = dra.kubectl("-n", NFD_NAMESPACE, "logs", "deploy/node-feature-discovery-master", "--tail=40", check=False)
    named = [(f["metadata"]["name"], sorted(f["spec"].get("labels") or {})) for f in features.get("items", [])]
    return (f"NodeFeatures: {named}\nnfd annotations: { {k: v for k, v in annotations.items() if 'nfd' in k} }"
            f"\nnfd-master log:\n{log.stdout[-3000:]}{log.stderr[-500:]}")


def rows(table: str) -> list[dict[str, str]]:
    """The table's rows without AGE and CPU (each kind kubelet reports this machine's cores)."""
    return table_rows(table, ignore=("AGE", "CPU"))[1]


def shift_ex(table_rows_: list[dict[str, str]], delta: int) -> list[dict[str, str]]:
    """The A10G rows' EX view (``onceMaxRequest/remaining``) with one more (delta=+1) or one fewer
    exclusive accelerator free on a node of one A10G; every other cell as given."""
    out = []
    for row in table_rows_:
        row = dict(row)
        if A10G_GROUP in row["NAME"] or row["NAME"] == "a10g-12c128g":
            ex, *rest = row[EX].split()
            once, remaining = (int(v) for v in ex.split("/"))
            remaining += delta
            once = 1 if remaining > 0 else 0      # one A10G per node: at most one at once
            row[EX] = " ".join([f"{once}/{remaining}", *rest])
        out.append(row)
    return out


class DraRun:
    """What the suite shares: the cluster, its kubectl, the DRA node, the tables before it joined, and the
    step table of the run (step, expected, seen) printed at the end."""

    def __init__(self, cluster, node: str):
        from kind.draworker import Kube
        from kind.stack import tools
        self.cluster, self.node, self.t = cluster, node, tools()
        self.kube = Kube(self.t["kubectl"], cluster.kubeconfig)
        self.kubectl = cluster.kubectl
        self.steps: list[tuple[str, str, str]] = []
        self.before: dict[str, str] = {}              # kubectl get <kind> before the join
        self.status_before: dict[str, dict] = {}      # InstanceType name -> status before the join
        self.joined = ""                               # kubectl get instancetypes once joined
        self.device_class = self.claim = self.slice = ""

    def get(self, *args: str) -> dict:
        out = self.kubectl("get", *args, "-o", "json", check=False)
        return json.loads(out.stdout) if out.returncode == 0 and out.stdout.strip() else {}

    def table(self, kind: str) -> str:
        return self.kubectl.stdout("get", kind)

    def step(self, name: str, expected: str, seen: str) -> None:
        self.steps.append((name, expected, seen))

    def wait_rows(self, kind: str, want: list[dict], what: str, *, as_set: bool = False) -> float:
        t0, last = time.monotonic(), ""
        key = (lambda r: sorted(r.items())) if as_set else None  # noqa: E731
        while time.monotonic() - t0 < TIMEOUT:
            last = self.table(kind)
            got = rows(last)
            if (sorted(got, key=key) == sorted(want, key=key)) if as_set else got == want:
                return time.monotonic() - t0
            time.sleep(0.5)
        raise AssertionError(f"{what}: `kubectl get {kind}` not reached in {TIMEOUT:.0f}s\n--- expected rows\n"
                             + "\n".join(map(str, want)) + f"\n--- last seen\n{last}")


@pytest.fixture(scope="module")
def dra(request, record_step):
    if request.config.getoption("--cluster") != "kind":   # before the session cluster is asked for
        pytest.skip("kind backend only: a DRA driver on a real kubelet (--cluster=kind)")
    cluster = request.getfixturevalue("cluster")
    if not cluster.stack.dra_nodes:
        pytest.fail("the kind stack has no DRA worker (stack.DRA_WORKERS; kind-up.sh --dra-workers)")
    from kind.draworker import leave_node, stop_driver
    run = DraRun(cluster, cluster.stack.dra_nodes[0])
    yield run
    # leave, whatever happened: the suites after this one get the walkthrough's end state
    run.kubectl("-n", NS, "delete", "instance", INSTANCE, "--ignore-not-found", check=False)
    stop_driver(run.kube, run.node)
    leave_node(run.kube, run.node)
    # the run's table in the session's summary (e2e/conftest.py), passed or not: written from a fixture's
    # teardown, a line of the terminal reporter would be captured and shown only on a failure
    for step, expected, seen in run.steps:
        record_step(f"dra: {step} | expected {expected} | seen {seen}", 0.0, table=False)


# -- 0: the cluster as the walkthrough left it; the gates ---------------------------------------------------
def test_dra_node_is_parked_and_the_gates_are_on(dra):
    nodes = [n["metadata"]["name"] for n in dra.get("nodes")["items"]]
    assert dra.node not in nodes and len(nodes) == 4, nodes
    for kind in ("instancetypes", "resourceflavor", "devices", "deviceclasses"):
        dra.before[kind] = dra.table(kind)
    dra.status_before = {it["metadata"]["name"]: it.get("status") or {} for it in dra.get("instancetypes")["items"]}
    assert dra.node not in dra.before["devices"]
    # Kubernetes v1.37.2 (pkg/features/kube_features.go): DynamicResourceAllocation and DRAExtendedResource
    # are GA and locked on, resource.k8s.io/v1 is served by default: nothing to enable in the node image
    metrics = dra.kubectl.stdout("get", "--raw", "/metrics")
    for gate in ("DynamicResourceAllocation", "DRAExtendedResource"):
        line = next(l for l in metrics.splitlines() if l.startswith("kubernetes_feature_enabled{")
                    and f'name="{gate}"' in l)
        # a GA gate's stage label is empty (component-base/featuregate: only ALPHA, BETA, DEPRECATED are named)
        assert ('stage=""' in line or 'stage="GA"' in line) and line.endswith(" 1"), line
    assert "resource.k8s.io/v1" in dra.kubectl.stdout("api-versions").split()
    dra.step("gates", "DynamicResourceAllocation, DRAExtendedResource GA and on; resource.k8s.io/v1 served",
             "as expected (kube-apiserver /metrics kubernetes_feature_enabled)")


# -- 1: join -------------------------------------------------------------------------------------------------
AGENT = "gpustack-operator-device-manager"   # the chart's agent DaemonSet


def agent_pod(dra, node: str) -> dict:
    """The chart agent's Pod on ``node`` (not being deleted), or {}."""
    pods = dra.get("pods", "-n", SYSTEM, "-l", "app.kubernetes.io/component=agent",
                   f"--field-selector=spec.nodeName={node}").get("items", [])
    return next((p for p in pods if not p["metadata"].get("deletionTimestamp")), {})


def agent_log(dra, pod: dict) -> str:
    return dra.kubectl("-n", SYSTEM, "logs", pod["metadata"]["name"], "-c", "agent", check=False).stdout


def test_dra_node_joins_the_a10g_pool(dra):
    from kind.draworker import deploy_driver, driver_image, join_node, wait_driver
    from kind.stack import run
    image = driver_image()
    env = {"PATH": f"{Path(__file__).parent / 'kind' / 'shim'}:{os.environ['PATH']}",
           "KIND_EXPERIMENTAL_PROVIDER": "docker"}
    run(dra.t["kind"], "load", "docker-image", "--name", dra.cluster.stack.cluster, "--nodes", dra.node, image,
        env=env, timeout=900)
    t0 = time.monotonic()
    deploy_driver(dra.kube, dra.node, image)   # its Pod starts with the node, beside the chart agent's
    join_node(dra.kube, dra.node)
    node = dra.get("node", dra.node)
    assert not any(k.startswith("nvidia.com/") for k in node["status"]["allocatable"])   # no device plugin
    [slice_] = wait_driver(dra.kube, dra.node)
    assert (slice_["spec"]["driver"], slice_["spec"]["pool"]["name"]) == ("gpu.nvidia.com", dra.node)
    dra.slice = slice_["metadata"]["name"]
    dra.step("join", "Node registers Ready, no nvidia.com/* allocatable; 1 ResourceSlice (gpu.nvidia.com, gpu-0)",
             f"Ready; slice {slice_['metadata']['name']} devices {[d['name'] for d in slice_['spec']['devices']]}")

    # the chart's one agent DaemonSet (auto on every node) runs there too and reads the slice
    pod = wait_until(f"the chart agent's Pod on {dra.node}", lambda: agent_pod(dra, dra.node))
    [owner] = pod["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("DaemonSet", AGENT)
    assert [a for a in pod["spec"]["containers"][0]["args"] if a.startswith("--backend")] == ["--backend=auto"]
    wait_until(f"Devices {dra.node} written by the chart's agent", lambda: dra.get("devices", dra.node))
    switched = f"backend auto: gpu.nvidia.com publish(es) slices for node {dra.node}: reading them (backend dra)"
    log = wait_until("the agent's switch to the slices", lambda: (text := agent_log(dra, pod)) and switched in text
                     and text)
    fallback = f"backend auto: recorded facts /etc/accelpolicy/facts/{dra.node}.yaml for node {dra.node} until"
    assert fallback in log
    seed_a10g = dra.cluster.stack.kind_node["node-a10g"]
    seed_log = agent_log(dra, agent_pod(dra, seed_a10g))
    assert f"backend auto: recorded facts /etc/accelpolicy/facts/{seed_a10g}.yaml for node {seed_a10g} until" \
        in seed_log
    assert "reading them (backend dra)" not in seed_log
    dra.step("agent", f"the chart's DaemonSet (--backend=auto) on {dra.node}: recorded CPU until the slice, then "
             f"dra; on {seed_a10g}: its recorded facts", f"{pod['metadata']['name']}: '{switched}'; "
             f"{seed_a10g}: recorded facts, never dra")
    want = shift_ex(rows(dra.before["instancetypes"]), +1)
    seconds = dra.wait_rows("instancetypes", want, "the DRA A10G in the A10G pools (EX +1)")
    joined = dra.table("instancetypes")
    dra.joined = joined
    a10g = {r["NAME"]: r[EX] for r in rows(joined) if A10G_GROUP in r["NAME"]}
    dra.step("pool", "A10G rows EX +1 (onceMax/remaining), SH/SL/PT unchanged, other rows unchanged",
             f"{a10g} {time.monotonic() - t0:.0f}s after the kubelet start ({seconds:.0f}s after Devices)")
    # no new flavor: the DRA node's (CPU group, 1 x A10G) flavor is node-a10g's
    dra.wait_rows("resourceflavor", rows(dra.before["resourceflavor"]), "the same ResourceFlavors", as_set=True)
    for name in a10g:   # the objects behind the rows: EX capacity +1, the other views as they were
        status, before = dra.get("instancetype", name)["status"], dra.status_before[name]
        assert int(status["accelerator"]["capacity"]) == int(before["accelerator"]["capacity"]) + 1, (name, status)
        for view in ("acceleratorShared", "acceleratorSliced", "acceleratorPartitioned"):
            assert status[view] == before[view], (name, view, status[view], before[view])
    [group] = dra.get("devices", dra.node)["status"]["groups"]
    assert group["id"] == "a10g" and [a["id"] for a in group["accelerators"]] == [DRA_UUID]
    # same GPU and CPU labels as node-a10g, .cores aside (docs/concepts/dra.md "Views per manufacturer"). The
    # agent writes them into its NodeFeature; nfd-master copies them onto the Node on its own time (its
    # node-update queue, retried with backoff), so the pool rows above may come first: wait for the Node
    t1 = time.monotonic()
    seed = ours(node_meta(dra, dra.cluster.stack.kind_node["node-a10g"])["labels"])

    def labelled() -> dict | None:
        labels = node_meta(dra, dra.node).get("labels") or {}
        return labels if ours(labels) == seed else None
    labels = wait_until(f"Node {dra.node} labelled by nfd-master as node-a10g", labelled, fail=lambda _: (
        f"Node labels (ours): {ours(node_meta(dra, dra.node).get('labels') or {})}\nnode-a10g's: {seed}\n"
        + nfd_evidence(dra)))
    assert f"acceleratable.feature.gpustack.ai/{A10G_GROUP}.cores" not in labels
    dra.step("labels", "node-a10g's accelerator and CPU labels, no .cores",
             f"equal {time.monotonic() - t1:.0f}s after the pool's checks")


# -- 2: DeviceClasses and explain -----------------------------------------------------------------------------
def test_derived_device_class_and_explain(dra, tmp_path):
    classes = dra.get("deviceclasses")["items"]
    ours = [c for c in classes if c["spec"].get("extendedResourceName") == "nvidia.com/gpu"]
    assert len(ours) == 1, classes
    [cls] = ours
    # beside the classes of the shipped AMD and Intel rows (rules/dra-amd.yaml, rules/dra-intel.yaml)
    assert [r["NAME"] for r in table_rows(dra.table("deviceclasses"))[1]] == sorted(c["metadata"]["name"] for c in classes)
    assert cls["metadata"]["name"] in [r["NAME"] for r in table_rows(dra.table("deviceclasses"))[1]]
    assert cls["spec"]["selectors"] == [{"cel": {"expression":
                                                 'device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "gpu"'}}]
    dra.device_class = cls["metadata"]["name"]
    dra.step("deviceclasses", "one derived class, extendedResourceName nvidia.com/gpu, CEL type == gpu",
             f"{cls['metadata']['name']}")

    snapshot = tmp_path / "cluster.yaml"
    kinds = "nodes,nodefeatures.nfd.k8s-sigs.io,devices.worker.gpustack.ai,resourceslices.resource.k8s.io," \
            "instancetypes.worker.gpustack.ai,resourceflavors.kueue.x-k8s.io,clusterqueues.kueue.x-k8s.io,pods," \
            "resourceclaims.resource.k8s.io,settings.gpustack.ai"
    snapshot.write_text(dra.kubectl.stdout("get", kinds, "-A", "-o", "yaml", timeout=180))
    from kind.stack import REPO, run
    explain = [str(REPO / ".venv/bin/accelpolicy"), "explain", "instancetype", "gpustack--nvidia-a10g-linux-amd64",
               "--snapshot", str(snapshot)]
    out = run(*explain).stdout
    a10g = dra.cluster.stack.kind_node["node-a10g"]
    sources = out.split("accelerators from:\n", 1)[1].splitlines()
    assert f"  {dra.node}: ResourceSlices of gpu.nvidia.com ({dra.slice}): 1 whole accelerator(s), offering the " \
           "exclusive view only (see docs/concepts/dra.md)" in sources, out
    assert f"  {a10g}: NVML through the agent (NodeFeature {a10g}-gpustack-device-manager): a device-plugin node, " \
           "every view offered" in sources, out
    info = json.loads(run(*explain, "-o", "json").stdout)
    assert dra.node in info["nodes"] and a10g in info["nodes"]
    assert {n: info["sources"][n]["source"] for n in (dra.node, a10g)} == {dra.node: "dra", a10g: "plugin"}
    dra.step("explain", f"{dra.node} in the pool, source dra (its slice); {a10g} source plugin",
             " / ".join(line.strip() for line in sources if dra.node in line or a10g in line)[:300])


# -- 3: an Instance lands on the DRA node ---------------------------------------------------------------------
def test_instance_gets_the_dra_gpu_and_the_ledger_charges_it(dra):
    from kind.draworker import prepared_claims
    from runtime.engine.policy import Policy
    from runtime.rules.loader import load_rules
    doc = yaml.safe_load((Path(__file__).parents[1] / "demo" / "custom-demo.yaml").read_text())
    doc["metadata"]["name"] = INSTANCE
    doc["spec"]["type"] = "gpustack--nvidia-a10g-linux-amd64"
    doc["spec"]["nodeName"] = dra.node   # the pin (seed step 6): a nodeSelector, the scheduler still places it
    dra.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))
    wait_until(f"Instance {INSTANCE} Ready", lambda: (dra.get("instance", INSTANCE, "-n", NS).get("status") or {})
               .get("phase") == "Ready")
    pod = dra.get("pod", INSTANCE, "-n", NS)
    assert pod["spec"]["nodeName"] == dra.node
    [main] = [c for c in pod["spec"]["containers"] if c["name"] == "main"]
    assert main["resources"]["limits"]["nvidia.com/gpu"] == "1"
    # nothing else a DRA node lacks: no other extended resource in any container (the SSH sidecar's
    # device.gpustack.ai/<m>.visibility would be one: this Instance has no sshPublicKey)
    extended = {(c["name"], k) for c in pod["spec"]["containers"] + pod["spec"].get("initContainers", [])
                for part in ("limits", "requests") for k in (c.get("resources") or {}).get(part, {})
                if k not in ("cpu", "memory", "ephemeral-storage")}
    assert extended == {("main", "nvidia.com/gpu")}, extended
    status = pod["status"]["extendedResourceClaimStatus"]
    claim = dra.get("resourceclaim", status["resourceClaimName"], "-n", NS)
    [request] = claim["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == dra.device_class
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"], result["device"]) == ("gpu.nvidia.com", dra.node, "gpu-0")
    assert [r["name"] for r in claim["status"]["reservedFor"]] == [INSTANCE]
    record = prepared_claims(dra.node)[claim["metadata"]["uid"]]
    assert [(d["device"], d["uuid"]) for d in record["devices"]] == [("gpu-0", DRA_UUID)]
    dra.claim = claim["metadata"]["name"]
    dra.step("instance", f"Pod on {dra.node}, claim allocated gpu.nvidia.com/{dra.node}/gpu-0 via the derived "
             "class, prepared by the stand-in", f"{pod['spec']['nodeName']}, {claim['metadata']['name']} -> "
             f"{result['device']} ({request['exactly']['deviceClassName']}), prepared")

    key = Policy(load_rules()).key("allocation")
    pod = wait_until("the allocation annotation", lambda: (p := dra.get("pod", INSTANCE, "-n", NS))
                     and key in (p["metadata"].get("annotations") or {}) and p)
    [group] = json.loads(pod["metadata"]["annotations"][key])["main"]
    assert [(a["id"], a["allocated"]) for a in group["accelerators"]] == [(DRA_UUID, 1600000)]
    ledger = wait_until(f"the {dra.node} ledger charging {INSTANCE}", lambda: (d := dra.get("devices", dra.node))
                        and d["status"]["groups"][0]["accelerators"][0].get("allocated") and d)
    acc = ledger["status"]["groups"][0]["accelerators"][0]
    assert {k: acc.get(k) for k in ("id", "mode", "allocated")} == {"id": DRA_UUID, "mode": 1, "allocated": 1600000}
    dra.wait_rows("instancetypes", rows(dra.before["instancetypes"]), "EX remaining down by one (as before the join)")
    dra.step("ledger", "Devices mode 1 allocated 1600000 (from the claim); annotation names the DRA GPU; "
             "A10G EX back to the pre-join values", f"mode {acc['mode']} allocated {acc['allocated']}; tables equal")


# -- 4: the Instance deleted ----------------------------------------------------------------------------------
def test_deleting_the_instance_frees_the_dra_gpu(dra):
    from kind.draworker import prepared_claims
    dra.kubectl("-n", NS, "delete", "instance", INSTANCE, "--wait=true", "--timeout=180s", timeout=240)
    wait_until("the extended-resource claim deleted", lambda: not dra.get("resourceclaim", dra.claim, "-n", NS))
    wait_until("the stand-in to unprepare the claim", lambda: prepared_claims(dra.node) == {})
    dra.wait_rows("instancetypes", rows(dra.joined), "EX remaining back up by one")
    acc = dra.get("devices", dra.node)["status"]["groups"][0]["accelerators"][0]
    assert not acc.get("allocated")
    dra.step("delete", "claim deleted and unprepared, ledger 0, EX +1 again", "as expected")


# -- 5: leave --------------------------------------------------------------------------------------------------
def test_dra_node_leaves_and_the_tables_are_the_walkthroughs(dra):
    from kind.draworker import leave_node, node_slices, stop_driver
    stop_driver(dra.kube, dra.node)
    leave_node(dra.kube, dra.node)
    wait_until(f"the chart agent's Pod on {dra.node} deleted with the Node", lambda: not agent_pod(dra, dra.node))
    dra.wait_rows("instancetypes", rows(dra.before["instancetypes"]), "the walkthrough's table")
    dra.wait_rows("devices", rows(dra.before["devices"]), "the walkthrough's Devices", as_set=True)
    dra.wait_rows("resourceflavor", rows(dra.before["resourceflavor"]), "the walkthrough's flavors", as_set=True)
    assert node_slices(dra.kube, dra.node) == []
    assert not dra.get("nodefeatures.nfd.k8s-sigs.io", f"{dra.node}-gpustack-worker", "-n", SYSTEM)
    dra.step("leave", "Node deleted; its agent Pod, Devices, NodeFeatures and slices gone; instancetypes, devices, "
             "resourceflavor tables = before the join", "as expected")
