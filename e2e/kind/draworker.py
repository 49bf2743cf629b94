"""The DRA driver stand-in on a kind node (docs/tasks/e2e.md "The offline kind cluster") — test machinery only.

:func:`driver_objects` are the Kubernetes objects that run ``kind_draplugin`` (the Go stand-in built by
``kind_draplugin/build.sh`` and loaded into the nodes, nothing pulled) on one node, as a DRA driver is
deployed: a DaemonSet limited to that node, with the kubelet's ``plugins_registry`` and the driver's
plugin directory as hostPath volumes, the node's devices file (ResourceSlice YAML) from a ConfigMap, and
a ServiceAccount allowed to write ResourceSlices, read ResourceClaims and get Nodes, nothing else.

The node's join and leave (:func:`park_node`, :func:`join_node`, :func:`leave_node`): the walkthrough's
extra DRA worker is created with the cluster (kind cannot add a node later), then parked at once, before
anything is installed: its kubelet stopped and its Node object deleted, so nothing (no agent, no
Kueue/NFD Pod, no Instance) sees it while the seed walkthrough runs. The DRA suite starts its kubelet (the
kubelet registers the Node again: the node joins; the chart's agent DaemonSet, ``auto`` on every node, and
the stand-in's start their Pods there) and at its end stops it and deletes the Node again (the agent's
objects and the ResourceSlices have the Node as owner: the garbage collector removes them).
"""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
BUILD = HERE / "kind_draplugin" / "build.sh"
#: the devices of the walkthrough's DRA worker: one A10G as NVIDIA's DRA driver publishes it
A10G_DEVICES = HERE / "kind_draplugin" / "nodes" / "node-a10g-dra.yaml"
DRIVER = "gpu.nvidia.com"
NAMESPACE = "kind-dra-driver"
NAME = "kind-dra-plugin"
PLUGIN_DIR = f"/var/lib/kubelet/plugins/{DRIVER}"
REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
#: the line the stand-in logs once the kubelet accepted its registration (main.go logRegistration)
REGISTERED = "registered with the kubelet"


class DraWorkerError(RuntimeError):
    """A step on the DRA node failed; the message names it and carries the tool's output."""


def _run(*args: str, input: str | None = None, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(args), capture_output=True, text=True, input=input, timeout=timeout)
    if check and proc.returncode != 0:
        raise DraWorkerError(f"`{' '.join(args)}` exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return proc


def driver_image() -> str:
    """Build (or find) the stand-in's image; its ``accelpolicy.local/kind-dra-plugin:<version>-<hash>`` tag."""
    return _run("bash", str(BUILD), timeout=1800).stdout.strip().splitlines()[-1]


def driver_objects(node: str, image: str, devices_yaml: str, *, driver: str = DRIVER) -> list[dict]:
    """The stand-in on kind node ``node``: Namespace, ServiceAccount, ClusterRole + binding, ConfigMap with
    ``devices_yaml`` (ResourceSlice YAML), DaemonSet (``image``, never pulled) on that node only."""
    labels = {"app.kubernetes.io/name": NAME}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": NAME, "namespace": NAMESPACE}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": NAME},
         "rules": [{"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"],
                    "verbs": ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]},
                   {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get"]},
                   {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": NAME},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
         "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{NAME}-devices", "namespace": NAMESPACE},
         "data": {"devices.yaml": devices_yaml}},
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": labels},
         "spec": {"selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels}, "spec": {
                      "serviceAccountName": NAME,
                      "nodeSelector": {"kubernetes.io/hostname": node},
                      "tolerations": [{"operator": "Exists"}],
                      "terminationGracePeriodSeconds": 10,
                      "securityContext": {"runAsUser": 0, "runAsGroup": 0, "seccompProfile": {"type": "RuntimeDefault"}},
                      "containers": [{
                          "name": "plugin", "image": image, "imagePullPolicy": "Never",
                          "args": ["--devices=/etc/kind-dra-plugin/devices.yaml", f"--driver-name={driver}",
                                   f"--plugin-dir={PLUGIN_DIR}", f"--registrar-dir={REGISTRY_DIR}"],
                          "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                          "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
                          "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                              "capabilities": {"drop": ["ALL"]}},
                          "volumeMounts": [{"name": "registry", "mountPath": REGISTRY_DIR},
                                           {"name": "plugin", "mountPath": PLUGIN_DIR},
                                           {"name": "devices", "mountPath": "/etc/kind-dra-plugin", "readOnly": True}]}],
                      "volumes": [{"name": "registry", "hostPath": {"path": REGISTRY_DIR, "type": "Directory"}},
                                  {"name": "plugin", "hostPath": {"path": PLUGIN_DIR, "type": "DirectoryOrCreate"}},
                                  {"name": "devices", "configMap": {"name": f"{NAME}-devices"}}]}}}},
    ]


