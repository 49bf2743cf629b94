"""Kueue's controller manager, nfd-master and kwok run beside the local control plane.

``LocalCluster(scheduler=True, components=("kwok", "nfd-master", "kueue"), kueue_configuration=...)``
starts these real programs (built by ``make controlplane`` from their Go modules, see
``e2e/components/versions.txt``) after kube-apiserver (and kube-scheduler), in that order, waits
for each to be healthy and stops them first. Each writes ``<name>.log`` in the cluster's workdir;
a start failure raises :class:`LocalClusterError` with the tail of that log.

kwok
    ``--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake``: only Nodes carrying that
    annotation are simulated, every other Node is left alone. Stages are kwok's defaults
    (kustomize/stage: node-initialize, node-heartbeat, pod-ready, pod-complete, pod-delete), so
    such a Node goes ``Ready`` and a Pod bound to it goes ``Running``. Healthy = ``/healthz`` on
    its ``--server-address``. Create a fake Node with :func:`fake_node`::

        kubectl("create", "-f", "-", input=json.dumps(fake_node(
            "node-a10g", {"kubernetes.io/os": "linux"}, {"cpu": "4", "memory": "16Gi",
                                                        "nvidia.com/gpu": "1"})))

nfd-master
    Runs "on" the Node ``accelpolicy-control-plane`` (created, kwok-annotated, tainted
    control-plane; nfd-master exits without its own Node). No leader election, the admin kubeconfig, metrics/``/healthz`` on a free port (healthy = 200).
    NFD v0.19 publishes labels of any namespace outside ``kubernetes.io``/``*.kubernetes.io``
    without ``-extra-label-ns`` (pkg/apis/nfd/validate ``Label``), so the NodeFeatures of
    ``gpustack-system`` (``gpustack.ai/managed``, ``general.feature.gpustack.ai/...``,
    ``acceleratable.feature.gpustack.ai/...``) land on their Node as they are. nfd-master records
    the labels it wrote in the Node annotation ``nfd.node.kubernetes.io/feature-labels`` and only
    ever removes those; other labels are untouched.

Kueue
    The manager runs out of cluster with a generated ``config.kueue.x-k8s.io/v1beta2``
    Configuration (:func:`kueue_base_configuration`; ``kueue_configuration=`` is merged over it by
    :func:`merge_kueue_configuration`): namespace ``kueue-system`` (created), leader election off,
    ``internalCertManagement.enable: false`` with a serving certificate for 127.0.0.1 signed by the
    cluster CA. Kueue v0.17 then reads certificates from fixed absolute paths
    (``/etc/kueue/metrics/certs`` for metrics, ``/visibility`` for the visibility API server, as
    a Deployment mounts them), so the binary runs in a root directory of its own inside the
    workdir (``chroot``, or ``unshare --user --map-root-user --root`` when not root): no file
    outside the workdir is written. Healthy = its ``/readyz`` (the webhook server is serving).
    Then Kueue's own webhook configurations (``kueue-webhook/manifests.yaml`` of the module with
    its kustomization patches, named ``kueue-…`` as the release is) are registered with
    ``clientConfig.url = https://127.0.0.1:<port><path>`` and the cluster CA as ``caBundle``, so a
    Pod labelled ``kueue.x-k8s.io/queue-name`` is gated and gets a Workload as in a real install.

Each component needs its CRDs: the cluster installs Kueue's (for kueue) and NFD's (for
nfd-master) before starting them (:func:`testing.localcluster.crds.install_crds`).
"""

from __future__ import annotations

import base64
import copy
import json
import os
import shutil
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

import yaml

from .binaries import COMPONENTS, ComponentBinaries, LocalClusterError
from .certs import issue_serving_cert
from .processes import ChildProcess, free_port

if TYPE_CHECKING:  # pragma: no cover
    from .cluster import LocalCluster

#: Annotation (key, value) that makes kwok manage a Node (``--manage-nodes-with-annotation-selector``).
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")

