"""The controller's background audit on a real API server (docs/audit.md "The background audit"): Report objects written live
(changed ones only), the result metric, an AuditFailed Event on a newly failing object."""
from __future__ import annotations

import json

from loguru import logger

from runtime.controller.backgroundaudit import BackgroundAudit
from runtime.engine.policy import Policy
from runtime.kube.session import connect
from runtime.report.results import summary
from runtime.rules.loader import load_rules
from testing.hooks import ObservedController as Controller
from testing.localcluster.crds import install_crds, openreports_crds
from tests.controlplane.test_controller import _apply_seed_cluster, _clean

POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "two-families", "namespace": "default",
                    "labels": {"kueue.x-k8s.io/queue-name": "gpustack-fnv64-c4680bb149644f1c"}},
       "spec": {"containers": [{"name": "main", "image": "x",
                                "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpu.shared": "2"}}}]}}


def test_the_background_audit_writes_reports_and_events(control_plane):
    cluster, kubectl = control_plane
    install_crds(kubectl, openreports_crds())
    _clean(kubectl)
    kubectl("delete", "pod", "two-families", "-n", "default", "--ignore-not-found", "--wait=true")
    _apply_seed_cluster(kubectl)
    controller = Controller(connect(cluster.kubeconfig), Policy(load_rules()), coalesce_seconds=0.1, env={},
                            fit_coalesce_seconds=0)
    controller.start()
    try:
        controller.reconcile()
        kubectl("apply", "-f", "-", input=json.dumps(POD))
        controller.cache["Pod"].observe(json.loads(kubectl.stdout("get", "pod", "two-families", "-n", "default",
                                                                  "-o", "json")))
        background = BackgroundAudit(controller, interval=0)
        lines: list[str] = []
        sink = logger.add(lambda m: lines.append(m.record["message"]), level="INFO")
        try:
            results = background.run_once()
        finally:
            logger.remove(sink)
        counts = summary(results)
        assert [line.split(" in ")[0] for line in lines if line.startswith("background audit:")] == [
            f"background audit: {sum(len(v) for v in controller.cache.snapshot().objects.values())} objects, "
            f"{counts['pass']} pass, 1 fail, 0 warn, 0 error, {counts['skip']} skip"]
        assert [(r.result, r.policy, r.rule) for r in results if r.resource.name == "two-families"] == [
            ("pass", "pods-mutation", ""), ("fail", "pods-validation", "one-accelerator-family")]
        report = json.loads(kubectl.stdout("get", "reports.openreports.io", "accelpolicy-audit", "-n", "default",
                                           "-o", "json"))
        assert report["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "accelpolicy"}
        assert [(r["result"], r["policy"]) for r in report["results"]] == [("pass", "pods-mutation"),
                                                                          ("fail", "pods-validation")]
        events = json.loads(kubectl.stdout("get", "events", "-n", "default", "--field-selector",
                                           "reason=AuditFailed,involvedObject.name=two-families", "-o", "json"))
        assert [e["message"] for e in events["items"]] == [
            "pods-validation/one-accelerator-family: spec: Forbidden: a Pod may request only one accelerator family, found "
            "[exclusive shared]"]
        metrics = {s.labels["result"]: s.value for m in background.registry.collect() for s in m.samples}
        assert metrics["fail"] == 1.0
        # a second run with nothing changed writes nothing and raises no second Event
        version = report["metadata"]["resourceVersion"]
        background.run_once()
        again = json.loads(kubectl.stdout("get", "reports.openreports.io", "accelpolicy-audit", "-n", "default",
                                          "-o", "json"))
        assert again["metadata"]["resourceVersion"] == version
        events = json.loads(kubectl.stdout("get", "events", "-n", "default", "--field-selector",
                                           "reason=AuditFailed,involvedObject.name=two-families", "-o", "json"))
        assert len(events["items"]) == 1
    finally:
        controller.stop()
        kubectl("delete", "pod", "two-families", "-n", "default", "--ignore-not-found", "--wait=false")
        for kind in ("reports.openreports.io", "clusterreports.openreports.io"):   # what this run applied
            kubectl("delete", kind, "-A", "-l", "app.kubernetes.io/managed-by=accelpolicy", "--ignore-not-found")
        _clean(kubectl)
