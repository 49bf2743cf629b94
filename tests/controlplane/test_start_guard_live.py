"""The start guard on a real API server (docs/availability.md "The start guard").

The scenario: a controller reconciled the seed cluster with an Instance running on its queue
(``custom-demo`` on the custom type ``a10g-12c128g``; Kueue's reservation written into the
ClusterQueue's status as Kueue would); then an uninstall and a namespace delete took every NodeFeature
and NFD took the feature labels off the Nodes. A new controller starts before the agents re-create their
NodeFeatures: its first pass sees every node unmanaged. Unguarded, it deleted the flavors, set the
accelerator queues ``HoldAndDrain`` and stopped the Instance (``spec.stop``, its Pod deleted) for good.
With the guard it holds those steps; the NodeFeatures and labels come back after its first pass, and the
run ends with every pool object, Instance and Pod as it was (same uids).
"""
from __future__ import annotations

import time

import yaml

from runtime.controller.startguard import destructive
from tests.controlplane.test_controller import loop_running
from tests.controlplane.test_reliability import (COMMON, CUSTOM, NS, POLICY, SYSTEM, _custom_demo, _get,
                                                 _in_process_controller, _list, _path, apply_step1, differences,
                                                 normalize, read_state, reset_cluster, session, wait_for)  # noqa: F401
from runtime.kube.session import MERGE_PATCH
from tests.seedfiles import seed_file

UID_KINDS = ("ResourceFlavor", "ClusterQueue", "LocalQueue", "InstanceType", "Instance", "Pod")


def _strip_feature_labels(session) -> None:
    """What NFD does once the NodeFeatures are gone: the propagated labels leave the Nodes."""
    prefixes = tuple(POLICY.labels.propagatedPrefixes)
    for node in _list(session, "Node"):
        gone = {k: None for k in node["metadata"].get("labels") or {} if k.startswith(prefixes)}
        session.call("patch", _path(session, "Node", None, node["metadata"]["name"]),
                     body={"metadata": {"labels": gone}}, content_type=MERGE_PATCH)


def _reserve(session, queue: str) -> None:
    """Kueue's reservation of the Instance's Workload on ``queue`` (its status, as Kueue writes it)."""
    session.call("patch", _path(session, "ClusterQueue", None, queue, "status"), content_type=MERGE_PATCH,
                 body={"status": {"reservingWorkloads": 1, "admittedWorkloads": 1}})


def test_a_start_whose_node_features_arrive_after_the_first_pass_changes_nothing(control_plane, session):
    cluster, kubectl = control_plane
    reset_cluster(session)
    apply_step1(session, kubectl)
    first = _in_process_controller(cluster.kubeconfig)
    try:
        with loop_running(first):
            assert first.wait_idle(60)
            kubectl("apply", "-f", str(seed_file("objects", "step4-instancetype-a10g-12c128g.yaml")))
            kubectl("apply", "-f", "-", input=yaml.safe_dump(_custom_demo()))
            wait_for("custom-demo's Pod", lambda: _get(session, "Pod", "custom-demo", NS))
            _reserve(session, CUSTOM)
            assert first.wait_idle(60)
    finally:
        first.stop()
    before = read_state(session)
    assert before[("Instance", NS, "custom-demo")]["spec"].get("stop") is not True
    assert (before[("ClusterQueue", "", CUSTOM)]["spec"].get("stopPolicy") or "None") == "None"

    # the uninstall: every NodeFeature gone with the namespace's contents, NFD's labels off the Nodes
    features = [nf for nf in _list(session, "NodeFeature", SYSTEM)]
    assert len(features) == 7
    session.call("delete", _path(session, "NodeFeature", SYSTEM))
    wait_for("the NodeFeatures gone", lambda: not _list(session, "NodeFeature", SYSTEM))
    _strip_feature_labels(session)

    second = _in_process_controller(cluster.kubeconfig)
    try:
        with loop_running(second):
            wait_for("the first pass", lambda: second.reconciles)
            blind = second.reconciles[0]
            held = [a for a in blind.deferred if destructive(a, second.last_pass.snapshot)]
            assert {(a.verb.value, a.kind) for a in held} >= {("delete", "ResourceFlavor"), ("apply", "ClusterQueue")}
            assert second.guard.missing == ["node-a10g", "node-cpu", "node-t4-a", "node-t4-b"]
            time.sleep(2)   # a while on the blind view: nothing destructive may be written meanwhile
            written = [w for r in second.reconciles for w in r.writes]
            assert [w for w in written if w.verb == "delete"] == []
            assert [w for w in written if w.kind in ("ClusterQueue", "Instance")] == []
            # the agents re-create their NodeFeatures; NFD puts the labels back
            kubectl("apply", "-f", str(COMMON / "nodefeatures.yaml"))
            kubectl("apply", "-f", str(COMMON / "nodes.yaml"))
            wait_for("the guard open", lambda: second.guard.opened)
            assert second.guard.opened == "every cache listed and every Node's facts present"
            assert second.wait_idle(60)
        after = read_state(session)
    finally:
        second.stop()
    assert differences(normalize(before), normalize(after)) == []
    for key, obj in before.items():
        if key[0] in UID_KINDS:
            assert after[key]["metadata"]["uid"] == obj["metadata"]["uid"], key
    assert after[("Instance", NS, "custom-demo")]["status"]["phase"] == before[("Instance", NS, "custom-demo")][
        "status"]["phase"]
    print(f"\n[start guard] first pass on the blind view held {len(held)} destructive steps "
          f"({sorted({f'{a.verb.value} {a.kind}' for a in held})}); opened after the NodeFeatures came back; "
          f"final state identical ({len(before)} objects, uids kept)")
