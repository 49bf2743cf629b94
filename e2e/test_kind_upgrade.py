"""Upgrades on kind (docs/tasks/e2e.md "The offline kind cluster", docs/install.md "Upgrade"): admission keeps answering, the CRDs are carried,
a rules edit reaches the agents without a restart.

Runs after the walkthrough (and the attacks) on the same ``--cluster=kind`` stack. A client submits an
Instance for admission every ``PERIOD`` seconds (``kubectl create --dry-run=server``: the API server calls
our defaulting and validating webhooks, and nothing is stored) while

1. **from chart 0.1.0**: the release is put back to what chart 0.1.0 (commit 030db97, packaged as
   ``e2e/fixtures/accelpolicy-0.1.0.tgz``) leaves: uninstalled, our CRDs set back to that chart's
   ``crds/`` (its spec, no Helm ownership, as Helm's ``crds/`` installs them), the old chart installed with
   the stack's values. With the walkthrough's Instances, Settings and a custom InstanceType present,
   ``helm upgrade --take-ownership`` to ``deploy/chart`` (docs/install.md "Upgrade"): afterwards the CRDs
   are the new chart's, every Instance, InstanceType, Setting and Devices is there with its spec and
   status, and no review failed during the upgrade;
2. **a rules edit through values** (``--set-file rules.override...``: the privileged-mode message of
   rules/admission/instances-validation.yaml with `` (upgraded rules)`` appended): the controller rolls
   (checksum/rules) and serves the new message, no agent Pod restarts (their UIDs unchanged) and each
   agent logs the new rules generation;
3. the leader Pod (holder of Lease ``gpustack-operator-worker``) is deleted: another replica takes the
   Lease, the Deployment replaces the Pod.

Every review must succeed (zero denied or failed), and each must show our defaulting webhook's work.
Leaves the cluster as the walkthrough left it (the custom InstanceType is deleted again), with the
rules edit in force.
"""
from __future__ import annotations

import json
import shutil
import tarfile
import threading
import time
from pathlib import Path

import pytest
import yaml

from testing.localcluster.walkthrough import MANIFESTS

NS, SYSTEM, LEASE = "default", "gpustack-system", "gpustack-operator-worker"
PERIOD = 0.3   # seconds between reviews
EDITED = 'privileged mode is not allowed: enable the "instance-privileged-allowed" setting to allow it'
OLD_CHART = Path(__file__).resolve().parent / "fixtures" / "accelpolicy-0.1.0.tgz"
OLD_COMMIT = "030db97"   # the commit chart 0.1.0 was packaged from (e2e/fixtures/README.md); its image runs it
RULES_CONFIGMAP = "accelpolicy-rules"    # the chart's rules ConfigMap, where the leader records each verdict
AGENT_RULES = "/etc/accelpolicy/rules"   # where the chart mounts it in every Pod (--rules)
OURS = ("instances.worker.gpustack.ai", "instancetypes.worker.gpustack.ai", "settings.gpustack.ai",
        "devices.worker.gpustack.ai", "instancepersistentvolumes.worker.gpustack.ai")


@pytest.fixture(scope="module")
def kind_stack(cluster):
    if cluster.stack is None:
        pytest.skip("kind backend only: helm upgrade of the chart (--cluster=kind)")
    return cluster


class ReviewClient:
    """Submits a dry-run Instance every PERIOD seconds from a thread; counts outcomes."""

    def __init__(self, cluster):
        self.cluster = cluster
        doc = yaml.safe_load((MANIFESTS / "sliced-demo.yaml").read_text())
        doc["metadata"]["name"] = "review-probe"
        self.doc = json.dumps(doc)
        self.ok = 0
        self.failures: list[str] = []
        self.undefaulted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            out = self.cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=self.doc,
                                       check=False)
            if out.returncode != 0:
                self.failures.append(f"{time.strftime('%H:%M:%S')} {out.stderr.strip()}")
            else:
                self.ok += 1
                # the defaulting webhook fills the Instance's defaults (docs/concepts/instances.md "Instances": e.g. imagePullPolicy)
                if "imagePullPolicy" not in json.loads(out.stdout)["spec"]:
                    self.undefaulted += 1
            self._stop.wait(PERIOD)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(60)


def lease_holder(cluster) -> str:
    lease = json.loads(cluster.kubectl.stdout("-n", SYSTEM, "get", "lease", LEASE, "-o", "json"))
    return lease["spec"].get("holderIdentity") or ""


