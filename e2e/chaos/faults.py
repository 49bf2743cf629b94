"""The faults of the suite, injected into the offline kind cluster (docs/reliability.md "Reliability: the fault suite").

Each fault is a :class:`Fault`: a name, what the docs say it does, whether reviews are expected to fail
closed while it lasts, and ``inject(target)``, which applies the fault, returns once the fault itself is
over (the process killed and seen restarting, the API server answering again, the node started, the
labels back, helm returned) and hands back notes (:class:`Injected`). The suite measures around it.

The kind cluster's processes are reached the way an operator of a kind node reaches them: ``docker exec
<node> ctr -n k8s.io tasks kill|pause|resume <container>`` (containerd's own CLI, in every node; the
container ID comes from the Pod's ``status.containerStatuses``), ``docker stop|start <node>``, ``helm`` and
``kubectl``. Nothing leaves the machine: every address is the kind network's or 127.0.0.1, and
``docker start`` runs only after ``e2e/kind/dockerd.sh check`` passed (the network guard is a hard rule).

Faults (``FAULTS``, by name):

* ``sigkill-leader``: SIGKILL the controller replica holding the Lease;
* ``sigkill-all``: SIGKILL every controller and admission container at once (the documented outcome:
  reviews fail closed until a replica serves again);
* ``apiserver-restart``: SIGTERM kube-apiserver in the control-plane node (the static Pod's container);
  the kubelet starts it again;
* ``apiserver-pause``: freeze kube-apiserver's container for 30 s (``ctr tasks pause``), then thaw it;
* ``watch-expiry``: 410 Gone on every watch: kube-apiserver frozen, etcd's revision moved on (a key
  outside ``/registry`` written through etcd's own v3 JSON gateway) and compacted, kube-apiserver killed and
  started again: its watch cache starts above every resourceVersion a client holds, so every client watch
  that resumes gets ``410 Gone`` ("too old resource version") and relists;
* ``kill-agent``: SIGKILL the agent on the A10G node;
* ``stop-node``: ``docker stop`` of the worker that holds the controller's leader (else one holding a
  controller replica) for 60 s, then ``docker start``; its podCIDR routes put back as kind-up.sh made them;
* ``nfd-labels-vanish``: nfd-master stopped (scaled to 0), every feature label it put on the Nodes
  removed (what the nfd-master restarts of node-feature-discovery, upstream #1802 and #2408, do), 60 s, nfd-master started again;
* ``rules-edit``: the rules ConfigMap edited (the privileged-mode message gains a suffix), served, and
  edited back, under load;
* ``helm-upgrade``: ``helm upgrade`` to a new image tag (the same image, tagged and loaded), under load;
* ``helm-reinstall``: ``helm uninstall`` and ``helm install`` again with Instances running.
"""
from __future__ import annotations

import base64
import json
import re
import ssl
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

SYSTEM = "gpustack-system"
LEASE = "gpustack-operator-worker"
RELEASE = "accelpolicy"
NFD_NAMESPACE = "node-feature-discovery"
PRIVILEGED_KEY = "admission__instances-validation.yaml"   # the chart's flattened rules ConfigMap key
PRIVILEGED_TEXT = "privileged mode is not allowed"
RULES_EDIT_SUFFIX = " (chaos rules edit)"
# runtime/kube/cache.py's line when a watch answers 410 Gone
EXPIRED = re.compile(r"(\w+) watch expired \(410 Gone\): relisting")


class FaultError(RuntimeError):
    """A fault could not be injected or did not end; the message names the step."""


@dataclass
class Injected:
    """What :meth:`Fault.inject` reports: ``cleared`` (monotonic time the fault itself ended), the
    container restarts it caused on purpose (``kills``), ``nodes`` whose Pods' container restarts are the
    fault's too (a stopped node's containers start again with it), ``gap`` (wall-clock seconds from, to)
    in which answers of the classes ``excused`` are the fault's documented outcome (reported apart, not
    failures), ``gap_what`` naming it, and ``notes`` (name -> figure or text)."""

    cleared: float
    kills: int = 0
    notes: dict = field(default_factory=dict)
    nodes: tuple = ()
    gap: tuple | None = None
    excused: tuple = ()
    gap_what: str = ""


