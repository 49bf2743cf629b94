"""Labels that vanish for a minute, live (issue 13 item 13; docs/node-facts-robustness.md).

On a real kube-apiserver + etcd: the seed cluster reconciled once, then every propagated feature
label stripped from every Node with kubectl (what an NFD restart does) while our NodeFeatures stay,
then the labels put back. Through the three phases the controller deletes and recreates nothing:
every ResourceFlavor, ClusterQueue, LocalQueue and InstanceType keeps its uid, and the InstanceType
table at the end is the table at the start.
"""
from __future__ import annotations

import time

import pytest
import yaml

from runtime.engine.policy import Policy
from runtime.kube.session import connect
from runtime.rules.loader import load_rules
from testing.hooks import ObservedController as Controller
from tests.controlplane.test_controller import COMMON, _apply_seed_cluster, _clean

KINDS = ["resourceflavors.kueue.x-k8s.io", "clusterqueues.kueue.x-k8s.io", "localqueues.kueue.x-k8s.io",
         "instancetypes.worker.gpustack.ai"]


@pytest.fixture(scope="module")
def ctl(control_plane):
    cluster, kubectl = control_plane
    _clean(kubectl)
    _apply_seed_cluster(kubectl)
    controller = Controller(connect(cluster.kubeconfig), Policy(load_rules()), coalesce_seconds=0.1, env={},
                            fit_coalesce_seconds=0)
    controller.start()
    yield controller
    controller.stop()
    _clean(kubectl)


def _uids(kubectl) -> dict[str, str]:
    out = {}
    for kind in KINDS:
        text = kubectl.stdout("get", kind, "-A", "-o",
                              "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name}={.metadata.uid}{\"\\n\"}{end}")
        for line in text.split():
            key, uid = line.rsplit("=", 1)
            out[f"{kind}:{key}"] = uid
    return out


def _node_labels(ctl, name: str) -> dict[str, str]:
    return (ctl.cache.get("Node", name) or {}).get("metadata", {}).get("labels") or {}


def _until(check, timeout=30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


def test_pools_hold_while_node_feature_labels_vanish(ctl, kubectl):
    first = ctl.reconcile()
    assert first.errors == []
    ctl.reconcile()
    table = kubectl.stdout("get", "instancetypes")
    uids = _uids(kubectl)
    assert len([k for k in uids if k.startswith("resourceflavors")]) >= 4

    prefixes = tuple(ctl.policy.labels.propagatedPrefixes)
    nodes = [d for d in yaml.safe_load_all((COMMON / "nodes.yaml").read_text()) if d]
    for node in nodes:  # phase 2: NFD restarts and strips the feature labels
        name = node["metadata"]["name"]
        keys = [k for k in node["metadata"].get("labels") or {} if k.startswith(prefixes)]
        kubectl("label", "node", name, *[f"{k}-" for k in keys])
    assert _until(lambda: not any(k.startswith(prefixes) for n in nodes
                                  for k in _node_labels(ctl, n["metadata"]["name"])))
    gone = ctl.reconcile()
    assert gone.errors == []
    assert [(a.verb, a.kind, a.name) for a in gone.planned if a.verb in ("delete", "recreate")] == []
    assert _uids(kubectl) == uids
    assert kubectl.stdout("get", "instancetypes") == table

    kubectl("apply", "-f", str(COMMON / "nodes.yaml"))  # phase 3: the labels come back
    assert _until(lambda: all(k in _node_labels(ctl, n["metadata"]["name"]) for n in nodes
                              for k in n["metadata"].get("labels") or {}))
    back = ctl.reconcile()
    assert back.errors == []
    assert [(a.verb, a.kind, a.name) for a in back.planned if a.verb in ("delete", "recreate")] == []
    assert _uids(kubectl) == uids
    assert kubectl.stdout("get", "instancetypes") == table
