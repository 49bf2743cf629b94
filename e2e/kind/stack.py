"""accelpolicy installed into an offline kind cluster the way a user installs it (docs/tasks/e2e.md "The offline kind cluster").

:func:`install_stack` takes a running cluster of e2e/kind (``kind-up.sh``: 1 control-plane + 3 workers)
and installs, with nothing pulled:

1. images into every node's containerd (``kind load docker-image``, through ``shim/docker``): the
   accelpolicy image of this checkout (``deploy/image/build.sh``, its content-hash tag), Kueue's and
   nfd-master's (``deploy/components/images.sh``), and the Instances' workload image: the seed's Instances
   name ``ubuntu:24.04``, which cannot be pulled here, so the offline Debian base the accelpolicy image is
   built on (it has ``sleep``) is tagged ``docker.io/library/ubuntu:24.04`` inside the nodes only;
2. Kueue and nfd-master from their own charts rendered with the local images (``deploy/components/render.py``),
   server-side applied, waited for; the openreports.io CRDs from their module (the background audit's
   Report/ClusterReport objects);
3. ``helm install`` of ``deploy/chart`` with the local image tag, the agent DaemonSet in fake mode with
   the recorded facts of the seed node each kind node stands in for (:data:`SEED_FOR`), allocations read
   from the kubelet's PodResources socket only (``agent.allocationSource=podresources``);
4. the device-plugin stand-in (``kind_deviceplugin``) on each accelerated node, registered with the real
   kubelet, so the kubelet allocates ``nvidia.com/gpu*`` to containers.

Node names: kind names its nodes (``<cluster>-control-plane``, ``-worker``, ``-worker2``, ...). The
control plane stands in for ``node-cpu`` (no accelerator), the workers in name order for ``node-a10g``,
``node-t4-a``, ``node-t4-b``; :attr:`Stack.kind_node` maps a seed name to the kind name.

The DRA worker (docs/concepts/dra.md "Accelerators from DRA drivers"): the cluster has one more worker, ``-worker4`` (kind-up.sh ``--dra-workers 1``),
whose accelerator the DRA driver stand-in publishes (e2e/test_kind_dra.py). It is parked right after the
cluster comes up, before anything is installed (draworker.park_node: kubelet stopped, Node deleted), so the
seed walkthrough sees the seed's four nodes only; the DRA suite makes it join and leave again. The chart's
one agent DaemonSet runs on every node with ``agent.backend: auto`` (:func:`helm_values`): the seed nodes
read their recorded facts, the DRA worker its ResourceSlices once the driver publishes them.

Errors: :class:`StackError` naming the step and the tool's output.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RELEASE = "accelpolicy"
SYSTEM_NAMESPACE = "gpustack-system"
#: kind node role/order -> the seed node it stands in for (shared/seed/README.md's four nodes).
SEED_ORDER = ("node-cpu", "node-a10g", "node-t4-a", "node-t4-b")
ACCELERATED = ("node-a10g", "node-t4-a", "node-t4-b")
#: The image the seed's Instances run (demo/*.yaml spec.image), as containerd names it.
WORKLOAD_IMAGE = "docker.io/library/ubuntu:24.04"
#: workers after the seed's three whose accelerators come from the DRA stand-in (kind-up.sh --dra-workers)
DRA_WORKERS = 1
#: the seed node whose CPU the DRA workers have (their recorded document: that CPU, no NVML accelerator)
DRA_HOST = "node-a10g"


class StackError(RuntimeError):
    """A step of the install failed; the message names it and carries the tool's output."""