@dataclass
class Fault:
    name: str
    what: str
    inject: Callable[["Target"], Injected]
    fails_closed: bool = False     # reviews are expected to fail while it lasts (every replica down)
    short: bool = False            # part of the short CI form


def wait(what: str, check: Callable[[], object], timeout: float = 300.0, every: float = 0.5):
    """Poll ``check`` until truthy; its value. Raises FaultError naming ``what`` after ``timeout`` s."""
    t0 = time.monotonic()
    last = None
    while time.monotonic() - t0 < timeout:
        try:
            last = check()
        except Exception as exc:  # noqa: BLE001 - the cluster may be down while we wait
            last = exc
        else:
            if last:
                return last
        time.sleep(every)
    raise FaultError(f"{what}: not reached in {timeout:.0f}s (last: {str(last)[:500]})")


def sh(*argv: str, timeout: float = 120.0, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, input=input)
    if check and proc.returncode != 0:
        raise FaultError(f"`{' '.join(argv)}` exited {proc.returncode}: {proc.stderr.strip()[-1500:]}")
    return proc


class Target:
    """The kind cluster under test: ``kubeconfig``, the tools (``kubectl``, ``helm``, ``kind``), kind's node
    names (``kind_node``: seed name -> kind name), the chart's image and helm arguments, a Session."""

    def __init__(self, cluster: str, kubeconfig: Path, kind_node: dict[str, str], tools: dict[str, str],
                 helm_args: Callable[[str], list[str]], chart: Path, repo: Path):
        from runtime.kube.session import connect
        self.cluster, self.kubeconfig, self.kind_node, self.tools = cluster, Path(kubeconfig), dict(kind_node), tools
        self.helm_args, self.chart, self.repo = helm_args, chart, repo
        self.session = connect(self.kubeconfig)
        self.upgrades = 0

    # -- reading -------------------------------------------------------------------------------------
    def kubectl(self, *args: str, check: bool = True, timeout: float = 120.0, input: str | None = None):
        return sh(self.tools["kubectl"], f"--kubeconfig={self.kubeconfig}", *args, check=check, timeout=timeout,
                  input=input)

    def get(self, *args: str) -> dict:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def pods(self, namespace: str, selector: str) -> list[dict]:
        return self.get("pods", "-n", namespace, "-l", selector)["items"]

    def leader(self) -> str:
        """The Pod name holding the controller's Lease (identity = POD_NAME, chart)."""
        holder = self.get("lease", "-n", SYSTEM, LEASE)["spec"].get("holderIdentity") or ""
        return holder.split("_")[0]

    def lease_renewed_after(self, wall: float) -> str:
        """The Lease holder's Pod name once the Lease was renewed after wall-clock time ``wall``, else ""."""
        from datetime import datetime
        spec = self.get("lease", "-n", SYSTEM, LEASE)["spec"]
        renew = spec.get("renewTime") or ""
        if not renew or datetime.fromisoformat(renew.replace("Z", "+00:00")).timestamp() <= wall:
            return ""
        return (spec.get("holderIdentity") or "").split("_")[0]

    def controller_pods(self) -> list[dict]:
        """Every controller and admission Pod of the release (not the agents), not being deleted."""
        return [p for p in self.pods(SYSTEM, "app.kubernetes.io/name=accelpolicy,app.kubernetes.io/component!=agent")
                if not p["metadata"].get("deletionTimestamp")]

    @staticmethod
    def containers(pod: dict) -> list[tuple[str, str, int]]:
        """``(node, containerd id, restartCount)`` of each running container of ``pod``."""
        out = []
        for c in (pod.get("status") or {}).get("containerStatuses") or []:
            cid = (c.get("containerID") or "").split("://", 1)[-1]
            if cid and "running" in (c.get("state") or {}):
                out.append((pod["spec"]["nodeName"], cid, int(c.get("restartCount") or 0)))
        return out

    def control_plane(self) -> str:
        return self.kind_node["node-cpu"]

    def apiserver_container(self) -> str:
        """kube-apiserver's running containerd ID in the control-plane node: from its mirror Pod's status when
        the API answers and the ID is a running task there, else found by ``ctr`` (container labels)."""
        node = self.control_plane()
        running = set(self.ctr(node, "tasks", "ls").stdout.split())
        try:
            pod = self.get("pod", "-n", "kube-system", f"kube-apiserver-{node}")
            ids = [cid for _, cid, _ in self.containers(pod) if cid in running]
            if ids:
                return ids[0]
        except FaultError:
            pass
        for cid in self.ctr(node, "containers", "ls", "-q").stdout.split():
            if cid in running:
                info = json.loads(self.ctr(node, "containers", "info", cid).stdout)
                if (info.get("Labels") or {}).get("io.kubernetes.container.name") == "kube-apiserver":
                    return cid
        raise FaultError("no running kube-apiserver container in " + node)

    def api_answers(self) -> bool:
        """kube-apiserver's ``/readyz`` says ok, asked on a new connection (kubectl): a pooled connection to
        the killed server can keep failing its TLS handshake (SSLEOFError) after the new one answers."""
        try:
            out = self.kubectl("get", "--raw", "/readyz", check=False, timeout=5.0)
        except subprocess.TimeoutExpired:
            return False
        return out.returncode == 0 and out.stdout.strip() == "ok"

    # -- acting --------------------------------------------------------------------------------------
    def ctr(self, node: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return sh("docker", "exec", node, "ctr", "-n", "k8s.io", *args, check=check)

    def sigkill(self, pods: list[dict]) -> int:
        """SIGKILL every running container of ``pods`` at once; waits until the kubelet has seen each one
        restart (restartCount up) or the Pod replaced. Returns the containers killed."""
        targets = [(p["metadata"]["name"], *c) for p in pods for c in self.containers(p)]
        if not targets:
            raise FaultError(f"nothing to kill in {[p['metadata']['name'] for p in pods]}")
        procs = [subprocess.Popen(["docker", "exec", node, "ctr", "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", cid],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for _, node, cid, _ in targets]
        for p in procs:
            p.wait(60)
        before = {name: restarts for name, _, _, restarts in targets}

        def restarted():
            pods_now = {p["metadata"]["name"]: p for p in self.pods(SYSTEM, "app.kubernetes.io/name=accelpolicy")}
            for name, count in before.items():
                pod = pods_now.get(name)
                if pod is None:
                    continue   # replaced
                total = sum(int(c.get("restartCount") or 0) for c in (pod.get("status") or {}).get("containerStatuses") or [])
                if total <= count:
                    return False
            return True
        wait("the kubelet restarting the killed containers", restarted, timeout=120)
        return len(targets)

    def helm(self, *args: str, timeout: float = 900.0) -> subprocess.CompletedProcess:
        return sh(self.tools["helm"], "--kubeconfig", str(self.kubeconfig), *args, timeout=timeout)

    def current_image(self) -> str:
        deploy = self.get("deploy", "-n", SYSTEM, LEASE)
        return deploy["spec"]["template"]["spec"]["containers"][0]["image"]


# -- the faults -------------------------------------------------------------------------------------------
def sigkill_leader(t: Target) -> Injected:
    leader = wait("a Lease holder", t.leader)
    [pod] = [p for p in t.controller_pods() if p["metadata"]["name"] == leader]
    t0, wall = time.monotonic(), time.time()
    kills = t.sigkill([pod])
    new = wait("a replica renewing the Lease after the kill", lambda: t.lease_renewed_after(wall), timeout=180)
    return Injected(cleared=t0, kills=kills, notes={"leader": leader, "new leader": new,
                                                    "Lease renewed after (s)": round(time.monotonic() - t0, 1)})


def sigkill_all(t: Target) -> Injected:
    pods = t.controller_pods()
    t0 = time.monotonic()
    kills = t.sigkill(pods)
    return Injected(cleared=t0, kills=kills, notes={"pods": len(pods)})


def _apiserver_back(t: Target, t0: float, timeout: float = 300.0) -> float:
    wait("kube-apiserver answering /readyz", t.api_answers, timeout=timeout, every=0.25)
    return round(time.monotonic() - t0, 1)


def apiserver_restart(t: Target) -> Injected:
    cid = t.apiserver_container()
    t0 = time.monotonic()
    t.ctr(t.control_plane(), "tasks", "kill", "-s", "SIGTERM", cid)
    wait("kube-apiserver's container gone", lambda: cid not in t.ctr(t.control_plane(), "tasks", "ls").stdout,
         timeout=120)
    down = _apiserver_back(t, t0)
    return Injected(cleared=time.monotonic(), notes={"API down (s)": down})


def apiserver_pause(t: Target, seconds: float = 30.0) -> Injected:
    cid = t.apiserver_container()
    t0 = time.monotonic()
    t.ctr(t.control_plane(), "tasks", "pause", cid)
    try:
        time.sleep(seconds)
    finally:
        t.ctr(t.control_plane(), "tasks", "resume", cid)
    cleared = time.monotonic()
    back = _apiserver_back(t, cleared)
    return Injected(cleared=cleared, notes={"paused (s)": round(cleared - t0, 1), "API back after thaw (s)": back})


class Etcd:
    """etcd of the control-plane node through its v3 JSON gateway (https://<node ip>:2379), with the API
    server's etcd client certificate copied out of the node."""

    def __init__(self, node: str):
        import httpx
        self.dir = tempfile.TemporaryDirectory(prefix="chaos-etcd-")
        files = {}
        for name, path in (("ca", "/etc/kubernetes/pki/etcd/ca.crt"), ("cert", "/etc/kubernetes/pki/apiserver-etcd-client.crt"),
                           ("key", "/etc/kubernetes/pki/apiserver-etcd-client.key")):
            files[name] = Path(self.dir.name) / name
            files[name].write_text(sh("docker", "exec", node, "cat", path).stdout)
        ip = sh("docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", node).stdout.strip()
        self.url = f"https://{ip}:2379"
        tls = ssl.create_default_context(cafile=str(files["ca"]))   # etcd asks for the client certificate
        tls.load_cert_chain(str(files["cert"]), str(files["key"]))
        self.client = httpx.Client(verify=tls, timeout=10.0)

    def call(self, path: str, body: dict) -> dict:
        resp = self.client.post(self.url + path, json=body)
        resp.raise_for_status()
        return resp.json()

    def bump(self, key: str = "/chaos/revision-bump") -> int:
        """Write a key outside /registry (the API server never reads it); the new revision."""
        b64 = lambda s: base64.b64encode(s.encode()).decode()  # noqa: E731
        out = self.call("/v3/kv/put", {"key": b64(key), "value": b64(str(time.time()))})
        return int(out["header"]["revision"])

    def compact(self, revision: int) -> None:
        self.call("/v3/kv/compaction", {"revision": str(revision), "physical": True})

    def delete(self, key: str = "/chaos/revision-bump") -> None:
        self.call("/v3/kv/deleterange", {"key": base64.b64encode(key.encode()).decode()})

    def close(self) -> None:
        self.client.close()
        self.dir.cleanup()


def watch_expiry(t: Target) -> Injected:
    etcd = Etcd(t.control_plane())
    cid = t.apiserver_container()
    node = t.control_plane()
    t0 = time.monotonic()
    try:
        t.ctr(node, "tasks", "pause", cid)
        try:
            for _ in range(3):
                revision = etcd.bump()
            etcd.compact(revision)
            t.ctr(node, "tasks", "kill", "-s", "SIGKILL", cid)
        finally:
            t.ctr(node, "tasks", "resume", cid, check=False)   # a frozen task takes its SIGKILL once thawed
        wait("kube-apiserver's container gone", lambda: cid not in t.ctr(node, "tasks", "ls").stdout, timeout=120)
        down = _apiserver_back(t, t0)
        etcd.delete()
    finally:
        etcd.close()
    cleared = time.monotonic()
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - (cleared - t0) - 2))

    def relisted() -> dict[str, list[str]]:
        out = {}
        for pod in t.controller_pods():
            name = pod["metadata"]["name"]
            log = t.kubectl("-n", SYSTEM, "logs", name, f"--since-time={since}", check=False).stdout
            out[name] = sorted(set(EXPIRED.findall(log)))
        return out
    # every replica's caches resume their watches from resourceVersions older than the new watch cache
    kinds = wait("410 Gone relists in every replica's log", lambda: (r := relisted()) and all(r.values()) and r,
                 timeout=120, every=2.0)
    return Injected(cleared=cleared, notes={"etcd revision (compacted at)": revision, "API down (s)": down,
                                            "kinds relisted (410 Gone) per replica": {p: len(k) for p, k in kinds.items()},
                                            "kinds": sorted({k for v in kinds.values() for k in v})})


