"""The ``gpustack-node-devices`` answers on a real kube-apiserver + etcd (docs/concepts/pools-and-flavors.md "The AdmissionCheck `gpustack-node-devices`").

The seed cluster is applied as in test_controller.py and the controller loop runs in this process.
Kueue's CRDs are installed but Kueue's controller is not running in this cluster: nobody creates
Workloads from Pods, reserves quota or reacts to the check. So each test creates a Workload by hand
as Kueue's Pod integration would (``spec.queueName`` = the A10G pool's entrance, one PodSet
``main``), then writes its ``status`` itself as Kueue's scheduler does after reserving quota:
``status.admission`` (the ClusterQueue and the A10G ResourceFlavor for ``credits.gpustack.ai/nvidia``),
condition ``QuotaReserved`` True and the check ``Pending``. The controller must then write
``Ready`` / ``Retry`` with the rule file's message, as a server-side apply of the ``status``
subresource with field manager ``worker.gpustack.ai/node-devices``, and nothing on the next pass.
"""
from __future__ import annotations

import json
import time

import pytest
import yaml

from testing.hooks import ObservedController as Controller
from runtime.engine.policy import Policy
from runtime.kube.session import connect
from runtime.rules.loader import load_rules
from testing.localcluster.testing import get_json, wait_for
from tests.controlplane.test_controller import _apply_seed_cluster, _clean, _wait_for_events, loop_running

POLICY = Policy(load_rules())
NS = "default"
QUEUE = "gpustack--nvidia-a10g-linux-amd64"
ENTRANCE = "gpustack-fnv64-c4680bb149644f1c"
FLAVOR = "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d"
CHECK = "gpustack-node-devices"
MANAGER = "worker.gpustack.ai/node-devices"
FIGURES: dict[str, list[float]] = {}


def _get(kubectl, *args) -> dict:
    return get_json(kubectl, *args, managed_fields=True)


def _wait(fetch, predicate, timeout=30.0, what="condition"):
    return wait_for(fetch, predicate, timeout, what)


def _workload(name: str, gpus: str) -> dict:
    """A Workload as Kueue's Pod integration creates it for a Pod asking ``nvidia.com/gpu: <gpus>``."""
    resources = {"nvidia.com/gpu": gpus, "cpu": "100m"}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name, "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": ENTRANCE}},
            "spec": {"queueName": ENTRANCE, "podSets": [{"name": "main", "count": 1, "template": {"spec": {
                "containers": [{"name": "main", "image": "busybox",
                                "resources": {"requests": resources, "limits": resources}}]}}}]}}


