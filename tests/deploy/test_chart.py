"""The Helm chart (deploy/chart/): `helm lint`, `helm template` in its three modes parsed into the
expected objects, no drift from crds/ and rules/, and RBAC equal to what the code calls
(tests/deploy/rbacderive.py). helm is built from its Go module by `make helm` (deploy/tools/build.sh)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from runtime.controller.leader import LEASE_NAME
from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules
from runtime.rules.vocabulary import controller_users
from tests.deploy import rbacderive

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "chart"
NS = "gpustack-system"


def _helm() -> str:
    path = subprocess.run(["bash", str(REPO / "deploy/tools/build.sh"), "--print", "helm"], check=True,
                          capture_output=True, text=True).stdout.strip()
    if not Path(path).is_file():
        pytest.skip(f"helm is not built ({path}): run `make helm` (builds it from its Go module)")
    return path


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([_helm(), *args], capture_output=True, text=True, check=check, timeout=120)


def render(*sets: str, crds: bool = False, values: dict | None = None, tmp: Path | None = None) -> list[dict]:
    args = ["template", "acc", str(CHART), "-n", NS]
    for s in sets:
        args += ["--set", s]
    if crds:
        args.append("--include-crds")
    if values is not None:
        path = tmp / "values.yaml"
        path.write_text(yaml.safe_dump(values))
        args += ["-f", str(path)]
    return [d for d in yaml.safe_load_all(helm(*args).stdout) if d]


def by_kind(docs: list[dict]) -> dict[tuple[str, str], dict]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def test_helm_lint_passes():
    result = helm("lint", str(CHART), "--strict")
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


def test_default_render_has_exactly_these_objects():
    objects = by_kind(render())
    assert sorted(objects) == sorted([
        ("ClusterRole", "gpustack-operator-device-manager"), ("ClusterRole", "gpustack-operator-worker"),
        ("ClusterRoleBinding", "gpustack-operator-device-manager"),
        ("ClusterRoleBinding", "gpustack-operator-worker"),
        ("ConfigMap", "accelpolicy-rules"),
        ("DaemonSet", "gpustack-operator-device-manager"), ("Deployment", "gpustack-operator-worker"),
        ("PodDisruptionBudget", "gpustack-operator-worker"),
        ("Role", "gpustack-operator-device-manager"), ("Role", "gpustack-operator-worker"),
        ("RoleBinding", "gpustack-operator-device-manager"), ("RoleBinding", "gpustack-operator-worker"),
        ("Service", "gpustack-operator-worker"),
        ("ServiceAccount", "gpustack-controller"), ("ServiceAccount", "gpustack-device-manager")])
    for (kind, _), obj in objects.items():
        if not kind.startswith("Cluster"):
            assert obj["metadata"]["namespace"] == NS


def _container(workload: dict) -> dict:
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    return container


def _hardened(pod_spec: dict, container: dict) -> None:
    sc = container["securityContext"]
    assert sc == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                  "capabilities": {"drop": ["ALL"]}}
    assert pod_spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert set(container["resources"]) == {"requests", "limits"}


def test_controller_deployment_serves_webhooks_with_the_shared_certificate():
    objects = by_kind(render())
    deploy = objects[("Deployment", "gpustack-operator-worker")]
    spec = deploy["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "gpustack-controller"
    c = _container(deploy)
    assert c["image"] == "accelpolicy:0.1.0" and c["imagePullPolicy"] == "IfNotPresent"
    assert c["args"] == [
        "controller", "--rules=/etc/accelpolicy/rules", "--coalesce-seconds=0.2", "--identity=$(POD_NAME)",
        "--audit-interval=1h", "--metrics-bind-address=0",
        "--webhook-port=9443", "--webhook-host=0.0.0.0",
        "--webhook-service=$(KUBERNETES_POD_NAMESPACE)/gpustack-operator-worker:443",
        "--webhook-cert-secret=gpustack-operator-worker-webhook-tls",
        "--webhook-cert-dir=/run/accelpolicy/webhook-tls", "--webhook-cert-issuer=accelpolicy",
        "--webhook-cert-days=90", "--webhook-cert-renew-days=30"]
    assert [e["name"] for e in c["env"]] == ["KUBERNETES_POD_NAMESPACE", "POD_NAME"]
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "webhook", "scheme": "HTTPS"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "webhook", "scheme": "HTTPS"}
    assert c["ports"] == [{"name": "webhook", "containerPort": 9443, "protocol": "TCP"}]
    # the endpoint leaves the Service before SIGTERM stops the webhook server (no refused review on rollout)
    assert c["lifecycle"] == {"preStop": {"sleep": {"seconds": 10}}}
    assert pod["terminationGracePeriodSeconds"] == 40
    _hardened(pod, c)
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 65532
    assert {m["mountPath"]: m.get("readOnly", False) for m in c["volumeMounts"]} == {
        "/etc/accelpolicy/rules": True, "/run/accelpolicy/webhook-tls": False, "/tmp": False}
    service = objects[("Service", "gpustack-operator-worker")]
    assert service["spec"]["ports"] == [{"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"}]
    assert service["spec"]["selector"] == spec["selector"]["matchLabels"]
    pdb = objects[("PodDisruptionBudget", "gpustack-operator-worker")]
    assert pdb["spec"] == {"minAvailable": 1, "selector": spec["selector"]}


def test_the_controller_service_account_is_the_one_the_admission_rules_trust():
    users = controller_users(load_rules(DEFAULT_RULES_DIR))   # rules/pools/derivation.yaml controllerServiceAccount
    assert f"system:serviceaccount:{NS}:gpustack-controller" in users


def test_agent_daemonset_real_backend_reads_the_kubelet_pod_resources_socket():
    ds = by_kind(render())[("DaemonSet", "gpustack-operator-device-manager")]
    pod = ds["spec"]["template"]["spec"]
    c = _container(ds)
    assert c["args"] == ["agent", "--node=$(NODE_NAME)", "--rules=/etc/accelpolicy/rules", "--interval=30",
                         "--health-port=8081", "--backend=real", "--allocation-source=auto",
                         "--podresources-socket=/var/lib/kubelet/pod-resources/kubelet.sock"]
    env = {e["name"]: e.get("value") or e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"]}
    assert env == {"NODE_NAME": "spec.nodeName", "KUBERNETES_POD_NAMESPACE": "metadata.namespace",
                   "NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "utility"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["pod-resources"]["hostPath"] == {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}
    assert {m["name"]: (m["mountPath"], m.get("readOnly", False)) for m in c["volumeMounts"]} == {
        "rules": ("/etc/accelpolicy/rules", True), "pod-resources": ("/var/lib/kubelet/pod-resources", True),
        "tmp": ("/tmp", False)}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert pod["serviceAccountName"] == "gpustack-device-manager"
    assert pod["tolerations"] == [{"operator": "Exists"}]
    _hardened(pod, c)


def test_fake_agent_mode_mounts_each_nodes_recorded_facts(tmp_path):
    facts = yaml.safe_load((REPO / "probes/recorded/node-a10g.yaml").read_text())
    docs = render(values={"agent": {"backend": "fake", "recordedFacts": {"node-a10g": facts}}}, tmp=tmp_path)
    objects = by_kind(docs)
    cm = objects[("ConfigMap", "gpustack-operator-device-manager-facts")]
    assert yaml.safe_load(cm["data"]["node-a10g.yaml"]) == facts
    ds = objects[("DaemonSet", "gpustack-operator-device-manager")]
    c = _container(ds)
    assert "--backend=fake" in c["args"] and "--facts=/etc/accelpolicy/facts/$(NODE_NAME).yaml" in c["args"]
    assert "NVIDIA_VISIBLE_DEVICES" not in {e["name"] for e in c["env"]}
    volumes = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
    assert volumes["facts"] == {"name": "facts", "configMap": {"name": "gpustack-operator-device-manager-facts"}}


def test_auto_agent_mounts_the_recorded_facts_given_for_some_nodes_and_keeps_nvml(tmp_path):
    """One DaemonSet for a mixed cluster (docs/concepts/dra.md): ``auto`` with recordedFacts mounts them
    as with ``fake`` (a node with a document reads it until a DRA driver publishes for it, the others
    NVML); without recordedFacts nothing is mounted."""
    facts = yaml.safe_load((REPO / "probes/recorded/node-a10g.yaml").read_text())
    objects = by_kind(render(values={"agent": {"backend": "auto", "recordedFacts": {"node-a10g": facts}}}, tmp=tmp_path))
    assert yaml.safe_load(objects[("ConfigMap", "gpustack-operator-device-manager-facts")]["data"]["node-a10g.yaml"]) == facts
    ds = objects[("DaemonSet", "gpustack-operator-device-manager")]
    c = _container(ds)
    assert [a for a in c["args"] if a.startswith(("--backend", "--facts"))] == [
        "--backend=auto", "--facts=/etc/accelpolicy/facts/$(NODE_NAME).yaml"]
    assert {"NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"} <= {e["name"] for e in c["env"]}
    assert {m["name"]: m["mountPath"] for m in c["volumeMounts"]}["facts"] == "/etc/accelpolicy/facts"
    bare = by_kind(render("agent.backend=auto"))
    c = _container(bare[("DaemonSet", "gpustack-operator-device-manager")])
    assert ("ConfigMap", "gpustack-operator-device-manager-facts") not in bare
    assert not [a for a in c["args"] if a.startswith("--facts")] and "facts" not in {m["name"] for m in c["volumeMounts"]}


def test_fake_agent_without_facts_and_unknown_modes_are_refused():
    result = helm("template", "acc", str(CHART), "-n", NS, "--set", "agent.backend=fake", check=False)
    assert result.returncode != 0
    assert "agent.backend fake needs agent.recordedFacts (node name -> recorded-facts document)" in result.stderr
    result = helm("template", "acc", str(CHART), "-n", NS, "--set", "controller.webhook.certMode=vault", check=False)
    assert 'controller.webhook.certMode: "vault" is not one of accelpolicy, cert-manager' in result.stderr


def test_cert_manager_mode_issues_the_serving_secret_and_the_controller_only_reads_it():
    objects = by_kind(render("controller.webhook.certMode=cert-manager"))
    cert = objects[("Certificate", "gpustack-operator-worker-webhook")]
    assert cert["spec"]["secretName"] == "gpustack-operator-worker-webhook-tls"
    assert cert["spec"]["dnsNames"] == ["gpustack-operator-worker.gpustack-system.svc",
                                        "gpustack-operator-worker.gpustack-system.svc.cluster.local",
                                        "gpustack-operator-worker.gpustack-system", "gpustack-operator-worker"]
    assert cert["spec"]["issuerRef"] == {"name": "gpustack-operator-worker-ca", "kind": "Issuer",
                                         "group": "cert-manager.io"}
    assert (cert["spec"]["duration"], cert["spec"]["renewBefore"]) == ("2160h", "720h")
    assert objects[("Certificate", "gpustack-operator-worker-ca")]["spec"]["isCA"] is True
    assert objects[("Issuer", "gpustack-operator-worker-ca")]["spec"] == {
        "ca": {"secretName": "gpustack-operator-worker-ca"}}
    assert ("Issuer", "gpustack-operator-worker-selfsigned") in objects
    args = _container(objects[("Deployment", "gpustack-operator-worker")])["args"]
    assert "--webhook-cert-issuer=external" in args
    assert not [a for a in args if a.startswith(("--webhook-cert-days", "--webhook-cert-renew-days"))]
    own = by_kind(render("controller.webhook.certMode=cert-manager",
                         "controller.webhook.certManager.issuerRef.name=corp-ca",
                         "controller.webhook.certManager.issuerRef.kind=ClusterIssuer"))
    assert not [k for k in own if k[0] == "Issuer"]
    assert own[("Certificate", "gpustack-operator-worker-webhook")]["spec"]["issuerRef"] == {
        "name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}


def test_crds_are_rendered_from_crds_without_a_copy():
    assert (CHART / "crds").is_symlink() and (CHART / "crds").resolve() == (REPO / "crds").resolve()
    rendered = {d["metadata"]["name"]: d for d in render(crds=True) if d["kind"] == "CustomResourceDefinition"}
    expected = {}
    for path in sorted((REPO / "crds").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                expected[doc["metadata"]["name"]] = doc
    assert rendered == expected and len(expected) == 6


def _rule_files() -> dict[str, str]:
    root = DEFAULT_RULES_DIR
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*.yaml"))
            if p.relative_to(root).parts[0] != "tests"}


def test_rules_configmap_equals_the_rule_files_and_loads_back(tmp_path):
    objects = by_kind(render())
    data = objects[("ConfigMap", "accelpolicy-rules")]["data"]
    files = _rule_files()
    assert {k.replace("__", "/"): v for k, v in data.items()} == files
    volume = next(v for v in objects[("Deployment", "gpustack-operator-worker")]["spec"]["template"]["spec"]["volumes"]
                  if v["name"] == "rules")
    items = {i["key"]: i["path"] for i in volume["configMap"]["items"]}
    assert items == {k: k.replace("__", "/") for k in data}
    for key, path in items.items():  # what the kubelet mounts at /etc/accelpolicy/rules
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(data[key])
    assert sorted(load_rules(tmp_path).documents) == sorted(load_rules(DEFAULT_RULES_DIR).documents)


def test_settings_secret_only_with_overrides_and_named_as_the_rules_say(tmp_path):
    assert not [d for d in render() if d["kind"] == "Secret"]
    docs = render(values={"settings": {"default-runtime-class": "nvidia"}}, tmp=tmp_path)
    (secret,) = [d for d in docs if d["kind"] == "Secret"]
    catalog = load_rules(DEFAULT_RULES_DIR).documents[("SettingCatalog", "settings")].spec
    assert secret["metadata"]["name"] == catalog.secretName == "gpustack-settings"
    assert secret["stringData"] == {"default-runtime-class": "nvidia"}
    assert secret["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}


# -- RBAC: exactly what the code calls ---------------------------------------------------------------------
def _granted(docs: list[dict], name: str) -> tuple[dict, dict, list[dict]]:
    objects = by_kind(docs)
    out = {}
    rules_all = []
    for scope, kind in (("cluster", "ClusterRole"), ("system", "Role")):
        table: dict[tuple[str, str], set[str]] = {}
        for rule in objects[(kind, name)]["rules"]:
            rules_all.append(rule)
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    table.setdefault((group, resource), set()).update(rule["verbs"])
        out[scope] = table
    return out, objects, rules_all


def _diff(needed: dict, granted: dict) -> list[str]:
    lines = []
    for scope in ("cluster", "system"):
        for key in sorted(set(needed[scope]) | set(granted[scope])):
            missing = needed[scope].get(key, set()) - granted[scope].get(key, set())
            extra = granted[scope].get(key, set()) - needed[scope].get(key, set())
            if missing:
                lines.append(f"{scope} {key}: missing {sorted(missing)}")
            if extra:
                lines.append(f"{scope} {key}: extra {sorted(extra)}")
    return lines


@pytest.mark.parametrize("component,derive", [("gpustack-operator-worker", rbacderive.controller_needs),
                                              ("gpustack-operator-device-manager", rbacderive.agent_needs)])
def test_rbac_grants_exactly_what_the_code_calls(component, derive):
    docs = render()
    granted, objects, rules = _granted(docs, component)
    assert _diff(derive(), granted) == []
    for rule in rules:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], rule
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        binding = objects[(kind, component)]
        assert binding["roleRef"]["name"] == component


def test_rbac_names_pin_the_objects_the_code_addresses():
    objects = by_kind(render())
    secret_name = load_rules(DEFAULT_RULES_DIR).documents[("SettingCatalog", "settings")].spec.secretName
    named = {(tuple(r["resources"]), tuple(r["verbs"])): r.get("resourceNames")
             for r in objects[("Role", "gpustack-operator-worker")]["rules"]}
    assert named[(("secrets",), ("get", "list", "patch", "update", "watch"))] == \
        [secret_name, "gpustack-operator-worker-webhook-tls"]
    assert named[(("leases",), ("get", "update"))] == [LEASE_NAME]
    agent = objects[("Role", "gpustack-operator-device-manager")]["rules"]
    assert agent[0]["resourceNames"] == [secret_name] and agent[0]["resources"] == ["secrets"]
    for doc in render():
        if doc["kind"] in ("ClusterRoleBinding", "RoleBinding"):
            assert doc["roleRef"]["name"] != "cluster-admin"


def test_the_derivation_fails_on_a_call_it_cannot_read(monkeypatch):
    monkeypatch.setattr(rbacderive, "OBJECT_KINDS", {})
    with pytest.raises(rbacderive.Underived, match=r"^runtime/controller/backgroundaudit\.py:\d+ \(run_once\): "
                                                   r"applier\.apply\(body\)$"):
        rbacderive.controller_needs()


def test_host_network_mode_for_clusters_without_a_pod_network_across_nodes():
    default = by_kind(render())
    for key in (("Deployment", "gpustack-operator-worker"), ("DaemonSet", "gpustack-operator-device-manager")):
        assert "hostNetwork" not in default[key]["spec"]["template"]["spec"]
    assert default[("DaemonSet", "gpustack-operator-device-manager")]["spec"]["template"]["spec"][
        "priorityClassName"] == "system-node-critical"
    objects = by_kind(render("controller.hostNetwork=true", "agent.hostNetwork=true"))
    for key in (("Deployment", "gpustack-operator-worker"), ("DaemonSet", "gpustack-operator-device-manager")):
        pod = objects[key]["spec"]["template"]["spec"]
        assert (pod["hostNetwork"], pod["dnsPolicy"]) == (True, "ClusterFirstWithHostNet")


def test_the_packaged_chart_renders_the_same_as_the_directory(tmp_path):
    """`make chart` packages the links' targets: the .tgz carries the CRDs and rules themselves."""
    helm("package", str(CHART), "-d", str(tmp_path))
    (package,) = tmp_path.glob("accelpolicy-*.tgz")
    from_package = helm("template", "acc", str(package), "-n", NS, "--include-crds").stdout
    assert from_package == helm("template", "acc", str(CHART), "-n", NS, "--include-crds").stdout