#: Namespace the Kueue manager runs for (Configuration ``namespace``), created at start.
KUEUE_NAMESPACE = "kueue-system"

#: Configuration apiVersion Kueue v0.17.0 reads (apis/config/v1beta2; v1beta1 is still decoded).
KUEUE_CONFIG_API_VERSION = "config.kueue.x-k8s.io/v1beta2"

#: Keys of a Configuration's ``resources`` section (apis/config/v1beta2 ``Resources``).
RESOURCES_KEYS = frozenset({"transformations", "excludeResourcePrefixes", "deviceClassMappings"})

#: The release's kustomize ``namePrefix`` (config/default) for the webhook configurations.
KUEUE_NAME_PREFIX = "kueue-"

#: Namespace nfd-master believes it runs in (``KUBERNETES_NAMESPACE``), as a release would.
NFD_NAMESPACE = "node-feature-discovery"

#: The Node nfd-master "runs on" (``NODE_NAME``): at start it patches that Node's annotations and
#: exits when it is missing, so the cluster creates it as a kwok-managed control-plane Node
#: (label ``node-role.kubernetes.io/control-plane``, taint ``...control-plane:NoSchedule``; no
#: ``gpustack.ai/managed`` label, so no pool counts it).
NFD_MASTER_NODE = "accelpolicy-control-plane"


def fake_node(name: str, labels: Mapping[str, str] | None = None,
              capacity: Mapping[str, str] | None = None,
              allocatable: Mapping[str, str] | None = None) -> dict:
    """Return a Node object (dict) that kwok manages: annotation ``kwok.x-k8s.io/node: fake``.

    ``labels`` are the Node's labels (``kubernetes.io/hostname: <name>`` is added unless given);
    ``capacity`` the quantities of ``status.capacity`` (e.g. ``{"cpu": "4", "memory": "16Gi",
    "pods": "110", "nvidia.com/gpu": "1"}``, extended resources included; ``pods: 110`` is added
    unless given); ``allocatable`` defaults to ``capacity``. kwok's node-initialize stage keeps
    both and adds the Ready condition, addresses and nodeInfo. Create it with ``kubectl create``
    (a Node's status is kept on create).
    """
    cap = {"pods": "110", **dict(capacity or {})}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name,
                     "labels": {"kubernetes.io/hostname": name, **dict(labels or {})},
                     "annotations": {KWOK_NODE_ANNOTATION[0]: KWOK_NODE_ANNOTATION[1]}},
        "spec": {},
        "status": {"capacity": cap,
                   "allocatable": {"pods": cap["pods"], **dict(allocatable or cap)}},
    }


# -- Kueue configuration and webhooks ------------------------------------------------------------
def kueue_base_configuration(*, webhook_port: int, health_port: int, metrics_port: int,
                             cert_dir: str = "/etc/kueue/webhook-certs") -> dict:
    """The Configuration the local Kueue manager starts from (a ``config.kueue.x-k8s.io/v1beta2`` dict).

    Loopback addresses and the given ports (health probes, metrics, webhook server), namespace
    ``kueue-system``, leader election off, ``internalCertManagement.enable: false`` with the
    webhook serving certificate in ``cert_dir`` (a path inside Kueue's root), integration ``pod``.
    No ``resources`` section: that is policy (``kueue_configuration=``).
    """
    return {
        "apiVersion": KUEUE_CONFIG_API_VERSION, "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": cert_dir},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": 50, "burst": 100},
        "integrations": {"frameworks": ["pod"]},
    }


