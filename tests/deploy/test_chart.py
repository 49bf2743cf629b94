"""The Helm chart (deploy/chart/): `helm lint`, `helm template` in its three modes parsed into the
expected objects, no drift from crds/ and rules/, and RBAC equal to what the code calls
(tests/deploy/rbacderive.py). helm is built from its Go module by `make helm` (deploy/tools/build.sh)."""
from __future__ import annotations

import copy
import functools
import json
import re
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
# the Kubernetes version this project builds (e2e/controlplane/go.mod); `helm template` without a cluster
# would assume v1.20, which the chart's kubeVersion refuses
KUBE_VERSION = re.search(r"^\s*k8s\.io/kubernetes (v[0-9.]+)", (REPO / "e2e/controlplane/go.mod").read_text(),
                         re.M).group(1)


def _helm() -> str:
    path = subprocess.run(["bash", str(REPO / "deploy/tools/build.sh"), "--print", "helm"], check=True,
                          capture_output=True, text=True).stdout.strip()
    if not Path(path).is_file():
        pytest.skip(f"helm is not built ({path}): run `make helm` (builds it from its Go module)")
    return path


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([_helm(), *args], capture_output=True, text=True, check=check, timeout=120)


def template(*args: str, namespace: str = NS, check: bool = True) -> subprocess.CompletedProcess:
    """``helm template acc deploy/chart -n <namespace> --kube-version <ours> <args>``."""
    return helm("template", "acc", str(CHART), "-n", namespace, "--kube-version", KUBE_VERSION, *args, check=check)


def render(*sets: str, values: dict | None = None, tmp: Path | None = None) -> list[dict]:
    """The chart's objects for these ``--set`` values and ``values`` (a values file written into ``tmp``);
    a fresh copy of one render per distinct input (helm takes seconds per render here)."""
    return copy.deepcopy(_render(sets, json.dumps(values, sort_keys=True) if values is not None else None,
                                 str(tmp) if tmp is not None else None))


@functools.lru_cache(maxsize=32)
def _render(sets: tuple[str, ...], values: str | None, tmp: str | None) -> list[dict]:
    args = []
    for s in sets:
        args += ["--set", s]
    if values is not None:
        path = Path(tmp) / "values.yaml"
        path.write_text(yaml.safe_dump(json.loads(values)))
        args += ["-f", str(path)]
    return [d for d in yaml.safe_load_all(template(*args).stdout) if d]


def by_kind(docs: list[dict]) -> dict[tuple[str, str], dict]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def test_helm_lint_passes():
    result = helm("lint", str(CHART), "--strict", "-n", NS)
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout
    assert "Fail:" not in result.stdout + result.stderr   # every template rendered (a fail() stops the lint early)


def test_default_render_has_exactly_these_objects():
    objects = by_kind(render())
    assert sorted(objects) == sorted([
        ("ClusterRole", "gpustack-operator-device-manager"), ("ClusterRole", "gpustack-operator-worker"),
        ("ClusterRoleBinding", "gpustack-operator-device-manager"),
        ("ClusterRoleBinding", "gpustack-operator-worker"), ("ClusterRole", "accelpolicy-viewer"),
        ("ClusterRole", "accelpolicy-exception-granter"), ("ClusterRole", "accelpolicy-exception-reader"),
        ("ConfigMap", "accelpolicy-rules"),
        ("DaemonSet", "gpustack-operator-device-manager"), ("Deployment", "gpustack-operator-worker"),
        ("PodDisruptionBudget", "gpustack-operator-worker"),
        ("Role", "gpustack-operator-device-manager"), ("Role", "gpustack-operator-worker"),
        ("RoleBinding", "gpustack-operator-device-manager"), ("RoleBinding", "gpustack-operator-worker"),
        ("Service", "gpustack-operator-worker"), ("Pod", "gpustack-operator-worker-webhook-probe"),
        ("ServiceAccount", "gpustack-controller"), ("ServiceAccount", "gpustack-device-manager"),
        ("ValidatingAdmissionPolicy", "accelpolicy-agent-node"),
        ("ValidatingAdmissionPolicy", "accelpolicy-controller-scope"),
        ("ValidatingAdmissionPolicy", "accelpolicy-instance-pod-grants"),
        ("ValidatingAdmissionPolicyBinding", "accelpolicy-agent-node"),
        ("ValidatingAdmissionPolicyBinding", "accelpolicy-controller-scope"),
        ("ValidatingAdmissionPolicyBinding", "accelpolicy-instance-pod-grants")]
        + ADMISSION_OBJECTS
        + [("CustomResourceDefinition", name) for name in sorted(_crds())])
    for (kind, _), obj in objects.items():
        if not kind.startswith(("Cluster", "CustomResourceDefinition", "ValidatingAdmissionPolicy")):
            assert obj["metadata"]["namespace"] == NS