def _reserve_quota(kubectl, name: str, gpus: int) -> None:
    """Write the status Kueue's scheduler writes when it reserves quota (check Pending)."""
    status = {"admission": {"clusterQueue": QUEUE, "podSetAssignments": [{
                  "name": "main", "count": 1, "flavors": {"credits.gpustack.ai/nvidia": FLAVOR},
                  "resourceUsage": {"credits.gpustack.ai/nvidia": str(gpus * 1600000)}}]},
              "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                              "message": f"Quota reserved in ClusterQueue {QUEUE}",
                              "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}],
              "admissionChecks": [{"name": CHECK, "state": "Pending", "message": "",
                                   "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}]}
    kubectl("patch", "workload", name, "-n", NS, "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": status}))


def _clean_workloads(kubectl) -> None:
    kubectl("delete", "workloads.kueue.x-k8s.io", "--all", "-n", NS, "--wait=true")


@pytest.fixture(scope="module")
def live(control_plane):
    cluster, kubectl = control_plane
    _clean(kubectl)
    _clean_workloads(kubectl)
    _apply_seed_cluster(kubectl)
    controller = Controller(connect(cluster.kubeconfig), POLICY, coalesce_seconds=0.1, env={},
                            fit_coalesce_seconds=0)
    controller.start()
    assert controller.reconcile().errors == []
    yield controller   # each test runs the loop while it waits for the verdict, then stops it
    controller.stop()
    _clean_workloads(kubectl)
    _clean(kubectl)
    for key, values in FIGURES.items():
        print(f"\n[admission check figure] {key}: {', '.join(f'{v:.3f}' for v in values)}")


def _check(wl: dict) -> dict:
    return next((c for c in (wl.get("status") or {}).get("admissionChecks") or [] if c.get("name") == CHECK), {})


def _answer_fields(wl: dict) -> dict:
    """The managedFields entry of the check's field manager."""
    entries = [m for m in wl["metadata"].get("managedFields") or [] if m.get("manager") == MANAGER]
    assert len(entries) == 1, wl["metadata"].get("managedFields")
    return entries[0]


def _second_pass_writes_nothing(controller, kubectl, name: str) -> None:
    """After the loop (stopped) went idle, one more reconcile writes nothing."""
    before = _get(kubectl, "workload", name, "-n", NS)["metadata"]["resourceVersion"]
    again = controller.reconcile()
    assert again.errors == [] and again.writes == [] and again.planned == []
    assert _get(kubectl, "workload", name, "-n", NS)["metadata"]["resourceVersion"] == before


def _answered(controller, kubectl, name: str, gpus: int) -> tuple[float, dict]:
    """Reserve quota as Kueue does with the loop running; (seconds to the verdict, the Workload)."""
    with loop_running(controller):
        assert controller.wait_idle(20)
        # no quota reserved yet: the controller leaves the Workload alone
        assert (_get(kubectl, "workload", name, "-n", NS).get("status") or {}).get("admissionChecks") is None
        _reserve_quota(kubectl, name, gpus)
        seconds, wl = _wait(lambda: _get(kubectl, "workload", name, "-n", NS),
                            lambda w: _check(w).get("state") not in (None, "Pending"), what="check answered")
        assert controller.wait_idle(20)
    return seconds, wl


def test_one_whole_a10g_is_ready(live, kubectl):
    kubectl("apply", "-f", "-", input=yaml.safe_dump(_workload("pod-whole-1", "1")))
    seconds, wl = _answered(live, kubectl, "pod-whole-1", 1)
    FIGURES.setdefault("status write (quota reserved, check Pending) -> verdict, seconds", []).append(seconds)
    checks = wl["status"]["admissionChecks"]
    assert len(checks) == 1
    when = checks[0].pop("lastTransitionTime")
    assert checks == [{"name": CHECK, "state": "Ready", "message": "node node-a10g can hold the request"}]
    assert time.strptime(when, "%Y-%m-%dT%H:%M:%SZ")
    fields = _answer_fields(wl)
    assert (fields["operation"], fields["subresource"], fields["apiVersion"]) == ("Apply", "status", "kueue.x-k8s.io/v1beta2")
    assert fields["fieldsV1"] == {"f:status": {"f:admissionChecks": {f'k:{{"name":"{CHECK}"}}': {
        ".": {}, "f:lastTransitionTime": {}, "f:message": {}, "f:name": {}, "f:state": {}}}}}
    # the rest of the status is Kueue's and untouched
    assert wl["status"]["admission"]["podSetAssignments"][0]["flavors"] == {"credits.gpustack.ai/nvidia": FLAVOR}
    assert [c["type"] for c in wl["status"]["conditions"]] == ["QuotaReserved"]
    _second_pass_writes_nothing(live, kubectl, "pod-whole-1")


def test_two_whole_on_the_a10g_flavor_retry(live, kubectl):
    kubectl("apply", "-f", "-", input=yaml.safe_dump(_workload("pod-whole-2", "2")))
    seconds, wl = _answered(live, kubectl, "pod-whole-2", 2)
    FIGURES.setdefault("status write (quota reserved, check Pending) -> verdict, seconds", []).append(seconds)
    check = _check(wl)
    check.pop("lastTransitionTime")
    assert check == {"name": CHECK, "state": "Retry", "requeueAfterSeconds": 30,
                     "message": f"no node of flavor {FLAVOR} can hold the request now"}
    assert _answer_fields(wl)["fieldsV1"] == {"f:status": {"f:admissionChecks": {f'k:{{"name":"{CHECK}"}}': {
        ".": {}, "f:lastTransitionTime": {}, "f:message": {}, "f:name": {}, "f:requeueAfterSeconds": {},
        "f:state": {}}}}}
    # the Retry answer is also an Event on the Workload (rules/controller.yaml events.workloadRetry)
    assert _wait_for_events(kubectl, wl["metadata"]["uid"], "AdmissionCheckRetry") == [(
        "Normal", "AdmissionCheckRetry", f"admission check {CHECK} answered Retry: no node of flavor {FLAVOR} "
        "can hold the request now", "accelpolicy")]
    _second_pass_writes_nothing(live, kubectl, "pod-whole-2")


def _a10g_ledger(kubectl, row: dict) -> None:
    """Write node-a10g's Devices ledger as its agent would (one A10G, ``row`` its state)."""
    status = {"groups": [{"id": "a10g", "manufacturer": "nvidia", "accelerators": [
        {"id": "GPU-e0587d2e-127c-4fb8-e2c1-6e517529f575", "index": 0, **row}]}]}
    kubectl("patch", "devices.worker.gpustack.ai", "node-a10g", "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": status}))


