"""The API server refuses malformed objects through our CRD schemas, with readable messages.

Only types, structure and enums are schema rules (docs/reference/crds.md "CRD fields"): value rules with messages of their
own are the webhooks' and are not checked here.
"""

from __future__ import annotations

import json

import pytest

from testing.localcluster import KubectlError

IT = {"apiVersion": "worker.gpustack.ai/v1", "kind": "InstanceType"}
INST = {"apiVersion": "worker.gpustack.ai/v1", "kind": "Instance"}


def _obj(base, name, spec, namespace=None):
    md = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {**base, "metadata": md, "spec": spec}


BAD = [
    pytest.param(_obj(IT, "bad-bool", {"acceleratable": "yes", "os": "linux", "arch": "amd64"}),
                 'The InstanceType "bad-bool" is invalid: spec.acceleratable: Invalid value: "string": '
                 'spec.acceleratable in body must be of type boolean: "string"', id="instancetype-wrong-type"),
    pytest.param(_obj(IT, "bad-cores", {"acceleratable": True, "cores": 10240}),
                 'spec.cores: Invalid value: "integer": spec.cores in body must be of type string: "integer"',
                 id="instancetype-cores-must-be-string"),
    pytest.param(_obj(IT, "bad-unit", {"unitResources": "8/64Gi"}),
                 'spec.unitResources: Invalid value: "string": spec.unitResources in body must be of type object: "string"',
                 id="instancetype-unitresources-object"),
    pytest.param(_obj(INST, "bad-pull", {"type": "t", "image": "i", "imagePullPolicy": "Sometimes"}, "default"),
                 'The Instance "bad-pull" is invalid: spec.imagePullPolicy: Unsupported value: "Sometimes": '
                 'supported values: "Always", "IfNotPresent", "Never"', id="instance-bad-enum"),
    pytest.param(_obj(INST, "bad-proto", {"ports": [{"port": 80, "protocol": "HTTP"}]}, "default"),
                 'spec.ports[0].protocol: Unsupported value: "HTTP": supported values: "TCP", "UDP", "SCTP"',
                 id="instance-bad-protocol"),
    pytest.param(_obj(INST, "bad-pct", {"resources": {"acceleratorSlicedMemoryPercentage": "20%"}}, "default"),
                 'spec.resources.acceleratorSlicedMemoryPercentage in body must be of type integer: "string"',
                 id="instance-percentage-integer"),
    pytest.param(_obj({"apiVersion": "worker.gpustack.ai/v1", "kind": "InstancePersistentVolume"}, "bad-mode",
                      {"accessMode": "ReadWriteSometimes"}, "default"),
                 'spec.accessMode: Unsupported value: "ReadWriteSometimes": supported values: "ReadWriteMany", '
                 '"ReadWriteOnce", "ReadOnlyMany", "ReadWriteOncePod"', id="ipv-bad-enum"),
    pytest.param(_obj({"apiVersion": "gpustack.ai/v1", "kind": "Setting"}, "bad-value", {"value": True}, "default"),
                 'spec.value: Invalid value: "boolean": spec.value in body must be of type string: "boolean"',
                 id="setting-value-string"),
    pytest.param(_obj({"apiVersion": "worker.gpustack.ai/v1", "kind": "Devices"}, "bad-groups",
                      {"groups": [{"name": "NVIDIA A10G"}]}),
                 'spec.groups[0].id: Required value', id="devices-list-key-required"),
    pytest.param(_obj(IT, "bad-field", {"os": "linux", "unitResource": {"cpu": "8"}}),
                 'unknown field "spec.unitResource"', id="unknown-field-strict"),
]


@pytest.mark.parametrize("body,message", BAD)
def test_schema_refuses(kubectl, body, message):
    with pytest.raises(KubectlError) as e:
        kubectl("apply", "--validate=strict", "-f", "-", input=json.dumps(body))
    assert message in e.value.stderr, e.value.stderr
    ns = body["metadata"].get("namespace")
    got = kubectl("get", body["kind"].lower(), body["metadata"]["name"], *(["-n", ns] if ns else []),
                  check=False)
    assert got.returncode != 0 and "NotFound" in got.stderr  # nothing was stored


def test_status_schema_refuses_bad_mode(kubectl):
    kubectl("apply", "-f", "-", input=json.dumps(
        {"apiVersion": "worker.gpustack.ai/v1", "kind": "Devices", "metadata": {"name": "bad-mode"}}))
    status = {"groups": [{"id": "a10g", "manufacturer": "nvidia", "accelerators": [{"id": "GPU-1", "mode": 7}]}]}
    with pytest.raises(KubectlError) as e:
        kubectl("patch", "devices", "bad-mode", "--subresource=status", "--type=merge", "-p", json.dumps({"status": status}))
    assert 'status.groups[0].accelerators[0].mode: Unsupported value: 7: supported values: "0", "1", "2", "3", "4"' \
        in e.value.stderr, e.value.stderr
    with pytest.raises(KubectlError) as e:
        kubectl("patch", "instancetype.v1.worker.gpustack.ai", "bad-mode", "--subresource=status", "--type=merge",
                "-p", json.dumps({"status": {"phase": "Running"}}))
    assert "NotFound" in e.value.stderr or "not found" in e.value.stderr
    kubectl("delete", "devices", "bad-mode")


def test_instancetype_phase_enum(kubectl):
    kubectl("apply", "-f", "-", input=json.dumps(_obj(IT, "phase-enum", {"os": "linux", "arch": "amd64"})))
    with pytest.raises(KubectlError) as e:
        kubectl("patch", "instancetype", "phase-enum", "--subresource=status", "--type=merge",
                "-p", json.dumps({"status": {"phase": "Running"}}))
    assert 'status.phase: Unsupported value: "Running": supported values: "Active", "Inactive", "Draining", ' \
           '"Activating"' in e.value.stderr, e.value.stderr
    kubectl("delete", "instancetype", "phase-enum")