def merge_kueue_configuration(base: dict, override: Mapping[str, Any] | None) -> dict:
    """Return ``base`` with ``override`` merged over it (mappings recursively, anything else replaced).

    ``override`` is a full Configuration or a fragment of one (e.g. ``{"resources": {...}}`` from
    ``runtime.engine.pools.kueueconfig``); a bare ``resources`` section (only the keys
    ``transformations``, ``excludeResourcePrefixes``, ``deviceClassMappings``) is put under
    ``resources``. Raises :class:`LocalClusterError` when it is not a mapping or
    names another apiVersion/kind than ``config.kueue.x-k8s.io/v1beta2`` ``Configuration``.
    """
    if override is None:
        return copy.deepcopy(base)
    if not isinstance(override, Mapping):
        raise LocalClusterError(f"kueue_configuration must be a mapping, got {type(override).__name__}")
    if override and set(override) <= RESOURCES_KEYS:
        override = {"resources": override}
    for key, want in (("apiVersion", KUEUE_CONFIG_API_VERSION), ("kind", "Configuration")):
        if key in override and override[key] != want:
            raise LocalClusterError(
                f"kueue_configuration {key} is {override[key]!r}; Kueue v0.17.0 here reads {want!r}")

    def merge(a: Any, b: Any) -> Any:
        if isinstance(a, dict) and isinstance(b, Mapping):
            out = dict(a)
            for k, v in b.items():
                out[k] = merge(a.get(k), v)
            return out
        return copy.deepcopy(b)
    return merge(copy.deepcopy(base), override)


def _merge_named(items: list[dict], patches: list[dict]) -> None:
    # kustomize strategic merge of a list keyed by "name": patch entries update matching entries.
    by_name = {w.get("name"): w for w in items}
    for patch in patches:
        target = by_name.get(patch.get("name"))
        if target is None:
            items.append(copy.deepcopy(patch))
            continue
        for k, v in patch.items():
            target[k] = copy.deepcopy(v)


def kueue_webhook_configurations(webhook_dir: Path, *, base_url: str, ca_bundle: bytes) -> list[dict]:
    """Kueue's Mutating/ValidatingWebhookConfigurations, pointed at a webhook server on ``base_url``.

    Reads ``manifests.yaml`` and applies the patches of ``kustomization.yaml`` (namespace
    selectors of the pod/deployment/statefulset webhooks) from ``webhook_dir`` (copied from the
    Kueue module by ``e2e/components/build.sh``), names the configurations
    ``kueue-<name>`` as the release does, and rewrites each webhook's ``clientConfig`` to
    ``{"url": base_url + path, "caBundle": base64(ca_bundle)}``. Raises :class:`LocalClusterError`
    naming the file when it is not the expected shape.
    """
    manifests = webhook_dir / "manifests.yaml"
    try:
        docs = [d for d in yaml.safe_load_all(manifests.read_text()) if d]
        kustomization = yaml.safe_load((webhook_dir / "kustomization.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise LocalClusterError(f"{webhook_dir}: cannot read Kueue's webhook manifests: {e}") from e
    configs = {(d.get("kind"), d.get("metadata", {}).get("name")): d for d in docs}
    for entry in kustomization.get("patches") or []:
        patch = yaml.safe_load(entry.get("patch", "")) if isinstance(entry, dict) else None
        if not isinstance(patch, dict):
            continue
        target = configs.get((patch.get("kind"), patch.get("metadata", {}).get("name")))
        if target is None:
            raise LocalClusterError(f"{webhook_dir / 'kustomization.yaml'}: patch for "
                                    f"{patch.get('kind')} {patch.get('metadata', {}).get('name')} "
                                    f"matches nothing in {manifests}")
        _merge_named(target.setdefault("webhooks", []), patch.get("webhooks") or [])
    ca = base64.b64encode(ca_bundle).decode()
    out = []
    for doc in docs:
        if doc.get("kind") not in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            continue
        doc = copy.deepcopy(doc)
        doc["metadata"] = {"name": KUEUE_NAME_PREFIX + doc["metadata"]["name"]}
        for hook in doc.get("webhooks") or []:
            path = (hook.get("clientConfig") or {}).get("service", {}).get("path")
            if not path:
                raise LocalClusterError(f"{manifests}: webhook {hook.get('name')} has no clientConfig.service.path")
            hook["clientConfig"] = {"url": base_url + path, "caBundle": ca}
        out.append(doc)
    if not out:
        raise LocalClusterError(f"{manifests}: no webhook configurations found")
    return out


# -- process start ---------------------------------------------------------------------------------
def _http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as r:
            return r.status == 200
    except (OSError, urllib.error.URLError):
        return False


def _embedded_kubeconfig(cluster: "LocalCluster") -> dict:
    # The same admin identity as cluster.kubeconfig, with the PEM data inline (no host paths), for
    # a program whose root directory is not the host's.
    pki = cluster.pki
    data = {p: base64.b64encode(Path(f).read_bytes()).decode()
            for p, f in (("ca", pki.ca_cert), ("cert", pki.admin_cert), ("key", pki.admin_key))}
    return {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "accelpolicy-local", "cluster": {
            "server": cluster.server, "certificate-authority-data": data["ca"]}}],
        "users": [{"name": "accelpolicy-admin", "user": {
            "client-certificate-data": data["cert"], "client-key-data": data["key"]}}],
        "contexts": [{"name": "accelpolicy-local", "context": {
            "cluster": "accelpolicy-local", "user": "accelpolicy-admin"}}],
        "current-context": "accelpolicy-local",
    }


