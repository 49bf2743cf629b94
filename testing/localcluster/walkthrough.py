"""The seed walkthrough's cluster around our controller, on a local control plane.

Used by ``e2e/test_walkthrough.py`` and the live ``accelpolicy demo``. Given a running API server
(ideally :class:`~testing.localcluster.LocalCluster` with kube-scheduler, kwok, nfd-master and
Kueue, see :func:`start_local_cluster`), :class:`Walkthrough` builds what the seed's captured
cluster had (shared/seed/README.md):

1. the four seed Nodes ``node-cpu``, ``node-a10g``, ``node-t4-a``, ``node-t4-b`` as kwok fake Nodes
   (annotation ``kwok.x-k8s.io/node: fake``) with the base labels (os, arch, hostname) and the
   capacity of :data:`SEED_NODES`;
2. the agent per node (``accelpolicy agent --node N --backend fake --facts probes/recorded/N.yaml``,
   docs/agent.md): ``--once`` on ``node-cpu``, which has no accelerator and so no ledger to keep;
   its loop (``--allocation-source annotation``) on each accelerator node, whose first pass is the
   same run and whose later passes rebuild the ledger when Pods change. They write NodeFeatures,
   CPU annotations, capacity keys and Devices; nfd-master copies the NodeFeature labels onto the Nodes;
3. the chart's layout as processes: the admission webhooks served by ``accelpolicy
   admission`` (its own watch caches, a self-signed CA, a fixed loopback port; started first and kept
   through controller restarts, as the chart's admission Deployment is through a rollout of the
   controller's), and the controller as a subprocess (``accelpolicy controller``) running as the
   ServiceAccount the rules name as the controller (controller.yaml ``controllerServiceAccount``, bound to
   cluster-admin) with ``--webhook-registration-only``: its leader registers the webhooks for the
   admission process; it seeds the settings Secret with its defaults, derives the pools and reconciles
   Instances;
4. the device-plugin stand-in (:mod:`testing.localcluster.deviceplugin`) advertising accelerator
   tokens and writing allocation annotations on bound Pods, from which the agents' loops rebuild the
   ledger. Pods go Running through kwok.

The seed's ``kubectl`` lines run as written (:meth:`Walkthrough.sh`, bash with ``KUBECONFIG`` and
kubectl on ``PATH``, in :data:`MANIFESTS` so ``-f sliced-demo.yaml`` finds the file), except
``rollout restart deploy/gpustack-operator-worker``, which restarts the controller subprocess
(:meth:`Walkthrough.restart_controller`): there is no Deployment on a local control plane.

Node memory and ephemeral storage are not in the seed; :data:`SEED_NODES` picks sizes of the
cloud machines the seed's CPU/accelerator shapes match, large enough for every seed Instance.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from .binaries import LocalClusterError, repo_root
from .cluster import CONTROLLER_MANAGER_CONTROLLERS, LocalCluster, _tail
from .components import fake_node
from .processes import ChildProcess, free_port
from .kubectl import Kubectl, find_kubectl
from .testing import parse_table, service_account_kubeconfig

#: The seed's kubectl manifests (seed steps 3, 4, 6), named as the seed's ``kubectl apply -f`` lines name them.
MANIFESTS = repo_root() / "demo"
RECORDED_FACTS = repo_root() / "probes" / "recorded"
#: The Deployment the seed's step 5 restarts (docs/architecture.md "Which package holds what"): here, the controller subprocess.
CONTROLLER_DEPLOYMENT = "deploy/gpustack-operator-worker"
SYSTEM_NAMESPACE = "gpustack-system"


#: The seed's own console lines (walkthrough-seed.txt), verbatim; the demo and the e2e tests run them.
UNMANAGE = ("kubectl -n gpustack-system patch nodefeature node-a10g-gpustack-worker "
            "--type=merge -p '{\"spec\":{\"labels\":{\"gpustack.ai/managed\":\"false\"}}}'")
READMIT = ("kubectl -n gpustack-system patch nodefeature node-a10g-gpustack-worker "
           "--type=merge -p '{\"spec\":{\"labels\":{\"gpustack.ai/managed\":\"true\"}}}'")
AWARE = ("kubectl -n gpustack-system patch secret gpustack-settings --type=merge "
         "-p '{\"data\":{\"instance-type-aware-cpu-manufacturer\":\"'\"$(printf true | base64)\"'\"}}'")
RESTART = "kubectl -n gpustack-system rollout restart deploy/gpustack-operator-worker"
REPOINT = ("kubectl -n default patch instance custom-demo --type=merge "
           "-p '{\"spec\":{\"type\":\"gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64\",\"stop\":false}}'")
#: The seed's Settings table / troubleshooting row, applied to instance-host-path-volume-allowed (step 6).
ALLOW_HOST_PATH = ("kubectl -n gpustack-system patch setting instance-host-path-volume-allowed "
                   "--type merge -p '{\"spec\":{\"value\":\"true\"}}'")


@dataclass(frozen=True)
class SeedNode:
    """One seed node: name, ``status.capacity`` cpu (cores), memory and ephemeral-storage, and
    whether it carries accelerators (then the agent's loop and the device-plugin stand-in serve it)."""

    name: str
    cpu: str
    memory: str
    storage: str
    accelerated: bool

    @property
    def facts(self) -> Path:
        """The recorded NVML/CPU facts the agent's fake backend replays (probes/recorded/<name>.yaml)."""
        return RECORDED_FACTS / f"{self.name}.yaml"


#: shared/seed/README.md's four nodes. Memory/storage: not in the seed (AWS m6a.4xlarge-,
#: g5-, g4dn.xlarge- and g4dn.12xlarge-like sizes).
SEED_NODES = (
    SeedNode("node-cpu", "16", "64Gi", "200Gi", False),
    SeedNode("node-a10g", "4", "64Gi", "250Gi", True),
    SeedNode("node-t4-a", "4", "16Gi", "125Gi", True),
    SeedNode("node-t4-b", "48", "192Gi", "900Gi", True),
)
BASE_LABELS = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}


