"""Governed exceptions on a real API server (docs/concepts/exceptions.md, docs/tasks/grant-an-exception.md): the
controller serves the webhooks from its caches (as in test_webhooks_live.py); a Pod one-accelerator-family denies is
let in once a PolicyException is created, with the warning; the background audit and `accelpolicy audit
--kubeconfig` show it as skip naming the exception; once the exception expires the next such Pod is denied and
both audits show the Pod let in as fail, all without a restart. RBAC: a user without the chart's
accelpolicy-exception-granter role gets 403 from the API server, one bound to it in the exceptions namespace creates
one through the webhook, which refuses an exception the rules do not allow.

The exception is created to expire in 2 minutes, so the checks while it applies cannot race its expiry on a loaded
machine; its expiresAt is then brought 5 seconds ahead and nothing else happens before the next review: the expiry
itself, no watch event, is what ends it.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from runtime.controller.backgroundaudit import BackgroundAudit
from runtime.controller.exceptions import ExceptionStatus
from testing.localcluster.testing import get_json, wait_for
from tests.controlplane.test_webhooks_live import sa_kubeconfig, served  # noqa: F401  (module fixtures)

REPO = Path(__file__).resolve().parents[2]
ACCELPOLICY = Path(sys.executable).parent / "accelpolicy"
EXC_NS, NAME = "gpustack-exceptions", "bench-two-families"
LABEL = {"accelpolicy-test": "exceptions-live"}
DENIAL = "a Pod may request only one accelerator family, found [exclusive shared]"


def _pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "labels": {"kueue.x-k8s.io/queue-name": "gpustack-fnv64-c4680bb149644f1c", **LABEL}},
            "spec": {"containers": [
                {"name": "amd", "image": "x", "resources": {"limits": {"amd.com/gpu": "1"}}},
                {"name": "nvidia", "image": "x", "resources": {"limits": {"nvidia.com/gpu.shared": "1"}}}]}}


def _exception(expires: datetime) -> dict:
    return {"apiVersion": "worker.gpustack.ai/v1", "kind": "PolicyException",
            "metadata": {"name": NAME, "namespace": EXC_NS},
            "spec": {"policy": "pods-validation", "validations": ["one-accelerator-family"],
                     "match": {"namespaces": ["default"], "selector": {"matchLabels": LABEL}},
                     "reason": "vendor benchmark", "ticket": "OPS-4711", "approver": "platform-lead@example.com",
                     "expiresAt": expires.strftime("%Y-%m-%dT%H:%M:%SZ")}}


def _granter_roles() -> list[dict]:
    """The chart's two exception ClusterRoles (deploy/chart/templates/exceptions-rbac.yaml) without the chart's
    template lines (its labels): the rules exactly as the chart ships them."""
    text = re.sub(r"\{\{- /\*.*?\*/ -\}\}", "", (REPO / "deploy/chart/templates/exceptions-rbac.yaml").read_text(),
                  flags=re.S)
    kept = "\n".join(line for line in text.splitlines() if "{{" not in line)
    return [doc for doc in yaml.safe_load_all(kept) if doc]


@pytest.fixture(scope="module")
def namespace(control_plane):
    _, kubectl = control_plane
    kubectl("create", "namespace", EXC_NS, check=False)
    yield kubectl
    kubectl("delete", "pods", "-n", "default", "-l", "accelpolicy-test=exceptions-live", "--ignore-not-found",
            "--wait=false")
    kubectl("delete", "namespace", EXC_NS, "--ignore-not-found", "--wait=false")
    kubectl("delete", "clusterrole", "accelpolicy-exception-granter", "accelpolicy-exception-reader",
            "--ignore-not-found")


def _audit_rows(sa_kubeconfig: str) -> list[tuple[str, str, str]]:  # noqa: F811
    out = subprocess.run([str(ACCELPOLICY), "audit", "--kubeconfig", sa_kubeconfig, "-o", "json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode in (0, 1), out.stderr
    return sorted((r["resource"]["name"], r["result"], r["message"]) for r in json.loads(out.stdout)
                  if r["policy"] == "pods-validation" and r["resource"]["name"].startswith("bench-"))


def _bench(results) -> list[tuple[str, str, str]]:
    return sorted((r.resource.name, r.result, r.message) for r in results
                  if r.policy == "pods-validation" and r.resource.name.startswith("bench-"))


def _events(kubectl, reason: str) -> list[str]:
    found = get_json(kubectl, "events", "-n", EXC_NS, "--field-selector",
                     f"reason={reason},involvedObject.name={NAME}")
    return [e["message"] for e in found.get("items", [])]


def test_an_exception_lets_a_denied_pod_in_until_it_expires(served, namespace, sa_kubeconfig):  # noqa: F811
    kubectl, webhooks = namespace, served
    controller = webhooks.controller
    denied = kubectl("apply", "-f", "-", input=json.dumps(_pod("bench-1")), check=False)
    assert denied.returncode != 0 and DENIAL in denied.stderr
    expires = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(minutes=2)
    stamp = expires.strftime("%Y-%m-%dT%H:%M:%SZ")
    kubectl("create", "-f", "-", input=json.dumps(_exception(expires)))
    wait_for(lambda: webhooks.view().snapshot.get("PolicyException", NAME, EXC_NS), bool,
             what="the exception in the webhooks' view")
    let_in = kubectl("apply", "-f", "-", input=json.dumps(_pod("bench-1")))
    assert f"Warning: one-accelerator-family (pods-validation) lifted by PolicyException {EXC_NS}/{NAME} until " \
           f"{stamp}: vendor benchmark (approved by platform-lead@example.com, OPS-4711)" in let_in.stderr
    wait_for(lambda: controller.cache.get("Pod", "bench-1", "default"), bool, what="the Pod in the cache")
    skip = [("bench-1", "skip", f"excepted by PolicyException {EXC_NS}/{NAME} until {stamp}: vendor benchmark "
                                "(approved by platform-lead@example.com, OPS-4711)")]
    background = BackgroundAudit(controller, interval=0)
    assert _bench(background.run_once()) == skip
    assert _audit_rows(sa_kubeconfig) == skip
    status = ExceptionStatus(controller, interval=0)
    status.run_once()
    assert get_json(kubectl, "policyexception", NAME, "-n", EXC_NS)["status"] == {"inForce": True, "coveredObjects": 1}
    assert _events(kubectl, "ExceptionInForce") == [
        f"lifts validations of pods-validation until {stamp} for 1 object(s) now: vendor benchmark (approved by "
        "platform-lead@example.com, OPS-4711)"]

    # bring the expiry 5 s ahead, let the change reach the caches, then let time alone end it
    soon = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=5)
    kubectl("patch", "policyexception", NAME, "-n", EXC_NS, "--type=merge",
            "-p", json.dumps({"spec": {"expiresAt": soon.strftime("%Y-%m-%dT%H:%M:%SZ")}}))
    wait_for(lambda: webhooks.view().snapshot.get("PolicyException", NAME, EXC_NS) or {},
             lambda obj: obj.get("spec", {}).get("expiresAt") == soon.strftime("%Y-%m-%dT%H:%M:%SZ"),
             what="the shortened expiry in the webhooks' view")
    wait_for(lambda: datetime.now(timezone.utc), lambda now: now > soon + timedelta(seconds=0.2), timeout=10,
             what="the expiry to pass")
    denied = kubectl("apply", "-f", "-", input=json.dumps(_pod("bench-2")), check=False)
    assert denied.returncode != 0 and DENIAL in denied.stderr
    fail = [("bench-1", "fail", f"spec: Forbidden: {DENIAL}")]
    assert _bench(background.run_once()) == fail
    assert _audit_rows(sa_kubeconfig) == fail
    status.run_once()
    assert get_json(kubectl, "policyexception", NAME, "-n", EXC_NS)["status"] == {
        "inForce": False, "coveredObjects": 0, "message": f"expired at {soon.strftime('%Y-%m-%dT%H:%M:%SZ')}"}
    assert len(_events(kubectl, "ExceptionEnded")) == 1
    kubectl("delete", "policyexception", NAME, "-n", EXC_NS)


def test_only_the_granting_role_may_create_one_and_the_webhook_refuses_what_the_rules_do_not_allow(
        served, namespace):  # noqa: F811
    kubectl = namespace
    body = json.dumps(_exception(datetime.now(timezone.utc) + timedelta(hours=1)))
    refused = kubectl("--as=developer", "create", "-f", "-", input=body, check=False)
    assert refused.returncode != 0
    assert 'Error from server (Forbidden): error when creating "STDIN": policyexceptions.worker.gpustack.ai is ' \
           'forbidden: User "developer" cannot create resource "policyexceptions" in API group ' \
           f'"worker.gpustack.ai" in the namespace "{EXC_NS}"' in refused.stderr
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": _granter_roles()}))
    kubectl("create", "rolebinding", "granters", "-n", EXC_NS, "--clusterrole=accelpolicy-exception-granter",
            "--user=platform-lead")
    wait_for(lambda: kubectl("auth", "can-i", "create", "policyexceptions.worker.gpustack.ai", "-n", EXC_NS,
                             "--as=platform-lead", check=False).stdout.strip(), lambda s: s == "yes",
             what="the RoleBinding in force")
    privileged = json.loads(body)
    privileged["spec"].update(policy="instances-validation", validations=["privileged-gate"])
    refused = kubectl("--as=platform-lead", "create", "-f", "-", input=json.dumps(privileged), check=False)
    assert refused.returncode != 0
    assert "spec.validations: Forbidden: validation privileged-gate of policy instances-validation may not be " \
           "excepted" in refused.stderr
    kubectl("--as=platform-lead", "create", "-f", "-", input=body)
    assert kubectl("--as=developer", "delete", "policyexception", NAME, "-n", EXC_NS, check=False).returncode != 0
    kubectl("--as=platform-lead", "delete", "policyexception", NAME, "-n", EXC_NS)
