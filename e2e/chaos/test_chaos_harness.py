"""The fault suite's own parts, without a cluster: the load generator's verdict on each answer, the checker's
comparison of a cluster with the state derived from its facts (seed snapshot step 5's repoint), and the
counts the suite reports per fault."""
from __future__ import annotations

import copy

import pytest

from chaos import checker
from chaos.load import MIX, PRIVILEGED_DENIED, SLICE_DENIED, classify_error, instance, judge_create, pod, units_of
from runtime.engine.policy import Policy
from runtime.engine.pools import derive
from runtime.rules.loader import load_rules
from runtime.snapshots import load_snapshot
from tests.seedfiles import FIXTURES

POLICY = Policy(load_rules())
OURS_DOWN = ('Internal error occurred: failed calling webhook "pods.mutation.worker.gpustack.ai": failed to call webhook: '
             'Post "https://gpustack-operator-worker.gpustack-system.svc:443/mutate-pods?timeout=10s": dial tcp '
             '10.96.12.7:443: connect: connection refused')
KUEUE_DOWN = ('Internal error occurred: failed calling webhook "mpod.kb.io": failed to call webhook: Post '
              '"https://kueue-webhook-service.kueue-system.svc:443/mutate--v1-pod?timeout=10s": context deadline exceeded')


# -- the load generator's verdicts --------------------------------------------------------------------------
def test_units_are_the_webhooks_fold():
    assert [units_of(p) for p in (5, 20, 50)] == ["80k", "320k", "800k"]   # seed step 3: 20% -> 320k