def test_retry_is_judged_again_after_the_retry_delay(control_plane, live, kubectl, tmp_path):
    """A Retry that still holds quota (no Kueue here to evict it) becomes Ready once the ledger frees
    up and ``retryAfterSeconds`` has passed (whichever comes later: the ledger's event, or the pass the
    loop requeued for the end of the delay). The delay is 3 s in a copy of rules/ so the test does
    not wait 30 s."""
    import shutil

    from runtime.rules.loader import DEFAULT_RULES_DIR
    root = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, root)
    path = root / "pools" / "queues.yaml"
    path.write_text(path.read_text().replace("retryAfterSeconds: 30", "retryAfterSeconds: 3"))
    policy = Policy(load_rules(root))
    assert policy.queues.admissionCheck.retryAfterSeconds == 3
    cluster, _ = control_plane
    controller = Controller(connect(cluster.kubeconfig), policy, coalesce_seconds=0.1, env={}, fit_coalesce_seconds=0)
    controller.start()
    try:
        _a10g_ledger(kubectl, {"mode": 1, "allocated": 1600000})
        kubectl("apply", "-f", "-", input=yaml.safe_dump(_workload("pod-whole-held", "1")))
        seconds, wl = _answered(controller, kubectl, "pod-whole-held", 1)
        check = _check(wl)
        assert (check["state"], check["message"], check["requeueAfterSeconds"]) == (
            "Retry", f"no node of flavor {FLAVOR} can hold the request now", 3)
        with loop_running(controller):
            _a10g_ledger(kubectl, {"mode": 0, "remaining": 1600000})
            # the first test's Workload was answered Ready and its Pod never started: it holds the freed A10G
            # (docs/concepts/out-of-service.md "Promises"), so the Retry is judged again and stays a Retry
            time.sleep(8)   # more than two 3 s delays: without the promise it would read Ready by now
            assert _check(_get(kubectl, "workload", "pod-whole-held", "-n", NS))["state"] == "Retry"
            assert controller.last_pass.verdicts[(NS, "pod-whole-held")].state == "Retry"
            kubectl("delete", "workload", "pod-whole-1", "-n", NS, "--wait=true")   # the promise ends
            waited, wl = _wait(lambda: _get(kubectl, "workload", "pod-whole-held", "-n", NS),
                               lambda w: _check(w).get("state") == "Ready", what="Retry -> Ready")
            FIGURES.setdefault("ledger freed -> Retry re-judged Ready (delay 3 s), seconds", []).append(waited)
            assert controller.wait_idle(20)
        check = _check(wl)
        assert check["message"] == "node node-a10g can hold the request" and "requeueAfterSeconds" not in check
        assert check["lastTransitionTime"] >= wl["status"]["conditions"][0]["lastTransitionTime"]
        _second_pass_writes_nothing(controller, kubectl, "pod-whole-held")
    finally:
        _a10g_ledger(kubectl, {"mode": 0, "remaining": 1600000})
        controller.stop()