class Kube:
    """kubectl against one kubeconfig (``kubectl`` binary path)."""

    def __init__(self, kubectl: str, kubeconfig: Path):
        self.kubectl_bin, self.kubeconfig = kubectl, Path(kubeconfig)

    def __call__(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
        return _run(self.kubectl_bin, "--kubeconfig", str(self.kubeconfig), *args, input=input, check=check,
                    timeout=timeout)

    def json(self, *args: str) -> dict:
        out = self(*args, "-o", "json", check=False)
        return json.loads(out.stdout) if out.returncode == 0 and out.stdout.strip() else {}


def wait(what: str, check, timeout: float = 180.0, interval: float = 1.0):
    """``check()`` until truthy (its value returned); DraWorkerError naming ``what`` after ``timeout`` s."""
    deadline, value = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise DraWorkerError(f"timed out after {timeout:.0f}s waiting for {what}; last: {str(value)[:1500]}")


def node_slices(kube: Kube, node: str, driver: str = DRIVER) -> list[dict]:
    """The ResourceSlices of ``driver`` for ``node`` (field selectors spec.driver and spec.nodeName)."""
    return kube.json("get", "resourceslices", f"--field-selector=spec.driver={driver},spec.nodeName={node}").get("items", [])


def start_driver(kube: Kube, node: str, image: str, devices_file: Path = A10G_DEVICES, timeout: float = 240) -> list[dict]:
    """Run the stand-in on ``node``; wait until it is registered with the kubelet and its ResourceSlice
    is published; returns that node's slices. Raises DraWorkerError."""
    deploy_driver(kube, node, image, devices_file)
    return wait_driver(kube, node, timeout)


def deploy_driver(kube: Kube, node: str, image: str, devices_file: Path = A10G_DEVICES) -> None:
    """Apply the stand-in's objects for ``node`` (:func:`driver_objects`); its Pod starts once the node
    is there (a parked node: when it joins, as a DRA driver's DaemonSet Pod does on a new node)."""
    objects = driver_objects(node, image, Path(devices_file).read_text())
    kube("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))


def wait_driver(kube: Kube, node: str, timeout: float = 240) -> list[dict]:
    """Wait until the stand-in on ``node`` is registered with the kubelet and its ResourceSlice is
    published; returns that node's slices. Raises DraWorkerError."""
    def registered():
        logs = kube("-n", NAMESPACE, "logs", f"daemonset/{NAME}", check=False)
        return logs.returncode == 0 and REGISTERED in logs.stdout
    wait(f"the DRA stand-in on {node} to register with its kubelet", registered, timeout)
    return wait(f"the ResourceSlice of {DRIVER} for {node}", lambda: node_slices(kube, node), timeout)


def stop_driver(kube: Kube, node: str) -> None:
    """Remove the stand-in's objects and the node's slices of its driver (the kubelet would remove them
    only some time after the plugin unregistered)."""
    kube("delete", "--ignore-not-found", "--wait=true", "--timeout=120s", "namespace", NAMESPACE, timeout=180)
    kube("delete", "--ignore-not-found", "clusterrolebinding,clusterrole", NAME)
    kube("delete", "resourceslices", f"--field-selector=spec.driver={DRIVER},spec.nodeName={node}", "--ignore-not-found")


def prepared_claims(node: str) -> dict[str, dict]:
    """The stand-in's records of the claims prepared on ``node`` now: claim UID -> record (main.go
    PreparedClaim), read from the node's <plugin dir>/claims."""
    out = _run("docker", "exec", node, "sh", "-c",
               f"for f in {PLUGIN_DIR}/claims/*.json; do [ -e \"$f\" ] && cat \"$f\"; done; true").stdout
    records, decoder, text = {}, json.JSONDecoder(), out.strip()
    while text:
        record, end = decoder.raw_decode(text)
        records[record["uid"]] = record
        text = text[end:].strip()
    return records


def park_node(kube: Kube, node: str) -> None:
    """Take kind node ``node`` out of the cluster before anything is installed: stop its kubelet, delete its
    Node object (the node's own Pods go with it). Its container, containerd and CNI config stay."""
    _run("docker", "exec", node, "systemctl", "stop", "kubelet")
    kube("delete", "node", node, "--ignore-not-found", "--wait=true", "--timeout=120s", timeout=180)


def join_node(kube: Kube, node: str, timeout: float = 240) -> None:
    """Start ``node``'s kubelet: it registers its Node again (kubeadm's kubelet.conf is still there); wait
    until the Node is Ready."""
    _run("docker", "exec", node, "systemctl", "start", "kubelet")

    def ready():
        conditions = (kube.json("get", "node", node).get("status") or {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    wait(f"Node {node} to register and be Ready", ready, timeout)


def leave_node(kube: Kube, node: str) -> None:
    """The node leaves again: kubelet stopped, Node deleted (its Pods, and the objects that name it as
    owner, are removed by the cluster)."""
    park_node(kube, node)


def cpuinfo_of(seed: str) -> str:
    """A /proc/cpuinfo text with the CPU of the seed node's recorded facts (probes/recorded/<seed>.yaml),
    as `accelpolicy agent --cpuinfo` reads it."""
    cpu = yaml.safe_load((HERE.parents[1] / "probes" / "recorded" / f"{seed}.yaml").read_text())["cpu"]
    return (f"processor\t: 0\nvendor_id\t: {cpu['vendorId']}\ncpu family\t: {cpu['family']}\n"
            f"model\t\t: {cpu['model']}\nmodel name\t: {cpu['modelName']}\nstepping\t: 0\n\n")