def kill_agent(t: Target) -> Injected:
    node = t.kind_node["node-a10g"]
    pods = [p for p in t.pods(SYSTEM, "app.kubernetes.io/name=accelpolicy,app.kubernetes.io/component=agent")
            if p["spec"].get("nodeName") == node]
    t0 = time.monotonic()
    kills = t.sigkill(pods)
    return Injected(cleared=t0, kills=kills, notes={"node": node})


def _node_network(t: Target) -> dict[str, tuple[str, str]]:
    """kind node -> (IP on the kind network, podCIDR)."""
    out = {}
    for n in t.kind_node.values():
        ip = sh("docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", n).stdout.strip()
        out[n] = (ip, t.get("node", n)["spec"]["podCIDR"])
    return out


def stop_node(t: Target, seconds: float = 60.0) -> Injected:
    leader = wait("a Lease holder", t.leader)
    pods = t.controller_pods()
    on = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods}
    workers = [n for s, n in t.kind_node.items() if s != "node-cpu"]
    node = on.get(leader) if on.get(leader) in workers else next((n for n in on.values() if n in workers), workers[-1])
    network = _node_network(t)
    t0, stop_from = time.monotonic(), time.time()
    sh("docker", "stop", node, timeout=120)
    stopped, stop_to = time.monotonic(), time.time() + 2.0
    time.sleep(max(0.0, seconds - (stopped - t0)))
    guard = sh("bash", str(t.repo / "e2e/kind/dockerd.sh"), "check", check=False)
    if guard.returncode != 0:
        raise FaultError(f"the network guard is incomplete; not starting {node}: {guard.stdout}{guard.stderr}")
    sh("docker", "start", node, timeout=120)
    cleared = time.monotonic()
    ip = sh("docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", node).stdout.strip()
    if ip != network[node][0]:
        raise FaultError(f"{node} came back with IP {ip}, not {network[node][0]}: the kubelet's node IP is stale")
    # kind-up.sh's routes to the other nodes' podCIDRs (not kept across a container restart)
    wait(f"{node}'s network up", lambda: sh("docker", "exec", node, "ip", "link", "show", "eth0", check=False).returncode == 0,
         timeout=60)
    for other, (oip, cidr) in network.items():
        if other != node:
            sh("docker", "exec", node, "ip", "route", "replace", cidr, "via", oip)
    wait(f"node {node} Ready", lambda: any(c["type"] == "Ready" and c["status"] == "True"
                                           for c in t.get("node", node)["status"]["conditions"]), timeout=300)
    # while the node goes down (docker stop: SIGTERM to its systemd, SIGKILL after 10 s) nothing takes its
    # Pods out of the Service, and the reviews in flight on its admission replica at the kill are lost: the
    # API server does not retry a webhook POST. Those (failed calls to our webhooks) are counted apart.
    return Injected(cleared=cleared, nodes=(node,), gap=(stop_from, stop_to), excused=("webhook-ours",),
                    gap_what="while the node went down",
                    notes={"node": node, "leader was": leader, "stopped (s)": round(cleared - t0, 1),
                           "docker stop (s)": round(stopped - t0, 1),
                           "node Ready after start (s)": round(time.monotonic() - cleared, 1)})