# the admission Deployment and what it needs (tests/deploy/test_chart_admission.py)
ADMISSION_OBJECTS = [("ClusterRole", "gpustack-operator-worker-admission"),
                     ("ClusterRoleBinding", "gpustack-operator-worker-admission"),
                     ("Deployment", "gpustack-operator-worker-admission"),
                     ("PodDisruptionBudget", "gpustack-operator-worker-admission"),
                     ("Role", "gpustack-operator-worker-admission"),
                     ("RoleBinding", "gpustack-operator-worker-admission"),
                     ("ServiceAccount", "gpustack-admission")]


def _container(workload: dict) -> dict:
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    return container


def _hardened(pod_spec: dict, container: dict) -> None:
    sc = container["securityContext"]
    assert sc == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                  "capabilities": {"drop": ["ALL"]}}
    assert pod_spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert set(container["resources"]) == {"requests", "limits"}


def test_controller_deployment_registers_the_webhooks_with_the_shared_certificate():
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
        "--audit-interval=1h", "--metrics-bind-address=:8080", "--webhook-registration-only",
        "--webhook-service=$(KUBERNETES_POD_NAMESPACE)/gpustack-operator-worker:443",
        "--webhook-cert-secret=gpustack-operator-worker-webhook-tls",
        "--webhook-cert-dir=/run/accelpolicy/webhook-tls",
        "--webhook-ca-configmap=gpustack-operator-worker-webhook-ca",
        "--webhook-owner-clusterrole=gpustack-operator-worker", "--webhook-cert-issuer=accelpolicy",
        "--webhook-cert-days=90", "--webhook-cert-renew-days=30"]
    assert [e["name"] for e in c["env"]] == ["KUBERNETES_POD_NAMESPACE", "ACCELPOLICY_RULES_CONFIGMAP", "POD_NAME"]
    assert c["env"][1]["value"] == "accelpolicy-rules"   # the reload gate's Events and verdict go on it
    assert "readinessProbe" not in c   # behind no Service: the admission replicas serve the webhooks
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["ports"] == [{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}]
    # the endpoint leaves the Service before SIGTERM stops the webhook server (no refused review on rollout)
    assert c["lifecycle"] == {"preStop": {"sleep": {"seconds": 10}}}
    assert pod["terminationGracePeriodSeconds"] == 40
    _hardened(pod, c)
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 65532
    assert {m["mountPath"]: m.get("readOnly", False) for m in c["volumeMounts"]} == {
        "/etc/accelpolicy/rules": True, "/run/accelpolicy/webhook-tls": False, "/tmp": False}
    service = objects[("Service", "gpustack-operator-worker")]
    assert service["spec"]["ports"] == [{"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"}]
    admission = objects[("Deployment", "gpustack-operator-worker-admission")]
    assert service["spec"]["selector"] == admission["spec"]["selector"]["matchLabels"]
    pdb = objects[("PodDisruptionBudget", "gpustack-operator-worker")]
    assert pdb["spec"] == {"minAvailable": 1, "selector": spec["selector"]}
    # docs/availability.md "The start guard": defaults for a Fail webhook
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert c["resources"] == {"requests": {"cpu": "100m", "memory": "640Mi"}, "limits": {"memory": "1Gi"}}
    assert "affinity" not in pod
    assert [(t["topologyKey"], t["whenUnsatisfiable"]) for t in pod["topologySpreadConstraints"]] == [
        ("topology.kubernetes.io/zone", "ScheduleAnyway"), ("kubernetes.io/hostname", "DoNotSchedule")]
    for constraint in pod["topologySpreadConstraints"]:
        assert constraint["labelSelector"] == spec["selector"] and constraint["maxSkew"] == 1