def wait(what: str, check, timeout: float = 600):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        value = check()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"{what} not reached in {timeout:.0f}s")


def _items(cluster, resource: str) -> dict[tuple[str, str], dict]:
    """Every object of ``resource``: (namespace, name) -> {spec, status, finalizers}."""
    out = {}
    for obj in json.loads(cluster.kubectl.stdout("get", resource, "-A", "-o", "json"))["items"]:
        meta = obj["metadata"]
        out[(meta.get("namespace", ""), meta["name"])] = {"spec": obj.get("spec"), "status": obj.get("status"),
                                                          "finalizers": meta.get("finalizers")}
    return out


def _old_crds() -> list[dict]:
    """chart 0.1.0's crds/ (from the packaged fixture)."""
    with tarfile.open(OLD_CHART) as tar:
        return [doc for m in sorted(tar.getmembers(), key=lambda m: m.name)
                if m.isfile() and m.name.startswith("accelpolicy/crds/")
                for doc in yaml.safe_load_all(tar.extractfile(m).read().decode()) if doc]


def _as_chart_0_1_0_left_them(cluster) -> None:
    """Our CRDs as chart 0.1.0's crds/ made them: its spec, its metadata (no Helm labels or annotations).
    A merge patch (a CRD cannot be replaced without its resourceVersion)."""
    for crd in _old_crds():
        meta = crd["metadata"]
        cluster.kubectl("patch", "crd", meta["name"], "--type=merge", "-p", json.dumps(
            {"metadata": {"labels": meta.get("labels"), "annotations": meta.get("annotations")}, "spec": crd["spec"]}))


def _pods(cluster, component: str) -> dict[str, str]:
    """name -> uid of the component's Pods that are not being deleted."""
    items = json.loads(cluster.kubectl.stdout("-n", SYSTEM, "get", "pods", "-l", f"app.kubernetes.io/component={component}",
                                              "-o", "json"))["items"]
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in items if not p["metadata"].get("deletionTimestamp")}