def seed_node_objects() -> list[dict]:
    """The four Nodes as kwok fake Nodes (base labels, capacity), before any agent ran."""
    return [fake_node(n.name, BASE_LABELS, {"cpu": n.cpu, "memory": n.memory, "ephemeral-storage": n.storage})
            for n in SEED_NODES]


def accelpolicy_argv() -> list[str]:
    """How to run this checkout's ``accelpolicy`` command: the console script beside this Python,
    else ``python -c 'from runtime.cli import main; main()'``."""
    script = Path(sys.executable).parent / "accelpolicy"
    if os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-c", "from runtime.cli import main; main()"]


def controller_serves_webhooks() -> bool:
    """Whether this checkout's ``accelpolicy controller`` has ``--webhook-port``."""
    from runtime.cli.controller import command
    return any("--webhook-port" in p.opts for p in command.params)


#: The walkthrough's kube-controller-manager controllers: the default ones and the PersistentVolume binder, so
#: that seed step 6's dataset claim binds to its PersistentVolume (demo/datasets.yaml).
WALKTHROUGH_CONTROLLERS = CONTROLLER_MANAGER_CONTROLLERS + ("persistentvolume-binder-controller",)


def start_local_cluster(policy, *, components: Sequence[str] = ("kwok", "nfd-master", "kueue"),
                        workdir: Path | None = None) -> tuple[LocalCluster, Kubectl]:
    """Start a LocalCluster with kube-scheduler, kube-controller-manager and ``components`` (Kueue configured by
    ``runtime.engine.pools.kueueconfig.kueue_configuration(policy)``, docs/concepts/pools-and-flavors.md "Kueue's resource charging"), install every
    CRD; returns ``(cluster, kubectl)``. Raises :class:`MissingBinariesError` / :class:`LocalClusterError`."""
    from runtime.engine.pools.kueueconfig import kueue_configuration

    from .testing import with_crds
    kueue = kueue_configuration(policy) if "kueue" in components else None
    return with_crds(LocalCluster(scheduler=True, controller_manager=True, components=tuple(components),
                                  kueue_configuration=kueue, workdir=workdir, controllers=WALKTHROUGH_CONTROLLERS).start())