def run(*args: str, timeout: float = 600, input: str | None = None, env: dict | None = None,
        check: bool = True) -> subprocess.CompletedProcess:
    """Run a command (text output captured); raise :class:`StackError` with its output when it fails."""
    try:
        proc = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, input=input,
                              env={**os.environ, **(env or {})}, cwd=REPO)
    except subprocess.TimeoutExpired:
        raise StackError(f"`{' '.join(args)}` did not finish in {timeout:.0f}s") from None
    if check and proc.returncode != 0:
        raise StackError(f"`{' '.join(args)}` exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return proc


def tools() -> dict[str, str]:
    """``{"kind": path, "kubectl": path, ...}`` of e2e/kind/build-tools.sh, plus ``helm`` (deploy/tools)."""
    out = dict(line.split(" ", 1) for line in run("bash", str(HERE / "build-tools.sh"), "--print").stdout.splitlines())
    out["helm"] = run("bash", str(REPO / "deploy/tools/build.sh"), "--print", "helm").stdout.strip()
    return out


def _split(nodes: list[str]) -> tuple[list[str], list[str]]:
    control = [n for n in nodes if n.endswith("-control-plane")]
    workers = sorted((n for n in nodes if n not in control), key=lambda n: (len(n), n))
    if len(control) != 1 or len(workers) not in (3, 3 + DRA_WORKERS):
        raise StackError(f"the seed walkthrough needs 1 control-plane + 3 workers (+ {DRA_WORKERS} DRA worker); "
                         f"nodes: {nodes}")
    return control, workers


def seed_mapping(nodes: list[str]) -> dict[str, str]:
    """Seed node name -> kind node name: the control plane is ``node-cpu``, the first three workers in name
    order the three accelerated nodes (a fourth is the DRA worker, :func:`dra_nodes`). Raises StackError when
    the cluster has not 1 control-plane + 3 workers (+ the DRA worker)."""
    control, workers = _split(nodes)
    return dict(zip(SEED_ORDER, control + workers[:3]))


def dra_nodes(nodes: list[str]) -> list[str]:
    """The DRA workers of the cluster: the workers after the seed's three, in name order (kind-up.sh makes
    them last). Raises StackError as :func:`seed_mapping`."""
    return _split(nodes)[1][3:]


@dataclass
class Stack:
    """What :func:`install_stack` installed: ``kind_node`` (seed name -> kind name), the accelpolicy
    ``image`` (repository:tag), the device-plugin stand-ins (one per accelerated node), figures."""

    cluster: str
    kubeconfig: Path
    kind_node: dict[str, str]
    image: str
    standins: dict[str, object] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    dra_nodes: list[str] = field(default_factory=list)   # parked until the DRA suite (module docstring)

    def stop(self) -> None:
        """Stop the device-plugin stand-ins (the cluster and the release stay)."""
        for standin in self.standins.values():
            standin.stop()
        self.standins = {}


def _timed(seconds: dict, label: str, fn, *args, **kw):
    t0 = time.monotonic()
    out = fn(*args, **kw)
    seconds[label] = round(time.monotonic() - t0, 1)
    return out


def accelpolicy_image() -> str:
    """Build (or find) this checkout's image; its ``accelpolicy:<version>-<content hash>`` tag."""
    return run("bash", "deploy/image/build.sh", timeout=1800).stdout.strip().splitlines()[-1]


def image_of_commit(commit: str) -> str:
    """The accelpolicy image as commit ``commit`` of this repository builds it (an older chart's own image:
    its code reads the rules that chart ships). Its tree from ``git archive`` into build/image-<commit>,
    built by that tree's own deploy/image/build.sh with this checkout's venv (the same Python and
    dependencies), named ``accelpolicy-<commit>`` so that this checkout's ``accelpolicy:<version>`` tag is
    never moved; its ``accelpolicy-<commit>:<version>-<content hash>`` tag."""
    src = REPO / "build" / f"image-{commit}"
    if not (src / "deploy" / "image" / "build.sh").exists():
        src.mkdir(parents=True, exist_ok=True)
        tree = subprocess.run(["git", "-C", str(REPO), "archive", commit], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(src)], input=tree, check=True)
    if not (src / ".venv").exists():
        (src / ".venv").symlink_to(REPO / ".venv")
    return run("bash", "-c", 'cd "$1" && bash deploy/image/build.sh', "build-image", str(src),
               env={"IMAGE_NAME": f"accelpolicy-{commit}"}, timeout=1800).stdout.strip().splitlines()[-1]