def test_availability_values_a_single_replica_has_no_pdb_and_spread_and_priority_can_be_set():
    one = by_kind(render("controller.replicas=1"))
    assert ("PodDisruptionBudget", "gpustack-operator-worker") not in one
    own = by_kind(render("controller.priorityClassName=", "controller.resources.limits.cpu=2",
                         "controller.topologySpreadConstraints[0].maxSkew=2",
                         "controller.topologySpreadConstraints[0].topologyKey=rack",
                         "controller.topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule"))
    pod = own[("Deployment", "gpustack-operator-worker")]["spec"]["template"]["spec"]
    assert "priorityClassName" not in pod
    assert pod["containers"][0]["resources"]["limits"] == {"cpu": 2, "memory": "1Gi"}
    assert pod["topologySpreadConstraints"] == [{"maxSkew": 2, "topologyKey": "rack",
                                                 "whenUnsatisfiable": "DoNotSchedule"}]


def test_the_controller_service_account_is_the_one_the_admission_rules_trust():
    users = controller_users(load_rules(DEFAULT_RULES_DIR))   # rules/controller.yaml controllerServiceAccount
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
                   "NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "utility",
                   "ACCELPOLICY_RULES_CONFIGMAP": "accelpolicy-rules"}   # the leader's verdict on a rules change
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
    result = template("--set", "agent.backend=fake", check=False)
    assert result.returncode != 0
    assert "agent.backend fake needs agent.recordedFacts (node name -> recorded-facts document)" in result.stderr
    result = template("--set", "controller.webhook.certMode=vault", check=False)
    assert result.returncode != 0
    assert "- at '/controller/webhook/certMode': value must be one of 'accelpolicy', 'cert-manager'" in result.stderr


def test_recorded_facts_fit_any_node_name_and_a_change_rolls_the_agents(tmp_path):
    """docs/install.md "Install accelpolicy on your own cluster (kind as the example)": the docs' example (one recorded document for a node of another name) must not make the
    agent refuse it; the key names the node. A change of the facts changes checksum/facts."""
    facts = (REPO / "probes/recorded/node-t4-a.yaml").read_text()
    docs = render(values={"agent": {"backend": "fake", "recordedFacts": {"my-worker-7": facts}}}, tmp=tmp_path)
    objects = by_kind(docs)
    mounted = yaml.safe_load(objects[("ConfigMap", "gpustack-operator-device-manager-facts")]["data"]["my-worker-7.yaml"])
    assert mounted == {**yaml.safe_load(facts), "node": "my-worker-7"}
    first = objects[("DaemonSet", "gpustack-operator-device-manager")]["spec"]["template"]["metadata"]["annotations"]
    other = by_kind(render(values={"agent": {"backend": "fake", "recordedFacts": {"my-worker-7": facts + "# edited\n",
                                                                                  "my-worker-8": facts}}}, tmp=tmp_path))
    second = other[("DaemonSet", "gpustack-operator-device-manager")]["spec"]["template"]["metadata"]["annotations"]
    assert set(first) == {"checksum/facts"} and first != second
    refused = template("--set", "agent.backend=fake", "--set", "agent.recordedFacts.n1=not-a-document", check=False)
    assert "agent.recordedFacts.n1: not a recorded-facts document (probes/recorded/*.yaml format)" in refused.stderr


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


