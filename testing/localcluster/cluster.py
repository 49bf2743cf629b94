"""Start and stop etcd + kube-apiserver (optionally kube-scheduler, kube-controller-manager, kwok,
nfd-master, Kueue) on 127.0.0.1.

Typical use::

    from testing.localcluster import LocalCluster

    with LocalCluster() as cluster:          # starts etcd, then kube-apiserver; waits for /readyz
        print(cluster.kubeconfig)            # admin kubeconfig (client certificate, system:masters)

Both processes run in a fresh temporary directory (data, certificates, logs, kubeconfig) on free
loopback ports. They are stopped (SIGTERM, then SIGKILL after a grace period) and the directory
removed when the ``with`` block ends, when :meth:`LocalCluster.stop` is called, at interpreter exit
(``atexit``), and on Linux also when the starting Python thread dies abruptly
(``PR_SET_PDEATHSIG``), so no process outlives its test session.
"""

from __future__ import annotations

import atexit
import json
import shutil
import ssl
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Mapping, Sequence

from .binaries import (ComponentBinaries, ControlPlaneBinaries, LocalClusterError, MissingBinariesError,
                       find_binaries, find_component_binaries)
from .certs import Pki, generate_pki
from .components import start_components
from .processes import ChildProcess, free_port

_LOG_TAIL_BYTES = 4000

#: Controllers kube-controller-manager runs when ``LocalCluster(controller_manager=True)``: the
#: garbage collector (deletes dependents whose ownerReferences point at deleted objects, e.g. Kueue's
#: Workload of a deleted Pod) and the namespace controller (empties and removes deleted Namespaces).
CONTROLLER_MANAGER_CONTROLLERS = ("garbage-collector-controller", "namespace-controller")


def _tail(path: Path, limit: int = _LOG_TAIL_BYTES) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return "(no log)"
    return data[-limit:].decode(errors="replace")