def components() -> Path:
    """Kueue's and nfd-master's images and rendered manifests (build/components); the directory."""
    run("bash", "deploy/components/images.sh", timeout=900)
    out = REPO / "build" / "components"
    run(str(REPO / ".venv/bin/python"), "deploy/components/render.py", str(out), timeout=600)
    return out


def containerd_ref(image: str) -> str:
    """How containerd names ``image`` (``ubuntu:24.04`` -> ``docker.io/library/ubuntu:24.04``)."""
    first = image.split("/", 1)[0]
    if "/" in image and ("." in first or ":" in first or first == "localhost"):
        return image
    return f"docker.io/{image}" if "/" in image else f"docker.io/library/{image}"


def load_images(t: dict, cluster: str, nodes: list[str], images: list[str]) -> list[str]:
    """``kind load docker-image`` of each image some node lacks (the shim first on PATH: kind's ``docker
    exec --privileged`` cannot run here); returns the images loaded."""
    present = [set(run("docker", "exec", n, "ctr", "-n", "k8s.io", "images", "ls", "-q").stdout.split()) for n in nodes]
    missing = [i for i in images if any(containerd_ref(i) not in p for p in present)]
    if missing:
        env = {"PATH": f"{HERE / 'shim'}{os.pathsep}{os.environ['PATH']}", "KIND_EXPERIMENTAL_PROVIDER": "docker"}
        run(t["kind"], "load", "docker-image", "--name", cluster, *missing, env=env, timeout=1800)
    return missing


def tag_workload_image(nodes: list[str], base: str) -> None:
    """Tag the loaded offline base as the seed Instances' ``ubuntu:24.04`` inside each node's containerd."""
    for node in nodes:
        run("docker", "exec", node, "ctr", "-n", "k8s.io", "images", "tag", "--force", containerd_ref(base),
            WORKLOAD_IMAGE)


def base_image_of(image: str) -> str:
    """The offline Debian base the accelpolicy image was built from (deploy/image/base.sh's tag)."""
    return run("bash", "deploy/image/base.sh").stdout.strip().splitlines()[-1]


def helm_values(kind_node: dict[str, str], image: str, extra: list[str] | None = None, *,
                backend: str = "auto") -> list[str]:
    """``helm install/upgrade`` arguments: the local image (never pulled), PodResources as the allocation
    source, and ONE agent DaemonSet on every node with ``backend`` (``auto``: the recorded facts of each
    seed node, and for each DRA worker a document with node-a10g's CPU and no NVML accelerator, until a
    DRA driver publishes slices for the node; docs/concepts/dra.md). ``backend="fake"`` for a chart
    that predates ``auto`` (0.1.0): the same documents, read as they are (the DRA workers are parked
    while such a chart is installed)."""
    repo, tag = image.rsplit(":", 1)
    args = ["--set", f"image.repository={repo}", "--set", f"image.tag={tag}", "--set", "image.pullPolicy=Never",
            "--set", f"agent.backend={backend}", "--set", "agent.allocationSource=podresources",
            "--set", "controller.auditInterval=20s"]   # the walkthrough sees a background audit within its steps
    for seed, node in kind_node.items():
        args += ["--set-file", f"agent.recordedFacts.{node}={kind_facts(seed, node)}"]
    for node in dra_workers_of(kind_node):
        args += ["--set-file", f"agent.recordedFacts.{node}={kind_facts(DRA_HOST, node, accelerators=False)}"]
    return args + list(extra or [])


def dra_workers_of(kind_node: dict[str, str]) -> list[str]:
    """The names kind gives the DRA workers (kind-up.sh makes them after the seed's three workers):
    ``<cluster>-worker4``, ... for :data:`DRA_WORKERS` of them."""
    prefix = kind_node["node-cpu"].removesuffix("-control-plane")
    return [f"{prefix}-worker{3 + i}" for i in range(1, DRA_WORKERS + 1)]