def nfd_labels_vanish(t: Target, seconds: float = 60.0) -> Injected:
    from runtime.engine.policy import Policy
    from runtime.rules.loader import load_rules
    prefixes = tuple(Policy(load_rules()).labels.propagatedPrefixes)
    deploys = [d["metadata"]["name"] for d in t.get("deploy", "-n", NFD_NAMESPACE)["items"] if "master" in d["metadata"]["name"]]
    if len(deploys) != 1:
        raise FaultError(f"nfd-master Deployment not found in {NFD_NAMESPACE}: {deploys}")
    [master] = deploys
    nodes = list(t.kind_node.values())
    before = {n: {k: v for k, v in t.get("node", n)["metadata"]["labels"].items() if k.startswith(prefixes)} for n in nodes}
    t0 = time.monotonic()
    t.kubectl("-n", NFD_NAMESPACE, "scale", "deploy", master, "--replicas=0")
    wait("nfd-master gone", lambda: not t.pods(NFD_NAMESPACE, "app.kubernetes.io/name=node-feature-discovery,role=master")
         and not [p for p in t.get("pods", "-n", NFD_NAMESPACE)["items"] if "master" in p["metadata"]["name"]], timeout=120)
    for n, labels in before.items():
        if labels:
            t.kubectl("label", "node", n, *[f"{k}-" for k in labels])
    vanished = time.monotonic()
    time.sleep(max(0.0, seconds - (vanished - t0)))
    t.kubectl("-n", NFD_NAMESPACE, "scale", "deploy", master, "--replicas=1")
    restarted = time.monotonic()

    def back():
        return all({k: v for k, v in t.get("node", n)["metadata"]["labels"].items() if k.startswith(prefixes)} == before[n]
                   for n in nodes)
    wait("every feature label back on its Node", back, timeout=300)
    return Injected(cleared=time.monotonic(), notes={
        "labels removed": sum(len(v) for v in before.values()), "labels gone (s)": round(time.monotonic() - vanished, 1),
        "labels back after nfd-master start (s)": round(time.monotonic() - restarted, 1)})