class LocalCluster:
    """An etcd + kube-apiserver pair on 127.0.0.1 with an admin kubeconfig.

    Parameters:
        binaries: the programs to run; default :func:`find_binaries` (raises
            :class:`MissingBinariesError` saying "run `make controlplane`" when they are not built).
        workdir: directory for data, certificates, logs and the kubeconfig; default a new temporary
            directory that :meth:`stop` removes (a given directory is kept).
        start_timeout: seconds to wait for etcd health and then for the API server's ``/readyz``.
        extra_apiserver_args: more ``--flag=value`` arguments for kube-apiserver (appended, so they
            override the defaults).
        keep_workdir: keep the temporary directory after :meth:`stop` (for post-mortem logs).
        scheduler: also run kube-scheduler (leader election off) against the API server, so Pods
            get bound to Node objects; needs the kube-scheduler binary (:class:`MissingBinariesError`
            otherwise). No kubelet runs: bound Pods stay Pending unless kwok manages their Node.
        controller_manager: also run kube-controller-manager (leader election off, admin
            credentials) with only :data:`CONTROLLER_MANAGER_CONTROLLERS`, so dependents of deleted
            objects are garbage-collected and deleted Namespaces go away; needs the
            kube-controller-manager binary (:class:`MissingBinariesError` otherwise).
        controllers: the kube-controller-manager controllers to run (default
            :data:`CONTROLLER_MANAGER_CONTROLLERS`).
        components: cluster components to run after the API server (and scheduler), any of
            ``"kwok"``, ``"nfd-master"``, ``"kueue"`` (started in that order; see
            :mod:`testing.localcluster.components`); their binaries come from
            :func:`find_component_binaries` (:class:`MissingBinariesError` saying "run `make
            controlplane`" when absent). The CRDs a component needs (Kueue's, NFD's) are installed
            before it starts.
        kueue_configuration: a ``config.kueue.x-k8s.io/v1beta2`` Configuration or fragment (e.g.
            the ``resources`` section that ``runtime.engine.pools.kueueconfig`` derives from policy)
            merged over the base configuration of :func:`~testing.localcluster.components.kueue_base_configuration`;
            ``None`` = the base alone. Only used with ``"kueue"`` in ``components``.
        component_binaries: the component programs; default :func:`find_component_binaries`.

    After :meth:`start`: :attr:`kubeconfig` (Path), :attr:`server` (``https://127.0.0.1:<port>``),
    :attr:`etcd_url`, :attr:`pki` (certificate paths), :attr:`start_seconds` (wall seconds from
    launching etcd to the last process's readiness), :attr:`component_seconds` (``{name: seconds
    from launching that component to healthy}``), :attr:`kueue_webhook_url` (Kueue's webhook
    server, ``https://127.0.0.1:<port>``, when it runs).

    Errors: :class:`LocalClusterError` when a process exits early or does not become ready in time;
    the message names the process and ends with the tail of its log. A failed start stops whatever
    was started before raising.
    """

    def __init__(self, binaries: ControlPlaneBinaries | None = None, *, workdir: Path | None = None,
                 start_timeout: float = 120.0, extra_apiserver_args: Sequence[str] = (),
                 keep_workdir: bool = False, scheduler: bool = False, controller_manager: bool = False,
                 components: Sequence[str] = (), kueue_configuration: Mapping[str, Any] | None = None,
                 component_binaries: ComponentBinaries | None = None,
                 controllers: Sequence[str] = CONTROLLER_MANAGER_CONTROLLERS):
        self.binaries = binaries or find_binaries()
        self.controllers = tuple(controllers)
        self._given_workdir = Path(workdir) if workdir else None
        self.start_timeout = start_timeout
        self.extra_apiserver_args = list(extra_apiserver_args)
        self.keep_workdir = keep_workdir
        self.scheduler = scheduler
        if scheduler and self.binaries.kube_scheduler is None:
            raise MissingBinariesError(
                f"kube-scheduler missing in {self.binaries.directory}; run `make controlplane`")
        self.controller_manager = controller_manager
        if controller_manager and self.binaries.kube_controller_manager is None:
            raise MissingBinariesError(
                f"kube-controller-manager missing in {self.binaries.directory}; run `make controlplane`")
        self.components = tuple(components)
        if isinstance(components, str):
            raise LocalClusterError(f"components must be a sequence of names, got the string {components!r}")
        self.component_binaries = (component_binaries or find_component_binaries(self.components)
                                   if self.components else None)
        if kueue_configuration is not None and "kueue" not in self.components:
            raise LocalClusterError("kueue_configuration given but 'kueue' is not in components")
        self.kueue_configuration = kueue_configuration
        self.component_seconds: dict[str, float] = {}
        self.kueue_webhook_url: str | None = None
        self.workdir: Path | None = None
        self.kubeconfig: Path | None = None
        self.server: str | None = None
        self.etcd_url: str | None = None
        self.pki: Pki | None = None
        self.start_seconds: float | None = None
        self._procs: list[ChildProcess] = []
        self._lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        """True while every started process is alive."""
        return bool(self._procs) and all(p.exited() is None for p in self._procs)

    def start(self) -> "LocalCluster":
        """Start etcd and kube-apiserver, wait until ready, write the kubeconfig; returns ``self``.

        Raises :class:`LocalClusterError` (after cleaning up) when either does not come up.
        """
        if self._procs:
            raise LocalClusterError("LocalCluster already started")
        t0 = time.monotonic()
        self.workdir = self._given_workdir or Path(tempfile.mkdtemp(prefix="accelpolicy-cp-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        atexit.register(self.stop)
        try:
            (self.workdir / "pki").mkdir(exist_ok=True)
            self.pki = generate_pki(self.workdir / "pki")
            self._start_etcd(t0)
            self._start_apiserver(t0)
            self._write_kubeconfig()
            if self.scheduler:
                self._start_scheduler(t0)
            if self.controller_manager:
                self._start_controller_manager(t0)
            if self.components:
                start_components(self, self.components, self.component_binaries,
                                 self.kueue_configuration, t0)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0
        return self

    def stop(self, grace: float = 15.0) -> None:
        """Stop the components, kube-controller-manager, kube-scheduler, kube-apiserver, then etcd (SIGTERM, SIGKILL after ``grace`` seconds); idempotent.

        Removes a temporary workdir unless ``keep_workdir`` was set.
        """
        with self._lock:
            procs, self._procs = self._procs, []
            for p in reversed(procs):
                p.stop(grace)
            atexit.unregister(self.stop)
            if (self.workdir and self._given_workdir is None and not self.keep_workdir
                    and self.workdir.exists()):
                shutil.rmtree(self.workdir, ignore_errors=True)

    # -- internals -------------------------------------------------------------------------
    def _start_etcd(self, t0: float) -> None:
        assert self.workdir
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        proc = ChildProcess("etcd", [
            str(self.binaries.etcd), "--name=accelpolicy",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}", f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=accelpolicy=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync=true", "--log-level=warn",
        ], self.workdir / "etcd.log")
        self._procs.append(proc)

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as r:
                    return json.loads(r.read()).get("health") == "true"
            except (OSError, ValueError):
                return False
        self._wait(proc, healthy, t0)

    def _start_apiserver(self, t0: float) -> None:
        assert self.workdir and self.pki and self.etcd_url
        port = free_port()
        self.server = f"https://127.0.0.1:{port}"
        pki = self.pki
        args = [
            str(self.binaries.kube_apiserver),
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={port}",
            f"--etcd-servers={self.etcd_url}",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--tls-cert-file={pki.serving_cert}", f"--tls-private-key-file={pki.serving_key}",
            f"--client-ca-file={pki.ca_cert}",
            f"--service-account-key-file={pki.sa_public_key}",
            f"--service-account-signing-key-file={pki.sa_private_key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--authorization-mode=RBAC",
            # No controller-manager runs the token/serviceaccount controllers (none creates "default"
            # ServiceAccounts), and no node-lifecycle controller would lift the not-ready taint TaintNodesByCondition puts
            # on every new Node, so both admission plugins are off.
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
            # Loopback addresses are not valid Endpoints; nothing in-cluster needs the service.
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true",
            "--v=0",
        ] + self.extra_apiserver_args
        proc = ChildProcess("kube-apiserver", args, self.workdir / "kube-apiserver.log")
        self._procs.append(proc)
        self._wait(proc, self._apiserver_ready, t0)

    def _apiserver_ready(self) -> bool:
        """True when the API server answers ``/readyz`` with 200 (admin client certificate)."""
        assert self.pki
        ctx = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        ctx.load_cert_chain(str(self.pki.admin_cert), str(self.pki.admin_key))
        try:
            with urllib.request.urlopen(f"{self.server}/readyz", timeout=5, context=ctx) as r:
                return r.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def _start_scheduler(self, t0: float) -> None:
        assert self.workdir and self.kubeconfig and self.binaries.kube_scheduler
        port = free_port()
        proc = ChildProcess("kube-scheduler", [
            str(self.binaries.kube_scheduler), f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}", f"--authorization-kubeconfig={self.kubeconfig}",
            "--leader-elect=false", "--bind-address=127.0.0.1", f"--secure-port={port}",
            f"--cert-dir={self.workdir / 'scheduler-certs'}", "--v=0",
        ], self.workdir / "kube-scheduler.log")
        self._procs.append(proc)
        self._wait_healthz(proc, port, t0)

    def _start_controller_manager(self, t0: float) -> None:
        assert self.workdir and self.kubeconfig and self.binaries.kube_controller_manager
        port = free_port()
        proc = ChildProcess("kube-controller-manager", [
            str(self.binaries.kube_controller_manager), f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}", f"--authorization-kubeconfig={self.kubeconfig}",
            f"--controllers={','.join(self.controllers)}",
            "--leader-elect=false", "--use-service-account-credentials=false",
            # The API server has no request-header CA; only /healthz (always allowed) is served.
            "--authentication-skip-lookup=true",
            "--bind-address=127.0.0.1", f"--secure-port={port}",
            f"--cert-dir={self.workdir / 'controller-manager-certs'}", "--v=0",
        ], self.workdir / "kube-controller-manager.log")
        self._procs.append(proc)
        self._wait_healthz(proc, port, t0)

    def _wait_healthz(self, proc: ChildProcess, port: int, t0: float) -> None:
        """Wait until ``proc`` answers 200 on ``https://127.0.0.1:<port>/healthz`` (self-signed cert)."""
        insecure = ssl.create_default_context()
        insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE  # self-signed serving cert

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", timeout=5,
                                            context=insecure) as r:
                    return r.status == 200
            except (OSError, urllib.error.URLError):
                return False
        self._wait(proc, healthy, t0)

    def _wait(self, proc: ChildProcess, probe, t0: float) -> None:
        deadline = t0 + self.start_timeout
        while True:
            code = proc.exited()
            if code is not None:
                raise LocalClusterError(
                    f"{proc.name} exited with code {code} during start; log {proc.log}:\n{_tail(proc.log)}")
            if probe():
                return
            if time.monotonic() > deadline:
                raise LocalClusterError(
                    f"{proc.name} not ready after {self.start_timeout:.0f}s; log {proc.log}:\n{_tail(proc.log)}")
            time.sleep(0.2)

    def _write_kubeconfig(self) -> None:
        assert self.workdir and self.pki and self.server
        cfg = {
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "accelpolicy-local", "cluster": {
                "server": self.server, "certificate-authority": str(self.pki.ca_cert)}}],
            "users": [{"name": "accelpolicy-admin", "user": {
                "client-certificate": str(self.pki.admin_cert), "client-key": str(self.pki.admin_key)}}],
            "contexts": [{"name": "accelpolicy-local", "context": {
                "cluster": "accelpolicy-local", "user": "accelpolicy-admin", "namespace": "default"}}],
            "current-context": "accelpolicy-local",
        }
        self.kubeconfig = self.workdir / "kubeconfig"
        self.kubeconfig.write_text(json.dumps(cfg, indent=2))  # JSON is valid YAML
        self.kubeconfig.chmod(0o600)

    def logs(self) -> dict[str, str]:
        """Return the last few KB of each process log, keyed by process name (for diagnostics)."""
        return {p.name: _tail(p.log) for p in self._procs}

    def __repr__(self) -> str:
        return f"LocalCluster(server={self.server!r}, workdir={str(self.workdir)!r}, running={self.running})"

    # -- API-server restart (kept self-contained: reuses the running process's own argv) --------------
    def restart_apiserver(self, kill: bool = False, grace: float = 30.0) -> float:
        """Stop kube-apiserver and start it again on the same etcd, port, certificates and kubeconfig.

        ``kill``: SIGKILL instead of SIGTERM (a crash rather than a graceful shutdown, which closes
        open watches first); ``grace``: seconds a SIGTERM may take before SIGKILL. etcd and any
        kube-scheduler keep running, so stored objects and their resourceVersions survive; clients
        see their connections and watches end and must reconnect. The new process logs to
        ``kube-apiserver.restart-<n>.log`` in the workdir (:meth:`logs` shows it under
        ``kube-apiserver``). Returns the wall seconds from the stop signal to ``/readyz``; the part
        until the old process had exited is kept in :attr:`restart_stop_seconds`.

        Raises :class:`LocalClusterError` when the cluster is not started, or when the new process
        exits or is not ready within ``start_timeout`` (the message ends with its log tail).
        """
        with self._lock:
            index = next((i for i, p in enumerate(self._procs) if p.name == "kube-apiserver"), None)
            if index is None or self.workdir is None or self.pki is None:
                raise LocalClusterError("restart_apiserver: the cluster is not started")
            old = self._procs[index]
            t0 = time.monotonic()
            if kill and old.exited() is None:
                old.popen.kill()
                old.popen.wait(10)
            old.stop(grace)
            self.restart_stop_seconds = time.monotonic() - t0
            self._restarts = getattr(self, "_restarts", 0) + 1
            proc = ChildProcess("kube-apiserver", old.argv, self.workdir / f"kube-apiserver.restart-{self._restarts}.log")
            self._procs[index] = proc
        self._wait(proc, self._apiserver_ready, time.monotonic())
        return time.monotonic() - t0