def test_the_mix_cycles_every_kind_of_request():
    assert set(MIX) == {"pod-sliced", "pod-invalid", "instance", "instance-privileged"}
    p = pod("n", "ns", "run", "gpustack-fnv64-c4680bb149644f1c", 3)
    assert p["spec"]["schedulingGates"] == [{"name": "chaos.accelpolicy.dev/hold"}]
    assert p["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpustack-fnv64-c4680bb149644f1c"
    assert p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu.sliced.memory-percentage"] == "20"
    assert instance("n", "ns", "run", "t", 1)["spec"]["stop"] is True
    assert instance("n", "ns", "run", "t", 1, privileged=True)["spec"]["privileged"] is True


def _stored_pod(units):
    res = {"limits": {"nvidia.com/gpu.sliced": "1"}, "requests": {}}
    if units:
        res["limits"]["nvidia.com/gpu.sliced.units"] = res["requests"]["nvidia.com/gpu.sliced.units"] = units
    return {"spec": {"containers": [{"name": "main", "resources": res}]}}


@pytest.mark.parametrize("mix, status, reason, message, body, want", [
    ("pod-sliced", 201, "", "", _stored_pod("320k"), "ok"),              # i=3: 20%
    ("pod-sliced", 201, "", "", _stored_pod("999"), "wrong"),
    ("pod-sliced", 201, "", "", _stored_pod(None), "unreviewed"),        # no webhook configuration called us
    ("instance", 201, "", "", {"spec": {"imagePullPolicy": "IfNotPresent"}}, "ok"),
    ("instance", 201, "", "", {"spec": {}}, "unreviewed"),
    ("instance-privileged", 422, "Invalid",
     'admission webhook "instances.validation.worker.gpustack.ai" denied the request: Instance.worker.gpustack.ai "x" '
     f'is invalid: {PRIVILEGED_DENIED}: enable the "instance-privileged-allowed" setting to allow it (upgraded rules)',
     None, "ok"),
    ("instance-privileged", 201, "", "", {"spec": {"privileged": True}}, "unreviewed"),
    ("pod-invalid", 422, "Invalid",
     f'admission webhook "pods.validation.worker.gpustack.ai" denied the request: Pod "x" is invalid: {SLICE_DENIED}',
     None, "ok"),
    ("pod-sliced", 500, "InternalError", OURS_DOWN, None, "webhook-ours"),
    ("instance-privileged", 500, "InternalError", OURS_DOWN.replace("pods.mutation", "instances.validation"), None,
     "webhook-ours"),
    ("pod-sliced", 500, "InternalError", KUEUE_DOWN, None, "webhook-other"),
    ("pod-sliced", 403, "Forbidden",
     'admission webhook "pods.mutation.worker.gpustack.ai" denied the request: no instance type fronts local queue q',
     None, "wrong"),
    ("instance", 0, "Unreachable", "HTTPSConnectionPool(host='127.0.0.1', port=40001): Max retries exceeded", None,
     "unavailable"),
    ("instance", 500, "InternalError", "etcdserver: request timed out", None, "unavailable"),
    ("instance", 503, "ServiceUnavailable", "", None, "unavailable"),
    ("instance", 409, "AlreadyExists", 'instances.worker.gpustack.ai "x" already exists', None, "other"),
])
def test_judge_create(mix, status, reason, message, body, want):
    assert judge_create(mix, 3, status, reason, message, body) == want


def test_a_delete_error_is_classified_like_a_create_error():
    assert classify_error(0, "ReadTimeoutError", "Read timed out. (read timeout=20.0)") == "unavailable"
    assert classify_error(500, "InternalError", OURS_DOWN) == "webhook-ours"


# -- the checker ---------------------------------------------------------------------------------------------
@pytest.fixture()
def converged():
    """The step-5 repoint snapshot's facts plus the pool objects the controller would have written."""
    snap = load_snapshot([str(FIXTURES / "seed" / "step5-repoint")])
    facts = [copy.deepcopy(o) for kind in snap.objects for o in snap.list(kind)]
    state = derive(POLICY, snap, live=True, settings_namespace=checker.SYSTEM)
    live = [o for o in facts if o["kind"] not in checker.POOL_KINDS]
    for kind in checker.POOL_KINDS:
        for o in state.view(POLICY, kind, snap):
            o = copy.deepcopy(o)
            o.setdefault("kind", kind)
            live.append(o)
    for o in live:
        o["metadata"].setdefault("uid", f"uid-{o['kind']}-{o['metadata']['name']}")
    return live


def _find(objects, kind, name):
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


def test_a_cluster_that_holds_its_derivation_has_no_drift(converged):
    assert checker.drift(POLICY, converged) == []
    table = checker.derived_table(POLICY, converged)
    assert table.splitlines()[0].split() == ["NAME", "ENTRANCE", "UNIT(CPU/RAM)/STORAGE", "ACCELERATOR(EX/SH/SL/PT)",
                                             "CPU", "PHASE"]
    assert len(table.splitlines()) == 9   # the step-5 table's eight types


def test_drift_names_a_wrong_status_a_missing_flavor_and_a_stray_queue(converged):
    t4 = _find(converged, "InstanceType", "gpustack--nvidia-tesla-t4-linux-amd64")
    t4["status"]["summary"]["accelerator"] = "5/5 50/50 500/500 0/0"
    flavor = next(o for o in converged if o["kind"] == "ResourceFlavor")
    converged.remove(flavor)
    stray = copy.deepcopy(_find(converged, "ClusterQueue", "gpustack--nvidia-tesla-t4-linux-amd64"))
    stray["metadata"]["name"] = "gpustack--gone-linux-amd64"
    converged.append(stray)
    found = checker.drift(POLICY, converged)
    assert ("InstanceType gpustack--nvidia-tesla-t4-linux-amd64: status.summary.accelerator: expected "
            "'4/5 40/50 100/500 0/0', got '5/5 50/50 500/500 0/0'") in found
    assert f"ResourceFlavor {flavor['metadata']['name']}: missing" in found
    assert "ClusterQueue gpustack--gone-linux-amd64: present but not derived" in found
    assert any(f.startswith("kubectl get instancetypes:") for f in found)


def test_instance_pods_duplicates_and_orphans(converged):
    inst = _find(converged, "Instance", "custom-demo")

    def owned_pod(name, uid):
        return {"kind": "Pod", "apiVersion": "v1",
                "metadata": {"name": name, "namespace": "default", "uid": f"pod-{name}",
                             "ownerReferences": [{"kind": "Instance", "name": "x", "uid": uid, "controller": True}]}}
    one = checker.instance_pods(converged + [owned_pod("custom-demo", inst["metadata"]["uid"])])
    assert one == {"pods": {"default/custom-demo": ["pod-custom-demo"]}, "duplicates": [], "orphans": []}
    two = checker.instance_pods(converged + [owned_pod("custom-demo", inst["metadata"]["uid"]),
                                             owned_pod("custom-demo-2", inst["metadata"]["uid"]),
                                             owned_pod("left-over", "uid-of-a-deleted-instance")])
    assert two["duplicates"] == ["default/custom-demo"] and two["orphans"] == ["default/left-over"]


def test_admin_objects_and_pool_identity(converged):
    admin = checker.admin_fingerprints(POLICY, converged)
    assert "Instance default/custom-demo" in admin
    assert not any(k.startswith("InstanceType gpustack--") for k in admin)   # derived types are ours
    pools = checker.pool_identity(converged)
    after = copy.deepcopy(converged)
    _find(after, "Instance", "custom-demo")["spec"]["stop"] = True
    _find(after, "Instance", "custom-demo")["status"] = {"phase": "Stopped"}   # status is not the administrator's
    cq = _find(after, "ClusterQueue", "gpustack--nvidia-tesla-t4-linux-amd64")
    cq["metadata"]["uid"] = "new-uid"
    cq["status"] = {"pendingWorkloads": 3}                                    # Kueue's status is ignored
    assert checker.changed(admin, checker.admin_fingerprints(POLICY, after)) == ["Instance default/custom-demo: changed"]
    assert checker.identity_changes(pools, checker.pool_identity(after)) == [
        "ClusterQueue gpustack--nvidia-tesla-t4-linux-amd64: re-created (uid uid-Clus -> new-uid)"]
    load_object = copy.deepcopy(_find(after, "Instance", "custom-demo"))
    load_object["metadata"].update(name="load-1", labels={"chaos.accelpolicy.dev/load": "r"})
    assert "Instance default/load-1" not in checker.admin_fingerprints(POLICY, after + [load_object])


def test_restart_counts():
    pods = [{"kind": "Pod", "metadata": {"name": "a", "namespace": "gpustack-system"},
             "status": {"containerStatuses": [{"restartCount": 2}, {"restartCount": 1}]}},
            {"kind": "Pod", "metadata": {"name": "b", "namespace": "default"}, "status": {}}]
    assert checker.restart_counts(pods) == {"a": 3}


def test_answers_in_the_uninstall_gap_are_counted_apart(tmp_path):
    """helm-reinstall's gap (faults.helm_reinstall): failed and unreviewed creates inside it are the
    documented outcome, reported in gap_classes; the same answers outside it are failures."""
    import json as _json
    from chaos.suite import FaultResult, Suite
    suite = Suite.__new__(Suite)
    suite.answers = tmp_path / "answers.jsonl"
    lines = [{"t": 1.0, "op": "create", "class": "webhook-ours"}, {"t": 5.0, "op": "create", "class": "unreviewed"},
             {"t": 6.0, "op": "create", "class": "ok"}, {"t": 9.0, "op": "create", "class": "webhook-ours"},
             {"t": 9.5, "op": "delete", "class": "ok"}]
    suite.answers.write_text("\n".join(_json.dumps(x) for x in lines) + "\n")
    res = FaultResult("helm-reinstall", 1, "", False, gap=(0.5, 6.0), excused=("webhook-ours", "unreviewed"),
                      gap_what="in the uninstall gap")
    suite.count_answers(res, 0.0, 10.0)
    assert res.classes == {"webhook-ours": 2, "unreviewed": 1, "ok": 1}
    assert res.gap_classes == {"webhook-ours": 1, "unreviewed": 1, "ok": 1}
    assert res.reviews == 4 and res.failed == 1
    res.ready_s = res.table_s = res.converged_s = 1.0
    assert res.problems() == ["1 reviews failed: {'webhook-ours': 2, 'unreviewed': 1, 'ok': 1}"]
    res.gap = (0.5, 10.0)
    suite.count_answers(res, 0.0, 10.0)
    assert res.failed == 0 and res.problems() == []
    from chaos.suite import markdown
    assert "| 4 / 0 (+3 in the uninstall gap) |" in markdown([res])
    # stop-node excuses only failed calls to our webhooks while the node goes down: a create stored
    # unreviewed there is still a failure
    res.excused = ("webhook-ours",)
    suite.count_answers(res, 0.0, 10.0)
    assert res.failed == 1 and res.problems()[1:] == ["1 creates stored without our review"]


def test_a_replica_not_yet_ready_fails_closed_not_wrong():
    """A restarted admission replica reached before the Service dropped it answers the app's "not ready"
    denial: the review failed closed (webhook-ours), it was not judged wrongly."""
    from chaos.load import NOT_READY
    from runtime.webhook.app import NOT_READY as APP_NOT_READY
    assert NOT_READY == APP_NOT_READY
    message = ('admission webhook "pods.mutation.worker.gpustack.ai" denied the request: Internal error occurred: '
               + NOT_READY)
    assert classify_error(500, "InternalError", message) == "webhook-ours"
    assert classify_error(500, "InternalError", message.replace(NOT_READY, "something else")) == "wrong"