def _privileged_message(t: Target) -> str:
    """The message our webhook answers for a privileged Instance now (a dry-run create)."""
    doc = {"apiVersion": "worker.gpustack.ai/v1", "kind": "Instance",
           "metadata": {"name": "chaos-privileged-probe", "namespace": "default"},
           "spec": {"type": "gpustack--generic-linux-amd64", "image": "ubuntu:24.04", "privileged": True,
                    "volume": {"ephemeral": {"capacity": "1Gi"}}}}
    out = t.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(doc), check=False)
    return out.stderr.strip()


def rules_edit(t: Target) -> Injected:
    """Edit the privileged-mode message in the rules ConfigMap, wait until the webhook answers with it,
    edit it back, wait for the old one (kubelet's ConfigMap volume sync, then the controller's reload)."""
    cm = t.get("configmap", "-n", SYSTEM, "accelpolicy-rules")
    text = cm["data"][PRIVILEGED_KEY]
    line = next(ln for ln in text.splitlines() if PRIVILEGED_TEXT in ln and "message" in ln)
    quote = line.rstrip()[-1]
    edited_line = line.rstrip()[:-1] + RULES_EDIT_SUFFIX + quote
    before = _privileged_message(t)
    t0 = time.monotonic()

    def put(body: str) -> None:
        patch = {"data": {PRIVILEGED_KEY: body}}
        t.kubectl("-n", SYSTEM, "patch", "configmap", "accelpolicy-rules", "--type=merge", "-p", json.dumps(patch))
    put(text.replace(line, edited_line))
    wait("the edited message served", lambda: RULES_EDIT_SUFFIX in _privileged_message(t), timeout=240, every=1.0)
    served = round(time.monotonic() - t0, 1)
    t1 = time.monotonic()
    put(text)
    wait("the original message served again", lambda: RULES_EDIT_SUFFIX not in _privileged_message(t)
         and PRIVILEGED_TEXT in _privileged_message(t), timeout=240, every=1.0)
    return Injected(cleared=time.monotonic(), notes={"edit served after (s)": served,
                                                     "revert served after (s)": round(time.monotonic() - t1, 1),
                                                     "message before": before[-120:]})


