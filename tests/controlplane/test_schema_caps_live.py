"""docs/webhook-hardening.md "Malformed objects never pass: shape checks": the CRD's caps and types hold at the API server itself (no webhook here),
in the same words the webhook's shape check uses (rules/admission/shapes.yaml)."""
from __future__ import annotations

import json

import pytest

from runtime.engine.admission import AdmissionEngine, admission_view, decide, review_for
from runtime.engine.policy import Policy
from runtime.rules.loader import load_rules

pytestmark = pytest.mark.controlplane


def _instance(name: str, **spec) -> dict:
    return {"apiVersion": "worker.gpustack.ai/v1", "kind": "Instance", "metadata": {"name": name, "namespace": "default"},
            "spec": {"type": "t", "image": "ubuntu:24.04", "volume": {"ephemeral": {"capacity": "1Gi"}}, **spec}}


def _instancetype(name: str, **spec) -> dict:
    return {"apiVersion": "worker.gpustack.ai/v1", "kind": "InstanceType", "metadata": {"name": name}, "spec": spec}


def _setting(name: str, **spec) -> dict:
    return {"apiVersion": "gpustack.ai/v1", "kind": "Setting", "metadata": {"name": name, "namespace": "default"},
            "spec": spec}


@pytest.mark.parametrize("obj, webhook", [
    (_instance("caps-demo", additionalVolumes=[{"mountPath": f"/m/{i}", "configMap": {"name": f"c{i}"}} for i in range(101)]),
     "instances-validation"),
    (_instance("caps-demo", image="x" * 4097), "instances-validation"),
    (_instance("caps-demo", privileged="true"), "instances-validation"),
    (_instancetype("caps-demo", acceleratable="true"), "instancetypes-validation"),
    (_instancetype("caps-demo", unitResources="oops"), "instancetypes-validation"),
    (_setting("workload-fit-affinity", value=True), "settings-validation"),
])
def test_the_api_server_and_the_webhook_refuse_alike(kubectl, obj, webhook):
    proc = kubectl("create", "-f", "-", input=json.dumps(obj), check=False)
    assert proc.returncode != 0
    policy = Policy(load_rules())
    answer, _ = decide(AdmissionEngine(policy), review_for(obj), admission_view(policy, None), webhook)
    ours = answer["response"]["status"]["message"].split(" is invalid: ", 1)[1]
    name = obj["metadata"]["name"]
    assert proc.stderr.strip() == f'The {obj["kind"]} "{name}" is invalid: {ours}'
