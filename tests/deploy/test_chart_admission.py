"""The chart's admission Deployment (docs/availability.md): `accelpolicy admission`
replicas behind the webhook Service, reading the controller's serving certificate, with least privilege
derived from the code, a PDB only with more than one replica and an HPA when asked."""
from __future__ import annotations

from tests.deploy import rbacderive
from tests.deploy.test_chart import _diff, _granted, _hardened, by_kind, render

NAME = "gpustack-operator-worker-admission"


def _container(workload: dict) -> dict:
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    return container


def test_admission_deployment_serves_the_webhooks_from_the_shared_certificate():
    objects = by_kind(render())
    deploy = objects[("Deployment", NAME)]
    spec = deploy["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "gpustack-admission"
    assert pod["priorityClassName"] == "system-cluster-critical"
    # zones preferred; nodes required (both replicas on one stopped node failed every review: stop-node)
    assert [(t["topologyKey"], t["whenUnsatisfiable"], t.get("nodeTaintsPolicy"), t["matchLabelKeys"],
             t["labelSelector"]["matchLabels"]) for t in pod["topologySpreadConstraints"]] == [
        ("topology.kubernetes.io/zone", "ScheduleAnyway", None, ["pod-template-hash"], spec["selector"]["matchLabels"]),
        ("kubernetes.io/hostname", "DoNotSchedule", "Honor", ["pod-template-hash"], spec["selector"]["matchLabels"])]
    c = _container(deploy)
    assert c["args"] == ["admission", "--rules=/etc/accelpolicy/rules", "--webhook-host=0.0.0.0", "--webhook-port=9443",
                         "--webhook-cert-secret=gpustack-operator-worker-webhook-tls",
                         "--webhook-cert-dir=/run/accelpolicy/webhook-tls", "--view-refresh-seconds=0",
                         "--webhook-drain-seconds=5"]
    assert [(e["name"], e.get("value")) for e in c["env"]] == [("KUBERNETES_POD_NAMESPACE", None),
                                                          ("ACCELPOLICY_RULES_CONFIGMAP", "accelpolicy-rules")]
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "webhook", "scheme": "HTTPS"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "webhook", "scheme": "HTTPS"}
    assert c["ports"] == [{"name": "webhook", "containerPort": 9443, "protocol": "TCP"}]
    assert c["lifecycle"] == {"preStop": {"sleep": {"seconds": 10}}} and pod["terminationGracePeriodSeconds"] == 40
    assert "cpu" not in c["resources"]["limits"] and c["resources"]["requests"]["cpu"] == "100m"
    _hardened(pod, c)
    assert {m["mountPath"]: m.get("readOnly", False) for m in c["volumeMounts"]} == {
        "/etc/accelpolicy/rules": True, "/run/accelpolicy/webhook-tls": False, "/tmp": False}
    service = objects[("Service", "gpustack-operator-worker")]   # the one the webhook configurations name
    assert service["spec"]["selector"] == spec["selector"]["matchLabels"]
    assert service["spec"]["ports"] == [{"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"}]
    assert objects[("PodDisruptionBudget", NAME)]["spec"] == {"minAvailable": 1, "selector": spec["selector"]}
    controller = _container(objects[("Deployment", "gpustack-operator-worker")])
    assert "--webhook-registration-only" in controller["args"]
    assert "--webhook-service=$(KUBERNETES_POD_NAMESPACE)/gpustack-operator-worker:443" in controller["args"]


def test_one_replica_has_no_disruption_budget_and_an_hpa_replaces_the_count():
    single = by_kind(render("admission.replicas=1"))
    assert single[("Deployment", NAME)]["spec"]["replicas"] == 1
    assert ("PodDisruptionBudget", NAME) not in single
    scaled = by_kind(render("admission.autoscaling.enabled=true"))
    assert "replicas" not in scaled[("Deployment", NAME)]["spec"]
    hpa = scaled[("HorizontalPodAutoscaler", NAME)]["spec"]
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": NAME}
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (2, 6)
    assert hpa["metrics"] == [{"type": "Resource", "resource": {"name": "cpu", "target": {
        "type": "Utilization", "averageUtilization": 70}}}]
    assert ("PodDisruptionBudget", NAME) in scaled
    plain = by_kind(render("admission.priorityClassName=", "admission.topologySpread=false"))
    pod = plain[("Deployment", NAME)]["spec"]["template"]["spec"]
    assert "priorityClassName" not in pod and "topologySpreadConstraints" not in pod


def test_admission_rbac_grants_exactly_what_the_code_reads():
    docs = render()
    granted, objects, rules = _granted(docs, NAME)
    assert _diff(rbacderive.admission_needs(), granted) == []
    for rule in rules:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], rule
        assert not set(rule["verbs"]) - {"get", "list", "watch"}, rule   # it writes nothing
    secrets, rules_configmap = objects[("Role", NAME)]["rules"]
    assert secrets["resourceNames"] == ["gpustack-settings", "gpustack-operator-worker-webhook-tls"]
    assert rules_configmap == {"apiGroups": [""], "resources": ["configmaps"],
                               "resourceNames": ["accelpolicy-rules", "accelpolicy-rules-serving"],
                               "verbs": ["get"]}   # the leader's verdict and the generation in force, read only
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        assert objects[(kind, NAME)]["roleRef"]["name"] == NAME
        assert objects[(kind, NAME)]["subjects"] == [{"kind": "ServiceAccount", "name": "gpustack-admission",
                                                      "namespace": "gpustack-system"}]