def helm_upgrade(t: Target) -> Injected:
    from kind.stack import containerd_ref
    base = t.current_image()
    repo, tag = base.rsplit(":", 1)
    t.upgrades += 1
    stem = tag.split("-chaos", 1)[0]
    new = f"{repo}:{stem}-chaos{t.upgrades}"
    # the same image under a new tag in every node's containerd (what `kind load` of a re-tagged copy would
    # leave there, without copying 400 MB into each node)
    for node in t.kind_node.values():
        t.ctr(node, "images", "tag", "--force", containerd_ref(base), containerd_ref(new))
    t0 = time.monotonic()
    t.helm("upgrade", RELEASE, str(t.chart), "-n", SYSTEM, "--wait", "--timeout", "10m", *t.helm_args(new))
    return Injected(cleared=time.monotonic(), notes={"image": new.rsplit(":", 1)[1],
                                                     "helm upgrade --wait (s)": round(time.monotonic() - t0, 1)})


def webhook_configurations() -> tuple[tuple[str, str], ...]:
    """``(kubectl kind, name)`` of the two webhook configurations, as the rules name them
    (rules/admission/registration.yaml)."""
    from runtime.engine.admission.registration import registration_of
    from runtime.engine.policy import Policy
    from runtime.rules.loader import load_rules
    names = registration_of(Policy(load_rules())).configurations
    return (("mutatingwebhookconfiguration", names.mutating), ("validatingwebhookconfiguration", names.validating))