class Walkthrough:
    """The seed cluster around our controller on the API server of ``kubeconfig`` (module docstring).

    Parameters: ``kubeconfig`` (admin), ``workdir`` for logs (a temporary directory removed by
    :meth:`stop` when not given), ``rules_dir`` (default the repository's rules) and ``policy``
    (loaded from ``rules_dir`` when not given), ``webhooks``
    (``None``: serve them when the controller can), ``progress`` (called with one line per slow
    part), ``agent_interval`` (seconds between the agents' unconditional passes; they also react to
    watched changes), ``coalesce_seconds`` (the controller's event window), ``facts_dir`` (where the agents'
    recorded facts ``<node>.yaml`` are read, default probes/recorded/: a copy lets a test change a node's
    facts, which its agent reads again when the file changes).

    After :meth:`start`: :attr:`kubectl`, :attr:`plugin` (the device-plugin stand-in),
    :attr:`webhooks` (bool). :meth:`stop` ends every process and thread it started, also after a
    failed start. Errors: :class:`LocalClusterError` naming the step and the tail of its log.
    """

    #: ``rollout restart deploy/gpustack-operator-worker`` restarts the controller subprocess (no Deployment).
    simulated_rollout = True
    #: Whether the Nodes carry the seed's ``status.capacity.cpu`` (kwok Nodes made with it: yes; real
    #: kubelets report the machine's cores, so table cells derived from it cannot be the seed's).
    seed_cpu_capacity = True

    def __init__(self, kubeconfig: Path, *, workdir: Path | None = None, rules_dir: Path | None = None,
                 policy=None, webhooks: bool | None = None, progress: Callable[[str], None] | None = None,
                 agent_interval: float = 30.0, coalesce_seconds: float = 0.2, facts_dir: Path | None = None):
        from runtime.engine.policy import Policy
        from runtime.rules.loader import load_rules

        self.kubeconfig = Path(kubeconfig)
        self.kubectl = Kubectl(self.kubeconfig)
        self.manifests = MANIFESTS   # where the seed's `kubectl apply -f <file>` lines run
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="accelpolicy-walkthrough-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.rules_dir = Path(rules_dir) if rules_dir else None
        self.policy = policy or Policy(load_rules(str(self.rules_dir) if self.rules_dir else None))
        self.webhooks = controller_serves_webhooks() if webhooks is None else webhooks
        self.progress = progress or (lambda line: None)
        self.agent_interval = agent_interval
        self.coalesce_seconds = coalesce_seconds
        self.facts_dir = Path(facts_dir) if facts_dir else RECORDED_FACTS
        self.plugin = None
        self._controller: ChildProcess | None = None
        self._controller_starts = 0
        self._admission: ChildProcess | None = None
        self._agents: list[ChildProcess] = []
        self._webhook_port = free_port() if self.webhooks else None

    # -- lifecycle ---------------------------------------------------------------------------------
    def __enter__(self) -> "Walkthrough":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _rules_args(self) -> list[str]:
        return ["--rules", str(self.rules_dir)] if self.rules_dir else []

    def start(self) -> "Walkthrough":
        """Nodes, agents (once, then loops), controller, device-plugin stand-in; see the module docstring."""
        try:
            self._namespaces()
            self.progress("creating the four seed Nodes (kwok fake Nodes)")
            self.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                               "items": seed_node_objects()}))
            self.progress("starting the agents: once for node-cpu, a loop per accelerator node "
                          "(fake NVML backend, probes/recorded/)")
            once = [n for n in SEED_NODES if not n.accelerated]
            once_procs = [(n, self._spawn(f"agent-once-{n.name}", self._agent_argv(n, once=True))) for n in once]
            self._agents = [self._spawn(f"agent-{n.name}", self._agent_argv(n)) for n in SEED_NODES if n.accelerated]
            if self.webhooks:
                self.progress("starting the admission webhooks (accelpolicy admission)")
                self.start_admission()
            self.progress("starting the controller" + (" (it registers the admission webhooks)" if self.webhooks else ""))
            self.start_controller()
            self._wait_once(once_procs)
            self.progress("waiting for the agents' first pass, then starting the device-plugin stand-in")
            self._start_plugin()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the stand-in, the agents and the controller; with :attr:`webhooks`, delete the webhook
        configurations the controller registered (their server, this admission process, is gone: left,
        they would refuse every write they match); remove a temporary workdir. Idempotent."""
        if self.plugin is not None:
            self.plugin.stop()
            self.plugin = None
        for proc in self._agents:
            proc.stop(10)
        self._agents = []
        self.stop_controller()
        if self._admission is not None:
            self._admission.stop(15)
            self._admission = None
            self._delete_registrations()
        if self._own_workdir and self.workdir.exists():
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _delete_registrations(self) -> None:
        """Delete the mutating and validating webhook configurations of the rules (a cluster already
        stopped: nothing to delete)."""
        from runtime.engine.admission.registration import registration_of
        configurations = registration_of(self.policy).configurations
        for kind, name in (("mutatingwebhookconfiguration", configurations.mutating),
                           ("validatingwebhookconfiguration", configurations.validating)):
            try:
                self.kubectl("delete", kind, name, "--ignore-not-found", "--wait=false", check=False)
            except Exception as exc:  # noqa: BLE001 - the cluster may be gone already
                self.progress(f"webhook configuration {name} not deleted: {exc}")

    # -- pieces ------------------------------------------------------------------------------------
    def _namespaces(self) -> None:
        items = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}
                 for n in (SYSTEM_NAMESPACE, "default")]
        self.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))

    def _agent_argv(self, node: SeedNode, once: bool = False) -> list[str]:
        return accelpolicy_argv() + ["agent", "--node", node.name, "--kubeconfig", str(self.kubeconfig),
                                     "--backend", "fake", "--facts", str(self.facts_dir / node.facts.name),
                                     "--allocation-source", "annotation", "--interval", str(self.agent_interval),
                                     *self._rules_args(), *(["--once"] if once else [])]

    def _spawn(self, name: str, argv: list[str]) -> ChildProcess:
        return ChildProcess(name, argv, self.workdir / f"{name}.log")

    def _wait_once(self, procs: list[tuple[SeedNode, ChildProcess]], timeout: float = 300.0) -> None:
        """Wait for ``accelpolicy agent --once`` processes; raise naming a node whose run failed."""
        deadline = time.monotonic() + timeout
        for node, proc in procs:
            try:
                code = proc.popen.wait(max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                code = None
            proc.stop(5)
            if code != 0:
                raise LocalClusterError(f"`accelpolicy agent --node {node.name} --once` "
                                        f"{'timed out' if code is None else f'exited {code}'}; log {proc.log}:\n"
                                        f"{_tail(proc.log)}")

    def controller_identity(self) -> tuple[str, str]:
        """``(namespace, name)`` of the controller's ServiceAccount: ``systemNamespace`` and
        ``controllerServiceAccount`` of rules/controller.yaml, the identity whose own writes its
        webhooks let through (the policies' ``controllerUsers``)."""
        controller = self.policy.controller
        return controller.systemNamespace, controller.controllerServiceAccount

    def _controller_kubeconfig(self) -> Path:
        """A kubeconfig for the controller's ServiceAccount (bound to cluster-admin, a TokenRequest
        token), as the Deployment would run it; written once into the workdir."""
        path = self.workdir / "controller.kubeconfig"
        if path.exists():
            return path
        ns, name = self.controller_identity()
        return service_account_kubeconfig(self.kubectl, self.kubeconfig, ns, name, path)

    def start_admission(self, timeout: float = 120.0) -> None:
        """Start ``accelpolicy admission`` on the fixed loopback port (a self-signed CA in the workdir) and
        wait for its ``/readyz`` 200, so the controller registers webhooks that answer."""
        import ssl
        import urllib.request

        tls = self.workdir / "webhook-tls"
        argv = accelpolicy_argv() + ["admission", "--kubeconfig", str(self.kubeconfig), "--webhook-port",
                                     str(self._webhook_port), "--webhook-self-signed", str(tls), *self._rules_args()]
        self._admission = self._spawn("admission", argv)
        deadline = time.monotonic() + timeout
        while True:
            code = self._admission.exited()
            if code is not None:
                raise LocalClusterError(f"accelpolicy admission exited with code {code}; log {self._admission.log}:\n"
                                        f"{_tail(self._admission.log)}")
            try:
                context = ssl.create_default_context(cafile=str(tls / "ca.crt"))
                with urllib.request.urlopen(f"https://127.0.0.1:{self._webhook_port}/readyz", context=context,
                                            timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise LocalClusterError(f"accelpolicy admission not ready within {timeout:.0f}s; log "
                                        f"{self._admission.log}:\n{_tail(self._admission.log)}")
            time.sleep(0.2)

    def start_controller(self) -> None:
        """Start ``accelpolicy controller`` as its ServiceAccount (when :attr:`webhooks`: registering them
        for the admission process, ``--webhook-registration-only``)."""
        if self._controller is not None and self._controller.exited() is None:
            raise LocalClusterError("the controller is already running")
        self._controller_starts += 1
        argv = accelpolicy_argv() + ["controller", "--kubeconfig", str(self._controller_kubeconfig()),
                                     "--coalesce-seconds", str(self.coalesce_seconds), *self._rules_args()]
        if self.webhooks:
            argv += ["--webhook-registration-only", "--webhook-url-base", f"https://127.0.0.1:{self._webhook_port}",
                     "--webhook-ca", str(self.workdir / "webhook-tls" / "ca.crt")]
        self._controller = self._spawn(f"controller-{self._controller_starts}", argv)

    def stop_controller(self) -> None:
        if self._controller is not None:
            self._controller.stop(15)
            self._controller = None

    def restart_controller(self) -> None:
        """What ``kubectl rollout restart deploy/gpustack-operator-worker`` does to the controller."""
        self.stop_controller()
        self.start_controller()

    def check_processes(self) -> None:
        """Raise :class:`LocalClusterError` naming the first of our processes that exited."""
        for proc in [p for p in (self._controller, self._admission) if p] + self._agents:
            code = proc.exited()
            if code is not None:
                raise LocalClusterError(f"{proc.name} exited with code {code}; log {proc.log}:\n{_tail(proc.log)}")

    def _start_plugin(self, timeout: float = 300.0) -> None:
        from runtime.kube.session import connect

        from .deviceplugin import DevicePluginStandIn
        nodes = [n.name for n in SEED_NODES if n.accelerated]
        plugin = DevicePluginStandIn(connect(str(self.kubeconfig)), self.policy, nodes)
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.plugin = plugin.start()
                return
            except TimeoutError:
                self.check_processes()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    # -- node names ------------------------------------------------------------------------------------
    def node(self, seed_name: str) -> str:
        """The cluster's name of seed node ``seed_name`` (here the seed's own: the Nodes are made with it)."""
        return seed_name

    def seed_text(self, text: str) -> str:
        """A seed line, table or object text with each seed node name replaced by :meth:`node`'s."""
        return text

    # -- the seed's commands -----------------------------------------------------------------------
    def sh(self, line: str, *, check: bool = True, timeout: float = 120.0) -> subprocess.CompletedProcess:
        """Run one of the seed's console lines (``kubectl ...``) as written, with bash.

        ``KUBECONFIG`` points at this cluster and this checkout's kubectl is first on ``PATH``; the
        working directory is :data:`MANIFESTS`. ``kubectl ... rollout restart
        deploy/gpustack-operator-worker`` restarts the controller instead (no Deployment here).
        Raises :class:`LocalClusterError` with the output when ``check`` and the line fails.
        """
        words = shlex.split(line) if "rollout" in line and self.simulated_rollout else []
        if "rollout" in words and "restart" in words and CONTROLLER_DEPLOYMENT in words:
            self.restart_controller()
            return subprocess.CompletedProcess([line], 0, f"{CONTROLLER_DEPLOYMENT.replace('deploy/', 'deployment.apps/')} restarted\n", "")
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig),
               "PATH": f"{find_kubectl().parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        try:
            proc = subprocess.run(["bash", "-c", line], cwd=self.manifests, env=env, capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            raise LocalClusterError(f"`{line}` did not finish in {timeout:.0f}s; output so far: {out.strip()}") from None
        if check and proc.returncode != 0:
            raise LocalClusterError(f"`{line}` exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()}")
        return proc


# -- tables ----------------------------------------------------------------------------------------
def table_rows(text: str, ignore: Sequence[str] = ("AGE",)) -> tuple[list[str], list[dict[str, str]]]:
    """``kubectl get`` text -> (headers without ``ignore``, rows without ``ignore``)."""
    headers, rows = parse_table(text)
    return ([h for h in headers if h not in ignore],
            [{k: v for k, v in r.items() if k not in ignore} for r in rows])


def tables_equal(actual: str, expected: str, *, as_set: bool = False, ignore: Sequence[str] = ("AGE",)) -> bool:
    """Column-exact comparison of two kubectl tables, ``ignore`` columns dropped; rows in order
    unless ``as_set`` (shared/seed/README.md: some captured listings are not in name order)."""
    ah, ar = table_rows(actual, ignore)
    eh, er = table_rows(expected, ignore)
    if ah != eh:
        return False
    if as_set:
        key = lambda r: sorted(r.items())  # noqa: E731
        return sorted(ar, key=key) == sorted(er, key=key)
    return ar == er


def wait_for_table(get: Callable[[], str], expected: str, *, timeout: float, as_set: bool = False,
                   interval: float = 0.25, alive: Callable[[], None] | None = None,
                   ignore: Sequence[str] = ("AGE",)) -> tuple[float, str]:
    """Poll ``get()`` until its table equals ``expected`` (:func:`tables_equal`).

    Returns ``(seconds until the first equal table, that table)``; raises ``AssertionError`` with
    the last table and the expected one after ``timeout`` seconds. ``alive`` is called every poll
    (e.g. :meth:`Walkthrough.check_processes`) so a dead process ends the wait with its log.
    """
    t0 = time.monotonic()
    last = ""
    while True:
        if alive:
            alive()
        last = get()
        if tables_equal(last, expected, as_set=as_set, ignore=ignore):
            return time.monotonic() - t0, last
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"table not reached in {timeout:.0f}s\n--- expected\n{expected.rstrip()}\n"
                                 f"--- last seen\n{last.rstrip()}")
        time.sleep(interval)
