"""The node agent against the local control plane: fixtures and builders shared by its live tests.

The agent runs in this process with the real :class:`runtime.agent.cluster.NodeCluster` (the
controller's session, watch cache and applier) against the process-wide kube-apiserver. Each test
gets a seed-named Node created fresh (``status.capacity.cpu`` as kubelet would report it), the
agent's namespace (NodeFeatures and the settings Secret) and a Pod namespace; everything the test
or the agent wrote for that node is removed before and after it.
"""
from __future__ import annotations

import copy
import json

import pytest
import yaml

from probes.fake import RecordedBackend, recorded
from runtime.agent.runner import NodeAgent
from runtime.kube.session import connect
from testing.localcluster.testing import get_json, wait_for
from tests.agent.conftest import CAPACITY_CPU

NS = "agent-live"          # the agent's namespace: its NodeFeatures, the settings Secret
PODS_NS = "demo"           # the namespace of the Pods bound to the node
BASE_RESOURCES = ("cpu", "memory", "ephemeral-storage")


@pytest.fixture(scope="module")
def live(control_plane):
    """``(kubectl, session)`` with the agent's and the Pods' namespaces present."""
    cluster, kubectl = control_plane
    docs = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in (NS, PODS_NS)]
    kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    return kubectl, connect(cluster.kubeconfig)


def clean_node(kubectl, node: str) -> None:
    """Delete the Node ``node``, its NodeFeatures, Devices and bound Pods (forced: no kubelet)."""
    kubectl("delete", "node", node, "--ignore-not-found", "--wait=true")
    kubectl("delete", "nodefeatures.nfd.k8s-sigs.io", "-n", NS, "-l", f"nfd.node.kubernetes.io/node-name={node}",
            "--ignore-not-found", "--wait=true")
    kubectl("delete", "devices.worker.gpustack.ai", node, "--ignore-not-found", "--wait=true")
    kubectl("delete", "pods", "-n", PODS_NS, "--field-selector", f"spec.nodeName={node}", "--force",
            "--grace-period=0", "--ignore-not-found", "--wait=true")
    kubectl("delete", "secret", "gpustack-settings", "-n", NS, "--ignore-not-found")
    kubectl("delete", "events", "-n", "default", "--field-selector", f"involvedObject.name={node}",
            "--ignore-not-found")
    kubectl("delete", "events", "-n", PODS_NS, "--all", "--ignore-not-found")


def create_node(kubectl, node: str) -> dict:
    """The seed Node as kubelet registers it (os/arch labels, ``status.capacity.cpu``); returns it."""
    body = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node, "labels": {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}}}
    kubectl("apply", "-f", "-", input=json.dumps(body))
    cpu = CAPACITY_CPU[node]
    kubectl("patch", "node", node, "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": {"capacity": {"cpu": cpu}, "allocatable": {"cpu": cpu}}}))
    return get_json(kubectl, "node", node)


def create_pods(kubectl, node: str, pods: list[dict]) -> None:
    """Create ``pods`` (as the tests build them) bound to ``node`` in :data:`PODS_NS`: the server sets
    creationTimestamp and status; extended resources get limits equal to their requests."""
    docs = []
    for p in pods:
        p = copy.deepcopy(p)
        meta = p["metadata"]
        meta.pop("creationTimestamp", None)
        meta["namespace"] = PODS_NS
        spec = p.setdefault("spec", {})
        spec["nodeName"] = node
        containers = spec.setdefault("containers", [{"name": "main"}])
        for ctr in containers:
            ctr.setdefault("image", "registry.k8s.io/pause:3.10")
            requests = (ctr.get("resources") or {}).get("requests") or {}
            extended = {k: v for k, v in requests.items() if k not in BASE_RESOURCES}
            if extended:
                ctr["resources"]["limits"] = extended
        p.pop("status", None)
        docs.append(p)
        kubectl("create", "-f", "-", input=json.dumps(p))


@pytest.fixture
def make_agent(live, policy, monkeypatch):
    """make_agent(stem=..., node=..., pods=..., **NodeAgent kw) -> (agent, backend): a fresh Node from
    the recorded facts ``stem`` (or ``document``), its Pods created and seen by the agent's cache."""
    kubectl, session = live
    monkeypatch.setenv("KUBERNETES_POD_NAMESPACE", NS)
    made: list[tuple[NodeAgent, str]] = []

    def make(stem="node-a10g", *, node=None, pods=(), document=None, secret=None, **kw):
        backend = RecordedBackend(document=document) if document is not None else RecordedBackend(recorded(stem))
        name = node or backend.node
        clean_node(kubectl, name)
        create_node(kubectl, name)
        if secret is not None:
            kubectl("create", "secret", "generic", "gpustack-settings", "-n", NS,
                    *[f"--from-literal={k}={v}" for k, v in secret.items()])
        create_pods(kubectl, name, list(pods))
        kw.setdefault("allocation_source", "annotation")
        agent = NodeAgent(policy, backend, name, session=session, **kw)
        made.append((agent, name))
        agent.cluster.start()
        wait_for(lambda: len(agent.cluster.pods()), lambda n: n == len(pods), what=f"{len(pods)} Pods cached")
        return agent, backend

    yield make
    for agent, name in made:
        agent.close()
        clean_node(kubectl, name)


def server(kubectl, *args: str) -> dict:
    """The object as the API server holds it now (``{}`` when absent)."""
    return get_json(kubectl, *args)


def worker(kubectl, node: str) -> dict:
    return server(kubectl, "nodefeatures.nfd.k8s-sigs.io", f"{node}-gpustack-worker", "-n", NS)


def device_manager(kubectl, node: str) -> dict:
    return server(kubectl, "nodefeatures.nfd.k8s-sigs.io", f"{node}-gpustack-device-manager", "-n", NS)


def devices(kubectl, node: str) -> dict:
    return server(kubectl, "devices.worker.gpustack.ai", node)


def ledger(kubectl, node: str) -> list[dict]:
    """The accelerators of the Devices object's first group status, as the server holds them."""
    return devices(kubectl, node)["status"]["groups"][0]["accelerators"]


def pod_annotations(kubectl, name: str) -> dict:
    return (server(kubectl, "pod", name, "-n", PODS_NS).get("metadata") or {}).get("annotations") or {}


def events_on(kubectl, namespace: str, name: str) -> list[tuple[str, str, str, str, int]]:
    """``(kind, name, reason, message, count)`` of the Events on object ``name`` in ``namespace``."""
    items = json.loads(kubectl.stdout("get", "events", "-n", namespace, "-o", "json"))["items"]
    return sorted((e["involvedObject"]["kind"], e["involvedObject"]["name"], e["reason"], e["message"],
                   e.get("count", 1)) for e in items if e["involvedObject"].get("name") == name)


def wait_cached(agent, fetch, predicate, what: str):
    """Poll the agent's cache until ``predicate(fetch())`` (a change made with kubectl has arrived)."""
    return wait_for(fetch, predicate, what=what)[1]
