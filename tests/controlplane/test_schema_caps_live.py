"""Issue 13 items 3 and 6: the CRD's caps and types hold at the API server itself (no webhook here),
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


@pytest.mark.parametrize("spec", [
    {"additionalVolumes": [{"mountPath": f"/m/{i}", "configMap": {"name": f"c{i}"}} for i in range(101)]},
    {"image": "x" * 4097},
    {"privileged": "true"},
])
def test_the_api_server_and_the_webhook_refuse_alike(kubectl, spec):
    obj = _instance("caps-demo", **spec)
    proc = kubectl("create", "-f", "-", input=json.dumps(obj), check=False)
    assert proc.returncode != 0
    policy = Policy(load_rules())
    answer, _ = decide(AdmissionEngine(policy), review_for(obj), admission_view(policy, None), "instances-validation")
    ours = answer["response"]["status"]["message"].split(" is invalid: ", 1)[1]
    assert proc.stderr.strip() == f'The Instance "caps-demo" is invalid: {ours}'