def _contained_argv(root: Path, argv: list[str]) -> list[str]:
    """Prefix ``argv`` (paths inside ``root``) so it runs with ``root`` as its ``/``."""
    if os.geteuid() == 0 and shutil.which("chroot"):
        return [shutil.which("chroot"), str(root)] + argv
    unshare = shutil.which("unshare")
    if not unshare:
        raise LocalClusterError("running Kueue needs `chroot` (as root) or util-linux `unshare` "
                                "(user namespaces) to give it its own /etc/kueue; neither was found")
    return [unshare, "--user", "--map-root-user", f"--root={root}", "--wd=/"] + argv


def start_components(cluster: "LocalCluster", names: tuple[str, ...], binaries: ComponentBinaries,
                     kueue_configuration: Mapping[str, Any] | None, t0: float) -> None:
    """Start ``names`` (in :data:`COMPONENTS` order) for a started ``cluster``; wait for each.

    Installs the CRDs a component needs first. Records launch-to-healthy seconds in
    ``cluster.component_seconds[name]``. Raises :class:`LocalClusterError` (with the log tail)
    when one exits or is not healthy within ``cluster.start_timeout`` seconds of its launch.
    """
    from .crds import install_crds, kueue_crds, module_dirs, nfd_crds
    from .kubectl import Kubectl

    kubectl = Kubectl(cluster.kubeconfig)
    needed: list[dict] = []
    if "kueue" in names or "nfd-master" in names:
        dirs = module_dirs()
        needed = (kueue_crds(dirs) if "kueue" in names else []) + (nfd_crds(dirs) if "nfd-master" in names else [])
    if needed:
        install_crds(kubectl, needed)
    starters: dict[str, Callable[..., None]] = {
        "kwok": _start_kwok, "nfd-master": _start_nfd_master, "kueue": _start_kueue}
    for name in COMPONENTS:
        if name in names:
            started = time.monotonic()
            starters[name](cluster, binaries, kubectl=kubectl, kueue_configuration=kueue_configuration)
            cluster.component_seconds[name] = time.monotonic() - started


def _start_kwok(cluster: "LocalCluster", binaries: ComponentBinaries, **_: Any) -> None:
    home = cluster.workdir / "kwok-home"  # kwok also reads ~/.kwok/kwok.yaml: keep the user's out
    home.mkdir(exist_ok=True)
    port = free_port()
    key, value = KWOK_NODE_ANNOTATION
    proc = ChildProcess("kwok", [
        str(binaries.programs["kwok"]), f"--kubeconfig={cluster.kubeconfig}",
        f"--manage-nodes-with-annotation-selector={key}={value}",
        f"--server-address=127.0.0.1:{port}", "--node-ip=127.0.0.1",
        f"--config={','.join(str(p) for p in binaries.kwok_stages)}",
    ], cluster.workdir / "kwok.log", env={**os.environ, "HOME": str(home)})
    cluster._procs.append(proc)
    cluster._wait(proc, lambda: _http_ok(f"http://127.0.0.1:{port}/healthz"), time.monotonic())