def kind_facts(seed: str, node: str, *, accelerators: bool = True) -> Path:
    """Seed node ``seed``'s recorded facts (probes/recorded/<seed>.yaml) as kind node ``node``'s: the
    document's ``node`` (which the agent checks against ``--node``) renamed, without its accelerators
    when ``accelerators`` is false (a DRA worker: its GPU comes from slices); written to build/kind-facts/."""
    import yaml
    doc = yaml.safe_load((REPO / "probes" / "recorded" / f"{seed}.yaml").read_text())
    doc["node"] = node
    if not accelerators:
        doc["accelerators"] = []
    out = REPO / "build" / "kind-facts" / f"{node}.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def helm(t: dict, kubeconfig: Path, verb: str, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """``helm <verb> accelpolicy deploy/chart -n gpustack-system ...`` against ``kubeconfig``."""
    return run(t["helm"], "--kubeconfig", str(kubeconfig), verb, RELEASE, str(REPO / "deploy" / "chart"),
               "-n", SYSTEM_NAMESPACE, *args, timeout=timeout)


def kubectl(t: dict, kubeconfig: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return run(t["kubectl"], "--kubeconfig", str(kubeconfig), *args, **kw)


def install_components(t: dict, kubeconfig: Path, manifests: Path) -> None:
    """Kueue and nfd-master: server-side apply of the rendered manifests, then every Deployment available."""
    for name, namespace in (("kueue.yaml", "kueue-system"), ("nfd.yaml", "node-feature-discovery")):
        kubectl(t, kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", str(manifests / name))
        kubectl(t, kubeconfig, "-n", namespace, "wait", "--for=condition=Available", "deployment", "--all",
                "--timeout=600s", timeout=660)


def install_report_crds(t: dict, kubeconfig: Path) -> None:
    """The Report and ClusterReport CRDs from their own module (reports-api), established before the chart's
    controller starts its background audit."""
    import yaml
    from testing.localcluster.crds import openreports_crds
    crds = openreports_crds()
    kubectl(t, kubeconfig, "apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(crds))
    kubectl(t, kubeconfig, "wait", "--for=condition=Established", "--timeout=60s",
            *(f"crd/{c['metadata']['name']}" for c in crds), timeout=90)


def start_standins(kind_node: dict[str, str]) -> dict[str, object]:
    """A device-plugin stand-in per accelerated node (its recorded facts), registered with its kubelet."""
    import sys
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))   # kind_deviceplugin is a top-level package of e2e/kind
    from kind_deviceplugin.kindnode import node_kubelet_dir, short_link
    from kind_deviceplugin.plugin import DevicePluginStandIn, advertised_devices
    from probes.fake import load_document
    from runtime.engine.policy import Policy
    from runtime.rules.loader import load_rules

    policy = Policy(load_rules())
    out = {}
    for seed in ACCELERATED:
        facts = REPO / "probes" / "recorded" / f"{seed}.yaml"
        devices = advertised_devices(policy, load_document(str(facts)), str(facts))
        standin = DevicePluginStandIn(short_link(node_kubelet_dir(kind_node[seed]) / "device-plugins"), devices)
        standin.start()
        out[seed] = standin
    return out


def install_stack(cluster: str, kubeconfig: Path, nodes: list[str]) -> Stack:
    """Install everything of the module docstring into kind cluster ``cluster``; a :class:`Stack`.

    Idempotent for a cluster already holding the release (``helm upgrade --install``). Raises StackError.
    """
    t = tools()
    kind_node = seed_mapping(nodes)
    seconds: dict[str, float] = {}
    image = _timed(seconds, "accelpolicy image", accelpolicy_image)
    manifests = _timed(seconds, "Kueue/NFD images and manifests", components)
    versions = dict(line.split()[:2] for line in (REPO / "e2e/components/versions.txt").read_text().splitlines()
                    if line.strip() and not line.startswith("#"))
    base = base_image_of(image)
    images = [image, base, f"accelpolicy.local/kueue:{versions['sigs.k8s.io/kueue']}",
              f"accelpolicy.local/node-feature-discovery:{versions['sigs.k8s.io/node-feature-discovery']}"]
    _timed(seconds, "kind load (images the nodes lack)", load_images, t, cluster, nodes, images)
    tag_workload_image(nodes, base)
    stack = Stack(cluster, kubeconfig, kind_node, image, seconds=seconds, dra_nodes=dra_nodes(nodes))
    if stack.dra_nodes:
        import sys
        if str(HERE) not in sys.path:
            sys.path.insert(0, str(HERE))   # draworker is a top-level module of e2e/kind
        from draworker import Kube, park_node
        for node in stack.dra_nodes:
            _timed(seconds, f"DRA worker {node} parked", park_node, Kube(t["kubectl"], kubeconfig), node)
    _timed(seconds, "Kueue and nfd-master available", install_components, t, kubeconfig, manifests)
    _timed(seconds, "openreports.io CRDs (the background audit's reports)", install_report_crds, t, kubeconfig)
    stack.standins = _timed(seconds, "device-plugin stand-ins registered", start_standins, kind_node)
    try:
        _timed(seconds, "helm install (--wait)", helm, t, kubeconfig, "upgrade", "--install", "--create-namespace",
               "--wait", "--timeout", "10m", *helm_values(kind_node, image), timeout=720)
    except BaseException:
        stack.stop()
        raise
    return stack


def kind_cluster_unavailable() -> str | None:
    """Why no kind cluster can be made here (a skip reason; CI turns it into a failure), else None:
    not root, the guarded docker daemon cannot start (dockerd.sh start), or the node image is not built."""
    if os.geteuid() != 0:
        return "kind: dockerd.sh needs root (sysctl, nftables, dockerd)"
    start = subprocess.run(["bash", str(HERE / "dockerd.sh"), "start"], capture_output=True, text=True, timeout=900)
    if start.returncode != 0:
        return f"kind: docker cannot be started here: {start.stderr.strip()[-400:]}"
    tag = run("bash", str(HERE / "node-image.sh"), "--print-tag").stdout.strip()
    if subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode != 0:
        return f"kind: node image {tag} is not built; run `make kind-images` (cold ~15-30 min)"
    return None


class PytestKindCluster:
    """pytest-kind's ``KindCluster`` over our kind (``pytest-kind-bin``: kind-up.sh / kind-down.sh behind the
    guard, our node image and network) and our kubectl; :meth:`nodes` lists kind's node names."""

    def __init__(self, name: str):
        from pytest_kind import KindCluster

        t = tools()
        cache = Path(os.environ.get("ACCELPOLICY_CACHE", Path.home() / ".cache" / "accelpolicy"))
        self.cluster = KindCluster(name, kubeconfig=cache / "kind" / "pytest-kind" / f"{name}.kubeconfig",
                                   image=run("bash", str(HERE / "node-image.sh"), "--print-tag").stdout.strip(),
                                   kind_path=HERE / "pytest-kind-bin", kubectl_path=Path(t["kubectl"]))
        self.cluster.kubeconfig_path.parent.mkdir(parents=True, exist_ok=True)

    @property
    def kubeconfig_path(self) -> Path:
        return Path(self.cluster.kubeconfig_path)

    def nodes(self) -> list[str]:
        return run(str(self.cluster.kind_path), "get", "nodes", "--name", self.cluster.name).stdout.split()

    def delete(self) -> None:
        self.cluster.delete()


def pytest_kind_cluster(name: str, *, reuse: bool = False) -> PytestKindCluster:
    """Create kind cluster ``name`` with pytest-kind (a leftover of that name is deleted first unless
    ``reuse``: the walkthrough starts from a fresh cluster). Raises StackError when kind-up.sh fails."""
    cluster = PytestKindCluster(name)
    if not reuse:
        cluster.delete()
    previous = os.environ.get("ACCELPOLICY_KIND_DRA_WORKERS")
    os.environ["ACCELPOLICY_KIND_DRA_WORKERS"] = str(DRA_WORKERS)   # read by pytest-kind-bin -> kind-up.sh
    try:
        cluster.cluster.create()
    except subprocess.CalledProcessError as e:
        raise StackError(f"kind create cluster {name} failed ({e.returncode}); see kind-up.sh's output above") from None
    finally:
        if previous is None:
            os.environ.pop("ACCELPOLICY_KIND_DRA_WORKERS", None)
        else:
            os.environ["ACCELPOLICY_KIND_DRA_WORKERS"] = previous
    return cluster