def _registered_at(t: Target, configurations: tuple[tuple[str, str], ...]) -> float | None:
    """By when the later of ``configurations`` was created (wall-clock s: the end of the second its
    creationTimestamp names, which has whole seconds), or None while one is missing."""
    from datetime import datetime
    created = []
    for kind, name in configurations:
        out = t.kubectl("get", kind, name, "-o", "jsonpath={.metadata.creationTimestamp}", check=False)
        if out.returncode != 0 or not out.stdout.strip():
            return None
        created.append(datetime.fromisoformat(out.stdout.strip().replace("Z", "+00:00")).timestamp() + 1.0)
    return max(created)


def helm_reinstall(t: Target) -> Injected:
    """The gap in which nothing reviews by design runs from the uninstall's start (its Service goes first;
    the garbage collector removes the webhook configurations with their owner ClusterRole a moment later:
    docs/install.md) until both configurations are registered again."""
    image, configurations = t.current_image(), webhook_configurations()
    gap_from, t0 = time.time(), time.monotonic()
    t.helm("uninstall", RELEASE, "-n", SYSTEM, "--wait", "--timeout", "5m")
    gone = round(time.monotonic() - t0, 1)
    t1 = time.monotonic()
    t.helm("install", RELEASE, str(t.chart), "-n", SYSTEM, "--wait", "--timeout", "10m", *t.helm_args(image))
    installed = round(time.monotonic() - t1, 1)
    gap_to = wait("both webhook configurations registered again", lambda: _registered_at(t, configurations), timeout=180)
    if gap_to - 1.0 <= gap_from:
        raise FaultError(f"the webhook configurations were not re-created by the reinstall (created {gap_to:.0f}, "
                         f"uninstall began {gap_from:.0f})")
    return Injected(cleared=time.monotonic(), gap=(gap_from, gap_to), excused=("webhook-ours", "unreviewed"),
                    gap_what="in the uninstall gap",
                    notes={"helm uninstall --wait (s)": gone, "helm install --wait (s)": installed,
                           "no webhook registered (s)": round(gap_to - gap_from, 1)})


FAULTS: dict[str, Fault] = {f.name: f for f in (
    Fault("sigkill-leader", "SIGKILL the controller replica holding the Lease", sigkill_leader, short=True),
    Fault("sigkill-all", "SIGKILL every controller and admission container at once", sigkill_all, fails_closed=True),
    Fault("apiserver-restart", "kube-apiserver (static Pod) SIGTERM; the kubelet starts it again", apiserver_restart),
    Fault("apiserver-pause", "kube-apiserver frozen 30 s (ctr tasks pause/resume)", apiserver_pause),
    Fault("watch-expiry", "410 Gone on every watch: etcd revision moved on and compacted under a frozen, then "
          "killed kube-apiserver", watch_expiry),
    Fault("kill-agent", "SIGKILL the agent on the A10G node", kill_agent, short=True),
    Fault("stop-node", "docker stop of the leader's worker node for 60 s, then docker start", stop_node),
    Fault("nfd-labels-vanish", "nfd-master stopped, every feature label removed from the Nodes for 60 s, "
          "nfd-master started", nfd_labels_vanish),
    Fault("rules-edit", "the rules ConfigMap edited and edited back under load", rules_edit),
    Fault("helm-upgrade", "helm upgrade to a new image tag under load", helm_upgrade),
    Fault("helm-reinstall", "helm uninstall, then helm install, Instances running", helm_reinstall),
)}