def test_upgrade_from_chart_0_1_0_carries_the_crds_and_keeps_every_object(kind_stack, tmp_path, record_step):
    from kind.stack import RELEASE, helm_values, image_of_commit, load_images, run, tools
    from tests.deploy.test_chart import render
    cluster, stack = kind_stack, kind_stack.stack
    t = tools()
    helm = [t["helm"], "--kubeconfig", str(cluster.kubeconfig)]
    values = helm_values(stack.kind_node, stack.image)
    # chart 0.1.0 runs its own image: this tree's code would refuse the rules that chart ships
    t0 = time.monotonic()
    old_image = image_of_commit(OLD_COMMIT)
    load_images(t, stack.cluster, [*stack.kind_node.values(), *stack.dra_nodes], [old_image])
    record_step(f"chart 0.1.0's image {old_image} built and loaded", time.monotonic() - t0, table=False)
    # -- the cluster as chart 0.1.0 leaves it ------------------------------------------------------------
    t0 = time.monotonic()
    run(*helm, "uninstall", RELEASE, "-n", SYSTEM, "--wait", "--timeout", "5m", timeout=360)
    _as_chart_0_1_0_left_them(cluster)
    crd = json.loads(cluster.kubectl.stdout("get", "crd", "instances.worker.gpustack.ai", "-o", "json"))
    assert "meta.helm.sh/release-name" not in (crd["metadata"].get("annotations") or {})
    # chart 0.1.0 knows the real and fake backends only (the DRA workers are parked meanwhile)
    run(*helm, "install", RELEASE, str(OLD_CHART), "-n", SYSTEM,
        *helm_values(stack.kind_node, old_image, backend="fake"), timeout=300)
    cluster.kubectl("-n", SYSTEM, "rollout", "status", f"deploy/{LEASE}", "--timeout=600s", timeout=660)
    wait("chart 0.1.0's controller registering the webhooks",
         lambda: cluster.kubectl("get", "validatingwebhookconfiguration", "gpustack-worker-validation",
                                 check=False).returncode == 0)
    # registered is not yet answering: the configuration may be the uninstalled release's, not yet
    # collected with its owner, and the Service's endpoint may lag the Pod's readiness (CI once got
    # `connect: connection refused` here); a server-side dry run passes through the webhooks
    wait("chart 0.1.0's webhooks answering", lambda: cluster.kubectl(
        "apply", "--dry-run=server", "-f", str(MANIFESTS / "a10g-12c128g.yaml"), check=False).returncode == 0)
    record_step("uninstall + chart 0.1.0 installed (controller ready, webhooks registered)", time.monotonic() - t0,
                table=False)
    cluster.kubectl("apply", "-f", str(MANIFESTS / "a10g-12c128g.yaml"))   # a custom InstanceType (seed step 4)
    wait("the custom InstanceType's status", lambda: (json.loads(cluster.kubectl.stdout(
        "get", "instancetype", "a10g-12c128g", "-o", "json")).get("status") or {}).get("entrance"))
    time.sleep(5)   # one more reconcile pass: every status as it settles
    before = {resource: _items(cluster, resource) for resource in OURS}
    assert before["instances.worker.gpustack.ai"] and before["settings.gpustack.ai"]
    # -- the upgrade, as docs/install.md says for 0.1.0 ----------------------------------------------------
    with ReviewClient(cluster) as client:
        time.sleep(3)
        t0 = time.monotonic()
        # agent.maxUnavailable=100%: kind's four agents at once (the chart's 10 % rolls them one by one); this
        # measures admission during the controller's rollout, not the agents'
        run(*helm, "upgrade", RELEASE, str(Path(__file__).resolve().parents[1] / "deploy" / "chart"), "-n", SYSTEM,
            "--take-ownership", "--wait", "--timeout", "10m", *values, "--set", "agent.maxUnavailable=100%",
            timeout=720)
        seconds = time.monotonic() - t0
        time.sleep(3)
    record_step(f"helm upgrade from chart 0.1.0 -> rolled out; admission reviews {client.ok} ok / "
                f"{len(client.failures)} failed", seconds, table=False)
    print(f"\nupgrade from 0.1.0: {seconds:.0f}s, reviews {client.ok} ok, {len(client.failures)} failed")
    assert client.failures == [] and client.undefaulted == 0 and client.ok >= 20
    # the CRDs are the new chart's, Helm's now (and kept on uninstall)
    rendered = {d["metadata"]["name"]: d for d in render() if d["kind"] == "CustomResourceDefinition"}
    for name, new in rendered.items():
        live = json.loads(cluster.kubectl.stdout("get", "crd", name, "-o", "json"))
        assert live["spec"]["versions"] == new["spec"]["versions"] and live["spec"]["names"]["kind"] == \
            new["spec"]["names"]["kind"], name
        assert live["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        assert live["metadata"]["annotations"]["meta.helm.sh/release-name"] == RELEASE
    time.sleep(5)
    after = {resource: _items(cluster, resource) for resource in OURS}
    for resource in OURS:
        assert after[resource] == before[resource], resource
    # the webhook configurations are the release's now: owned by its ClusterRole
    owner = json.loads(cluster.kubectl.stdout("get", "clusterrole", LEASE, "-o", "json"))["metadata"]["uid"]
    wait("the configurations owned by the chart's ClusterRole", lambda: all(
        [r.get("uid") for r in json.loads(cluster.kubectl.stdout("get", kind, name, "-o", "json"))["metadata"]
         .get("ownerReferences") or []] == [owner]
        for kind, name in (("mutatingwebhookconfiguration", "gpustack-worker-mutation"),
                           ("validatingwebhookconfiguration", "gpustack-worker-validation"))), timeout=120)
    cluster.kubectl("delete", "instancetype", "a10g-12c128g", "--wait=true", timeout=180)


def _generation(rules: Path) -> str:
    """The id of the rules generation under ``rules``: its content hash, as every component names it (the mounted
    ConfigMap holds the same files: rules/ but tests/, under the same paths)."""
    from runtime.reload.watcher import content_hash, generation_id
    return generation_id(content_hash(rules))


def _in_force(generation: str) -> str:
    """What an agent logs once ``generation`` is its own, read from the chart's mount: the shipped
    rules/reload.yaml ``events.reloaded`` message up to its load time, which differs per agent."""
    from runtime.reload.report import reload_message
    from runtime.rules.loader import load_rules
    logged = reload_message(load_rules(), "reloaded", generation=generation, root=AGENT_RULES, seconds=0.0)
    return logged[:logged.index(" (loaded in ")]


def _agents_lacking(cluster, agents, line: str) -> list[str]:
    """The agent Pods (names) whose log does not hold ``line``."""
    return [pod for pod in agents if line not in cluster.kubectl.stdout("-n", SYSTEM, "logs", pod, check=False)]


def _reload_state(cluster, agents) -> str:
    """The rules ConfigMap's reload annotations and each agent's last rules lines (a failure's explanation)."""
    meta = json.loads(cluster.kubectl.stdout("-n", SYSTEM, "get", "configmap", RULES_CONFIGMAP, "-o", "json"))["metadata"]
    lines = [f"{k}: {v}" for k, v in sorted((meta.get("annotations") or {}).items()) if k.startswith("rules.")]
    for pod in agents:
        log = cluster.kubectl.stdout("-n", SYSTEM, "logs", pod, check=False).splitlines()
        lines += [f"{pod}: {line}" for line in [x for x in log if "rules generation" in x][-3:]]
    return "\n".join(lines)


def test_a_rules_edit_through_values_restarts_no_agent_and_keeps_admission_answering(kind_stack, tmp_path, record_step):
    from kind.stack import REPO, RELEASE, run, tools
    cluster = kind_stack
    t = tools()
    rule = (REPO / "rules" / "admission" / "instances-validation.yaml").read_text()
    assert rule.count(EDITED) == 1
    edited = tmp_path / "instances-validation.yaml"
    edited.write_text(rule.replace(EDITED, EDITED + " (upgraded rules)"))
    tree = tmp_path / "rules"   # the rules the ConfigMap holds after the upgrade: the shipped ones with the edit
    shutil.copytree(REPO / "rules", tree, ignore=shutil.ignore_patterns("tests"))
    (tree / "admission" / "instances-validation.yaml").write_text(edited.read_text())
    generation = _generation(tree)
    assert generation != _generation(REPO / "rules")
    agents = _pods(cluster, "agent")
    in_force = _in_force(generation)
    assert _agents_lacking(cluster, agents, in_force) == list(agents)   # not in force before
    controllers = set(_pods(cluster, "controller"))
    with ReviewClient(cluster) as client:
        time.sleep(3)
        t0 = time.monotonic()
        run(t["helm"], "--kubeconfig", str(cluster.kubeconfig), "upgrade", RELEASE, str(REPO / "deploy" / "chart"),
            "-n", SYSTEM, "--reuse-values", "--wait", "--timeout", "10m",
            "--set-file", f"rules.override.admission/instances-validation\\.yaml={edited}", timeout=720)
        record_step("helm upgrade (rules edit through values) -> controller rolled out", time.monotonic() - t0,
                    table=False)
        upgrade = (client.ok, len(client.failures))
        assert set(_pods(cluster, "controller")).isdisjoint(controllers)   # both replicas replaced (checksum/rules)
        # the agents: the same Pods, each reloading the mounted ConfigMap once the kubelet has synced it
        t0 = time.monotonic()
        try:
            wait(f"every agent logging {in_force!r}", lambda: not _agents_lacking(cluster, agents, in_force), timeout=300)
        except AssertionError as exc:
            raise AssertionError(f"{exc}:\n{_reload_state(cluster, agents)}") from None
        record_step("rules edit -> every agent on the new generation (same Pods)", time.monotonic() - t0, table=False)
        assert _pods(cluster, "agent") == agents   # no agent Pod restarted: same names and UIDs
        # the leader Pod deleted: another replica takes the Lease
        holder = wait("a leader after the upgrade", lambda: lease_holder(cluster))
        leader_pod = holder.split("_")[0]
        t0 = time.monotonic()
        cluster.kubectl("-n", SYSTEM, "delete", "pod", leader_pod, "--wait=false")
        new_holder = wait("another replica taking the Lease",
                          lambda: (h := lease_holder(cluster)) and not h.startswith(leader_pod) and h)
        record_step("leader Pod deleted -> Lease taken over", time.monotonic() - t0, table=False)
        cluster.kubectl("-n", SYSTEM, "rollout", "status", f"deploy/{LEASE}", "--timeout=600s", timeout=660)
        time.sleep(3)
    record_step(f"admission reviews: {upgrade[0]} ok / {upgrade[1]} failed during the rules-edit upgrade, "
                f"{client.ok} ok / {len(client.failures)} failed in all (leader {holder} -> {new_holder})", 0.0,
                table=False)
    print(f"\nadmission during the rules edit: {upgrade[0]} reviews ok, {upgrade[1]} failed; in all {client.ok} ok, "
          f"{len(client.failures)} failed; leader {holder} -> {new_holder}")
    assert client.failures == []
    assert client.undefaulted == 0
    assert client.ok >= 20
    privileged = yaml.safe_load((MANIFESTS / "privileged-demo.yaml").read_text())
    out = cluster.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(privileged), check=False)
    assert out.returncode != 0 and EDITED + " (upgraded rules)" in out.stderr, out.stderr