def _crds() -> dict[str, dict]:
    expected = {}
    for path in sorted((REPO / "crds").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                expected[doc["metadata"]["name"]] = doc
    return expected


def test_crds_are_templates_from_crds_without_a_copy_kept_on_uninstall():
    """docs/install.md "Upgrade": templates (so `helm upgrade` carries schema changes), not the chart's crds/ (which
    Helm never upgrades), linked from crds/; `helm.sh/resource-policy: keep` so an uninstall keeps the
    objects; crds.install=false leaves them to someone else."""
    assert not (CHART / "crds").exists()
    link = CHART / "files" / "crds"
    assert link.is_symlink() and link.resolve() == (REPO / "crds").resolve()
    rendered = {d["metadata"]["name"]: d for d in render() if d["kind"] == "CustomResourceDefinition"}
    expected = _crds()
    assert len(expected) == 8 and sorted(rendered) == sorted(expected)
    for name, crd in rendered.items():
        meta = crd["metadata"]
        assert meta["annotations"] == {"helm.sh/resource-policy": "keep"}
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        assert {**crd, "metadata": {"name": name}} == expected[name]
    assert not [d for d in render("crds.install=false") if d["kind"] == "CustomResourceDefinition"]


def test_the_full_removal_selects_every_crd_the_chart_installs_by_its_label():
    """docs/install.md "Full removal": its one ``kubectl delete crd -l KEY=VALUE`` line selects every CRD the chart
    renders (each file of crds/, a CRD added later too) by the label the template gives them, and no other."""
    page = (REPO / "docs" / "install.md").read_text()
    block = re.search(r"^<!-- e2e: removal -->\n```bash\n(.*?)^```", page, re.M | re.S).group(1)
    lines = [line for line in block.splitlines() if line.startswith("kubectl delete crd")]
    assert len(lines) == 1 and (found := re.fullmatch(r"kubectl delete crd -l ([\w./-]+)=([\w.-]+)", lines[0])), lines
    key, value = found.groups()
    rendered = render()
    selected = [d["metadata"]["name"] for d in rendered if (d["metadata"].get("labels") or {}).get(key) == value
                and d["kind"] == "CustomResourceDefinition"]
    assert sorted(selected) == sorted(_crds())


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
    with pytest.raises(rbacderive.Underived, match=r"^runtime/controller/actions\.py:\d+ \(create_event\): "
                                                   r"applier\.create\(event\)$"):
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
    from_package = helm("template", "acc", str(package), "-n", NS, "--kube-version", KUBE_VERSION).stdout
    assert from_package == template().stdout


# -- docs/install.md "Install accelpolicy on your own cluster (kind as the example)": the chart refuses what cannot work ---
def test_another_namespace_than_the_rules_system_namespace_is_refused():
    result = template(namespace="accel", check=False)
    assert result.returncode != 0
    assert ('namespace "accel": accelpolicy installs into the rules\' system namespace "gpustack-system" only '
            "(rules/controller.yaml systemNamespace: the admission rules trust "
            "system:serviceaccount:gpustack-system:gpustack-controller, and nfd-master accepts NodeFeatures from "
            "there); use -n gpustack-system") in result.stderr


def test_a_misspelt_value_fails_naming_its_path():
    result = template("--set", "controller.replica=3", check=False)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert "- at '/controller': additional properties 'replica' not allowed" in result.stderr, result.stderr
    wrong_type = template("--set", "agent.maxUnavailable=all", check=False)
    assert wrong_type.returncode != 0 and "- at '/agent/maxUnavailable'" in wrong_type.stderr, wrong_type.stderr


def test_kubernetes_older_than_1_30_is_refused():
    result = helm("template", "acc", str(CHART), "-n", NS, "--kube-version", "v1.29.9", check=False)
    assert result.returncode != 0
    assert "chart requires kubeVersion: >=1.30.0-0 which is incompatible with Kubernetes v1.29.9" in result.stderr
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["kubeVersion"] == ">=1.30.0-0" and "gpustack/gpustack" not in chart["home"]


# -- docs/install.md "Upgrade": rollout, rules edits, Prometheus ------------------------------------------
def test_a_rules_edit_rolls_the_controller_but_not_the_agents(tmp_path):
    """The agents reload the mounted rules live (runtime/cli/agent.py --watch-rules-seconds): their Pod
    template carries no rules checksum, so a rules edit leaves every agent running; the controller rolls."""
    edited = (REPO / "rules/admission/settings.yaml").read_text() + "# edited\n"
    before = by_kind(render())
    after = by_kind(render(values={"rules": {"override": {"admission/settings.yaml": edited}}}, tmp=tmp_path))
    ds = ("DaemonSet", "gpustack-operator-device-manager")
    assert before[ds]["spec"]["template"] == after[ds]["spec"]["template"]
    assert "annotations" not in before[ds]["spec"]["template"]["metadata"]
    assert before[ds]["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}}
    deploy = ("Deployment", "gpustack-operator-worker")
    assert before[deploy]["spec"]["template"]["metadata"]["annotations"]["checksum/rules"] != \
        after[deploy]["spec"]["template"]["metadata"]["annotations"]["checksum/rules"]
    cm = after[("ConfigMap", "accelpolicy-rules")]["data"]
    assert cm["admission__settings.yaml"] == edited
    assert by_kind(render("agent.maxUnavailable=25"))[ds]["spec"]["updateStrategy"]["rollingUpdate"] == {"maxUnavailable": 25}
    bad = template("--set", "rules.override.x=1", check=False)
    assert bad.returncode != 0


def test_prometheus_gets_the_ca_certificate_only():
    """docs/install.md "Upgrade": the ServiceMonitor reads the CA from the ConfigMap the leader publishes (ca.crt
    only), never from the serving Secret, which holds the server's and the CA's private keys."""
    objects = by_kind(render("metrics.serviceMonitor.enabled=true"))
    monitor = objects[("ServiceMonitor", "gpustack-operator-worker")]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["tlsConfig"]["ca"] == {"configMap": {"name": "gpustack-operator-worker-webhook-ca", "key": "ca.crt"}}
    assert "gpustack-operator-worker-webhook-tls" not in json.dumps(monitor)
    args = _container(objects[("Deployment", "gpustack-operator-worker")])["args"]
    assert "--webhook-ca-configmap=gpustack-operator-worker-webhook-ca" in args


# -- docs/install.md "What the admission policies do not cover": the admission policies ----------------------
def _vap(name: str, *sets: str) -> dict:
    return by_kind(render(*sets))[("ValidatingAdmissionPolicy", name)]


def _variables(vap: dict) -> dict[str, str]:
    return {v["name"]: v["expression"] for v in vap["spec"]["variables"]}


def test_the_agent_policy_is_keyed_on_the_node_claim_and_reads_its_keys_from_the_rules():
    vap = _vap("accelpolicy-agent-node")
    rules = load_rules(DEFAULT_RULES_DIR)
    labels = rules.documents[("LabelCatalog", "labels")].spec.keys
    agent = rules.documents[("NodeAgent", "agent")].spec
    variables = _variables(vap)
    assert vap["spec"]["matchConditions"] == [{
        "name": "the-agent",
        "expression": 'request.userInfo.username == "system:serviceaccount:gpustack-system:gpustack-device-manager"'}]
    assert variables["claim"] == "request.userInfo.?extra[?'authentication.kubernetes.io/node-name'].orValue([])"
    assert json.loads(variables["podAnnotations"]) == [labels["allocation"]]
    assert json.loads(variables["nodeAnnotations"]) == [labels["cpuNameAnnotation"], labels["cpuFamilyAnnotation"]]
    assert json.loads(variables["nodeFeatureNodeLabel"]) == labels["nodeFeatureNode"]
    assert json.loads(variables["nodeFeatureSuffixes"]) == [agent.nodeFeature.worker.nameSuffix,
                                                            agent.nodeFeature.deviceManager.nameSuffix]
    capacity = re.compile(json.loads(variables["capacityKeys"]))
    for key in ("nvidia.com/gpu.sliced.units", "nvidia.com/gpu.partitioned.mig-1g.10gb",
                "huawei.com/npu.sliced.memory-percentage", "nvidia.com/gpu.partitioned.units"):
        assert capacity.match(key), key
    for key in ("cpu", "memory", "pods", "nvidia.com/gpu", "ephemeral-storage", "example.com/gpu.sliced.units.x"):
        assert not capacity.match(key), key
    rules_of = {tuple(r["apiGroups"]): r for r in vap["spec"]["matchConstraints"]["resourceRules"]}
    assert rules_of[("",)]["resources"] == ["nodes", "nodes/status", "pods", "pods/*"]
    assert rules_of[("nfd.k8s-sigs.io",)]["resources"] == ["nodefeatures"]
    assert rules_of[("worker.gpustack.ai",)]["resources"] == ["devices", "devices/status"]
    cel = yaml.safe_load((CHART / "files/policies/agent-node.yaml").read_text())
    assert vap["spec"]["validations"] == cel["validations"] and vap["spec"]["failurePolicy"] == "Fail"
    binding = by_kind(render())[("ValidatingAdmissionPolicyBinding", "accelpolicy-agent-node")]
    assert binding["spec"] == {"policyName": "accelpolicy-agent-node", "validationActions": ["Deny"]}
    assert not [d for d in render("admissionPolicies.enabled=false") if d["kind"].startswith("ValidatingAdmission")]


def test_the_controller_policy_names_its_webhook_configurations_and_the_instance_pod_shape():
    vap = _vap("accelpolicy-controller-scope")
    variables = _variables(vap)
    rules = load_rules(DEFAULT_RULES_DIR)
    registration = rules.documents[("WebhookRegistration", "webhooks")].spec
    assert json.loads(variables["webhookConfigurations"]) == [registration.configurations.mutating,
                                                              registration.configurations.validating]
    assert json.loads(variables["webhookService"]) == {"namespace": NS, "name": "gpustack-operator-worker"}
    assert json.loads(variables["instanceApiVersion"]) == "worker.gpustack.ai/v1"
    assert json.loads(variables["podSpec"]) == rules.documents[("InstancePod", "instance-pod")].spec.podSpec
    assert json.loads(variables["reservedNamespaces"]) == \
        rules.documents[("ControllerPolicy", "controller")].spec.reservedNamespaces
    assert vap["spec"]["matchConditions"][0]["expression"] == \
        'request.userInfo.username == "system:serviceaccount:gpustack-system:gpustack-controller"'


def test_rbac_pins_the_webhook_configurations_and_the_owner_by_name():
    """docs/install.md "What the admission policies do not cover": patch/delete of webhook configurations by resourceNames (create cannot be named:
    the controller policy names it); the ClusterRole that owns them, read by name only."""
    registration = load_rules(DEFAULT_RULES_DIR).documents[("WebhookRegistration", "webhooks")].spec
    names = [registration.configurations.mutating, registration.configurations.validating]
    role = by_kind(render())[("ClusterRole", "gpustack-operator-worker")]
    webhook_rules = [r for r in role["rules"] if r["apiGroups"] == ["admissionregistration.k8s.io"]]
    assert webhook_rules == [
        {"apiGroups": ["admissionregistration.k8s.io"],
         "resources": ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"],
         "verbs": ["create", "list", "watch"]},
        {"apiGroups": ["admissionregistration.k8s.io"],
         "resources": ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"],
         "resourceNames": names, "verbs": ["delete", "patch"]}]
    (owner,) = [r for r in role["rules"] if r["apiGroups"] == ["rbac.authorization.k8s.io"]]
    assert owner == {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
                     "resourceNames": ["gpustack-operator-worker"], "verbs": ["list", "watch"]}


# -- deploy/README.md's RBAC table is the chart's ------------------------------------------------------------
_SHORT = {"kueue": "kueue.x-k8s.io", "nfd": "nfd.k8s-sigs.io", "openreports.io": "openreports.io",
          "discovery.k8s.io": "discovery.k8s.io",
          "rbac": "rbac.authorization.k8s.io", "dra": "resource.k8s.io"}


def _readme_rbac() -> set[tuple[str, str, str, str, str]]:
    """(component, scope, resource, verb, resourceName or "") of every row of deploy/README.md's table."""
    text = (REPO / "deploy/README.md").read_text()
    table = text[text.index("| Component | Scope | Resources | Verbs |"):].split("\n\n", 1)[0]
    out = set()
    for line in table.splitlines()[2:]:
        component, scope, resources, verbs = [c.strip() for c in line.strip("|").split("|")][:4]
        group = ""
        if ": " in resources:
            prefix, resources = resources.split(": ", 1)
            group = _SHORT[prefix]
        for resource in resources.split(", "):
            for part in verbs.split("; "):
                named = re.fullmatch(r"(.*) on (.*) only", part)
                verb_text, names = (named.group(1), re.findall(r"`([^`]+)`", named.group(2))) if named else (part, [""])
                for verb in verb_text.split(", "):
                    for name in names:
                        out.add((component, scope, f"{group}/{resource}", verb, name))
    return out


def _chart_rbac() -> set[tuple[str, str, str, str, str]]:
    objects = by_kind(render())
    groups = {"": "", "coordination.k8s.io": "", "storage.k8s.io": "", "node.k8s.io": "",
              "admissionregistration.k8s.io": "", "gpustack.ai": "", "worker.gpustack.ai": ""}
    out = set()
    for component, name in (("controller", "gpustack-operator-worker"), ("agent", "gpustack-operator-device-manager")):
        for scope, kind in (("cluster", "ClusterRole"), ("namespace", "Role")):
            for rule in objects[(kind, name)]["rules"]:
                for api_group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            for named in rule.get("resourceNames") or [""]:
                                out.add((component, scope, f"{groups.get(api_group, api_group)}/{resource}", verb,
                                         named))
    return out


def test_the_readme_rbac_table_is_the_charts():
    readme, chart = _readme_rbac(), _chart_rbac()
    assert sorted(readme - chart) == [] and sorted(chart - readme) == []


def test_helm_test_probes_each_webhook_with_the_published_ca_and_no_token():
    """docs/install.md "Upgrade": `helm test` sends one review to each webhook (accelpolicy webhook-probe) through the
    Service, verified with the CA ConfigMap (not the Secret), with the chart's rules, without a token."""
    pod = by_kind(render())[("Pod", "gpustack-operator-worker-webhook-probe")]
    assert pod["metadata"]["annotations"] == {"helm.sh/hook": "test",
                                              "helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded"}
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False and "serviceAccountName" not in spec
    (container,) = spec["containers"]
    assert container["args"] == ["webhook-probe", "--url=https://gpustack-operator-worker.gpustack-system.svc:443",
                                 "--ca-file=/etc/accelpolicy/webhook-ca/ca.crt", "--rules=/etc/accelpolicy/rules"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["webhook-ca"]["configMap"] == {"name": "gpustack-operator-worker-webhook-ca"}
    assert "secret" not in json.dumps(spec["volumes"])
    _hardened(spec, container)


def viewer_rules() -> list[dict]:
    """The rules of the chart's ``accelpolicy-viewer`` ClusterRole (default render)."""
    return by_kind(render())[("ClusterRole", "accelpolicy-viewer")]["rules"]


def test_the_viewer_role_lists_exactly_what_the_commands_read_and_gets_only_the_settings_secret():
    """docs/tasks/ask-the-cluster.md: read-only (list; get of the one Secret), every kind of
    runtime.cli.source.AUDIT (the widest command: snapshot, audit), and of the Secrets only the settings one."""
    from runtime.cli.source import AUDIT
    from runtime.engine.snapshot import KNOWN_KINDS

    def plural(kind: str) -> str:
        lower = kind.lower()
        return lower + "es" if lower.endswith("ss") else lower if lower.endswith("s") else lower + "s"

    granted = {(group, resource): (tuple(rule["verbs"]), tuple(rule.get("resourceNames") or ()))
               for rule in viewer_rules() for group in rule["apiGroups"] for resource in rule["resources"]}
    wanted = {(KNOWN_KINDS[k][0].split("/")[0] if "/" in KNOWN_KINDS[k][0] else "", plural(k)): (("list",), ())
              for k in AUDIT}
    wanted[("", "secrets")] = (("get",), ("gpustack-settings",))
    assert granted == wanted
    assert load_rules(DEFAULT_RULES_DIR).get("SettingCatalog").secretName == "gpustack-settings"
