"""Labels that vanish for a minute, live (docs/node-facts-robustness.md).

On a real kube-apiserver + etcd: the seed cluster reconciled once, then every propagated feature
label stripped from every Node with kubectl (what an NFD restart does) while our NodeFeatures stay,
then the labels put back. Through the three phases the controller deletes and recreates nothing:
every ResourceFlavor, ClusterQueue, LocalQueue and InstanceType keeps its uid, and the InstanceType
table at the end is the table at the start.
"""
from __future__ import annotations

import yaml

from testing.localcluster.testing import wait_for
from tests.controlplane.test_controller import COMMON, ctl  # noqa: F401 - the seeded controller fixture

KINDS = ["resourceflavors.kueue.x-k8s.io", "clusterqueues.kueue.x-k8s.io", "localqueues.kueue.x-k8s.io",
         "instancetypes.worker.gpustack.ai"]


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
    wait_for(lambda: [k for n in nodes for k in _node_labels(ctl, n["metadata"]["name"]) if k.startswith(prefixes)],
             lambda left: not left, what="feature labels gone from the cache")
    gone = ctl.reconcile()
    assert gone.errors == []
    assert [(a.verb, a.kind, a.name) for a in gone.planned if a.verb in ("delete", "recreate")] == []
    assert _uids(kubectl) == uids
    assert kubectl.stdout("get", "instancetypes") == table

    kubectl("apply", "-f", str(COMMON / "nodes.yaml"))  # phase 3: the labels come back
    wait_for(lambda: [k for n in nodes for k in n["metadata"].get("labels") or {}
                      if k not in _node_labels(ctl, n["metadata"]["name"])],
             lambda missing: not missing, what="feature labels back in the cache")
    back = ctl.reconcile()
    assert back.errors == []
    assert [(a.verb, a.kind, a.name) for a in back.planned if a.verb in ("delete", "recreate")] == []
    assert _uids(kubectl) == uids
    assert kubectl.stdout("get", "instancetypes") == table