def _start_nfd_master(cluster: "LocalCluster", binaries: ComponentBinaries, *, kubectl, **_: Any) -> None:
    node = fake_node(NFD_MASTER_NODE, {"node-role.kubernetes.io/control-plane": ""}, {"cpu": "2", "memory": "4Gi"})
    node["spec"]["taints"] = [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
    kubectl("apply", "-f", "-", input=json.dumps(node))
    port = free_port()
    conf = cluster.workdir / "nfd-master.conf"
    conf.write_text("{}\n")  # defaults; the flag keeps it from reading /etc/kubernetes/...
    proc = ChildProcess("nfd-master", [
        str(binaries.programs["nfd-master"]), f"--kubeconfig={cluster.kubeconfig}",
        f"--config={conf}", f"--port={port}", "--enable-leader-election=false",
    ], cluster.workdir / "nfd-master.log",
        env={**os.environ, "KUBERNETES_NAMESPACE": NFD_NAMESPACE, "NODE_NAME": NFD_MASTER_NODE})
    cluster._procs.append(proc)
    cluster._wait(proc, lambda: _http_ok(f"http://127.0.0.1:{port}/healthz"), time.monotonic())


def _start_kueue(cluster: "LocalCluster", binaries: ComponentBinaries, *, kubectl,
                 kueue_configuration: Mapping[str, Any] | None, **_: Any) -> None:
    kubectl("apply", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NAMESPACE}}))
    root = cluster.workdir / "kueue-root"
    for d in ("etc/kueue/metrics/certs", "etc/kueue/webhook-certs", "visibility", "tmp"):
        (root / d).mkdir(parents=True, exist_ok=True)
    for d in ("etc/kueue/metrics/certs", "etc/kueue/webhook-certs", "visibility"):
        issue_serving_cert(cluster.pki, root / d / "tls.crt", root / d / "tls.key", common_name="kueue")
    exe, source = root / "kueue", binaries.programs["kueue"].resolve()  # resolved: no symlink into the host
    if not exe.exists():
        try:
            os.link(source, exe)
        except OSError:
            shutil.copy2(source, exe)
    (root / "etc/kueue/kubeconfig").write_text(json.dumps(_embedded_kubeconfig(cluster)))
    (root / "etc/kueue/kubeconfig").chmod(0o600)
    webhook_port, health_port, metrics_port, visibility_port = (free_port() for _ in range(4))
    config = merge_kueue_configuration(
        kueue_base_configuration(webhook_port=webhook_port, health_port=health_port,
                                 metrics_port=metrics_port), kueue_configuration)
    (root / "etc/kueue/config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (cluster.workdir / "kueue-config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    argv = _contained_argv(root, [
        "/kueue", "--config=/etc/kueue/config.yaml", "--kubeconfig=/etc/kueue/kubeconfig",
        f"--visibility-server-port={visibility_port}", "--zap-log-level=info"])
    proc = ChildProcess("kueue", argv, cluster.workdir / "kueue.log", env={**os.environ, "TMPDIR": "/tmp"})
    cluster._procs.append(proc)
    cluster._wait(proc, lambda: _http_ok(f"http://127.0.0.1:{health_port}/readyz"), time.monotonic())
    hooks = kueue_webhook_configurations(binaries.kueue_webhook_dir,
                                         base_url=f"https://127.0.0.1:{webhook_port}",
                                         ca_bundle=cluster.pki.ca_cert.read_bytes())
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": hooks}))
    cluster.kueue_webhook_url = f"https://127.0.0.1:{webhook_port}"
