"""Governed exceptions through the chart on kind (docs/tasks/grant-an-exception.md), after the walkthrough: the same
story as tests/controlplane/test_exceptions_live.py, with everything the chart installed.

The controller and the admission replicas serve the webhooks in the cluster; the chart's
accelpolicy-exception-granter ClusterRole is bound in the exceptions namespace of rules/exceptions.yaml; the
background audit runs every 20 s (e2e/kind/stack.py ``controller.auditInterval``). A user without the role gets 403
from RBAC; the user bound to it creates the exception through the webhook; a Pod one-accelerator-family denied is
then let in with the warning; the background audit's Report and `accelpolicy audit --kubeconfig` show it as skip
naming the exception, and the controller writes the exception's status (inForce, coveredObjects 1) and the
ExceptionInForce Event. The expiry is brought 5 s ahead; past it the next such Pod is denied, both audits show the
Pod as fail, the status says it expired and ExceptionEnded is recorded: no restart. Non-destructive: the test
deletes what it made.
"""
from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from testing.localcluster.testing import get_json, wait_for

EXC_NS, NAME, GRANTER = "gpustack-exceptions", "bench-two-families", "platform-lead"
LABEL = {"accelpolicy-test": "exceptions-kind"}
DENIAL = "a Pod may request only one accelerator family, found [exclusive shared]"
ACCELPOLICY = Path(sys.executable).parent / "accelpolicy"


@pytest.fixture(scope="module")
def kind(cluster):
    if cluster.stack is None:
        pytest.skip("kind backend only: the chart's roles and in-cluster webhooks (--cluster=kind)")
    kubectl = cluster.kubectl
    kubectl("create", "namespace", EXC_NS, check=False)
    kubectl("create", "rolebinding", "exception-granters", "-n", EXC_NS,
            "--clusterrole=accelpolicy-exception-granter", f"--user={GRANTER}", check=False)
    yield cluster
    kubectl("delete", "pods", "-n", "default", "-l", "accelpolicy-test=exceptions-kind", "--ignore-not-found",
            "--wait=false")
    kubectl("delete", "namespace", EXC_NS, "--ignore-not-found", "--wait=false")


def _stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _pod(name: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": name, "namespace": "default",
                                    "labels": {"kueue.x-k8s.io/queue-name": "gpustack-fnv64-c4680bb149644f1c",
                                               **LABEL}},
                       "spec": {"containers": [
                           {"name": "amd", "image": "x", "resources": {"limits": {"amd.com/gpu": "1"}}},
                           {"name": "nvidia", "image": "x",
                            "resources": {"limits": {"nvidia.com/gpu.shared": "1"}}}]}})


def _exception(expires: datetime) -> str:
    return json.dumps({"apiVersion": "worker.gpustack.ai/v1", "kind": "PolicyException",
                       "metadata": {"name": NAME, "namespace": EXC_NS},
                       "spec": {"policy": "pods-validation", "validations": ["one-accelerator-family"],
                                "match": {"namespaces": ["default"], "selector": {"matchLabels": LABEL}},
                                "reason": "vendor benchmark", "ticket": "OPS-4711",
                                "approver": "platform-lead@example.com", "expiresAt": _stamp(expires)}})


def _report_rows(kubectl) -> list[tuple[str, str, str]]:
    report = get_json(kubectl, "reports.openreports.io", "accelpolicy-audit", "-n", "default")
    return sorted((e["resources"][0]["name"], e["result"], e["message"]) for e in report.get("results", [])
                  if e["policy"] == "pods-validation" and e["resources"][0]["name"].startswith("bench-"))


def _cli_rows(kubeconfig: Path) -> list[tuple[str, str, str]]:
    out = subprocess.run([str(ACCELPOLICY), "audit", "--kubeconfig", str(kubeconfig), "-o", "json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode in (0, 1), out.stderr
    return sorted((r["resource"]["name"], r["result"], r["message"]) for r in json.loads(out.stdout)
                  if r["policy"] == "pods-validation" and r["resource"]["name"].startswith("bench-"))


def _events(kubectl, reason: str) -> list[str]:
    found = get_json(kubectl, "events", "-n", EXC_NS, "--field-selector",
                     f"reason={reason},involvedObject.name={NAME}")
    return [e["message"] for e in found.get("items", [])]


def test_an_exception_granted_through_the_charts_role_lets_a_pod_in_until_it_expires(kind):
    kubectl = kind.kubectl
    expires = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(minutes=3)
    refused = kubectl("--as=developer", "create", "-f", "-", input=_exception(expires), check=False)
    assert refused.returncode != 0 and 'User "developer" cannot create resource "policyexceptions" in API group ' \
        f'"worker.gpustack.ai" in the namespace "{EXC_NS}"' in refused.stderr
    denied = kubectl("apply", "-f", "-", input=_pod("bench-1"), check=False)
    assert denied.returncode != 0 and DENIAL in denied.stderr
    kubectl(f"--as={GRANTER}", "create", "-f", "-", input=_exception(expires))
    warning = (f"Warning: one-accelerator-family (pods-validation) lifted by PolicyException {EXC_NS}/{NAME} until "
               f"{_stamp(expires)}: vendor benchmark (approved by platform-lead@example.com, OPS-4711)")
    # the webhook's view follows the watch: retry until the exception is in it
    _, let_in = wait_for(lambda: kubectl("apply", "-f", "-", input=_pod("bench-1"), check=False),
                         lambda proc: proc.returncode == 0, timeout=30, what="bench-1 let in by the exception")
    assert warning in let_in.stderr
    skip = [("bench-1", "skip", f"excepted by PolicyException {EXC_NS}/{NAME} until {_stamp(expires)}: vendor "
                                "benchmark (approved by platform-lead@example.com, OPS-4711)")]
    assert _cli_rows(kind.kubeconfig) == skip
    wait_for(lambda: _report_rows(kubectl), lambda rows: rows == skip, timeout=60, what="the background audit's skip")
    wait_for(lambda: get_json(kubectl, "policyexception", NAME, "-n", EXC_NS).get("status"),
             lambda s: s == {"inForce": True, "coveredObjects": 1}, timeout=60, what="the exception's status")
    assert len(_events(kubectl, "ExceptionInForce")) == 1

    soon = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=5)
    kubectl(f"--as={GRANTER}", "patch", "policyexception", NAME, "-n", EXC_NS, "--type=merge",
            "-p", json.dumps({"spec": {"expiresAt": _stamp(soon)}}))
    wait_for(lambda: datetime.now(timezone.utc), lambda now: now > soon + timedelta(seconds=1), timeout=15,
             what="the expiry to pass")
    denied = kubectl("apply", "-f", "-", input=_pod("bench-2"), check=False)
    assert denied.returncode != 0 and DENIAL in denied.stderr
    fail = [("bench-1", "fail", f"spec: Forbidden: {DENIAL}")]
    assert _cli_rows(kind.kubeconfig) == fail
    wait_for(lambda: _report_rows(kubectl), lambda rows: rows == fail, timeout=60, what="the background audit's fail")
    wait_for(lambda: get_json(kubectl, "policyexception", NAME, "-n", EXC_NS).get("status"),
             lambda s: s == {"inForce": False, "coveredObjects": 0, "message": f"expired at {_stamp(soon)}"},
             timeout=60, what="the expired status")
    assert len(_events(kubectl, "ExceptionEnded")) == 1
    assert kubectl("--as=developer", "delete", "policyexception", NAME, "-n", EXC_NS, check=False).returncode != 0
    kubectl(f"--as={GRANTER}", "delete", "policyexception", NAME, "-n", EXC_NS)
