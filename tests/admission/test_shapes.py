"""docs/webhook-hardening.md "Malformed objects never pass: shape checks": malformed objects are answered with field errors in Kubernetes' words, never allowed.

Every case was allowed (or answered with a Python message) before the ObjectShape check
(rules/admission/shapes.yaml) ran ahead of the rules.
"""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from runtime.engine.admission import AdmissionEngine, admission_view, decide, review_for
from runtime.engine.admission.shapes import shape_errors
from runtime.engine.policy import Policy
from runtime.model.admission import Schema
from runtime.rules.loader import load_rules
from runtime.snapshots import load_snapshot
from tests.builders import pod

ROOT = Path(__file__).resolve().parents[2]
QUEUE = {"kueue.x-k8s.io/queue-name": "gpustack-fnv64-c4680bb149644f1c"}


@pytest.fixture(scope="module")
def judge():
    policy = Policy(load_rules())
    engine = AdmissionEngine(policy)
    view = admission_view(policy, load_snapshot([str(ROOT / "tests/fixtures/seed/common")]))

    def run(obj: dict, policy_name: str, operation: str = "CREATE", old: dict | None = None) -> dict:
        return decide(engine, review_for(obj, operation, old), view, policy_name)[0]["response"]
    return run


def _pod(spec: dict) -> dict:
    return pod("p", labels=QUEUE, spec=spec)


def _instance(**spec) -> dict:
    base = {"type": "gpustack--generic-linux-amd64", "image": "ubuntu:24.04", "volume": {"ephemeral": {"capacity": "1Gi"}}}
    return {"apiVersion": "worker.gpustack.ai/v1", "kind": "Instance", "metadata": {"name": "i", "namespace": "default"},
            "spec": {**base, **spec}}


def _type_error(path: str, found: str, want: str) -> str:
    return f'{path}: Invalid value: "{found}": {path} in body must be of type {want}: "{found}"'


@pytest.mark.parametrize("spec, error", [
    ({"containers": "oops"}, _type_error("spec.containers", "string", "array")),
    ({"containers": ["oops"]}, _type_error("spec.containers[0]", "string", "object")),
    ({"containers": [{"name": "c", "resources": {"limits": "oops"}}]},
     _type_error("spec.containers[0].resources.limits", "string", "object")),
    ({"containers": [{"name": "c", "resources": "oops"}]}, _type_error("spec.containers[0].resources", "string", "object")),
    ({"initContainers": "oops", "containers": []}, _type_error("spec.initContainers", "string", "array")),
    ({"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu.sliced.memory-percentage": None}}}]},
     _type_error("spec.containers[0].resources.limits[nvidia.com/gpu.sliced.memory-percentage]", "null", "integer,string")),
    # the mutation copied a term it could not read into its placement patch (docs/reference/controller.md "Pod admission")
    ({"containers": [], "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "In", "values": "oops"}]}]}}}},
     _type_error("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
                 ".matchExpressions[0].values", "string", "array")),
])
@pytest.mark.parametrize("webhook", ["pods-validation", "pods-mutation"])
def test_pod_shapes_are_refused_in_kubernetes_words(judge, spec, error, webhook):
    resp = judge(_pod(spec), webhook)
    assert resp["allowed"] is False and "patch" not in resp
    assert resp["status"]["code"] == 422
    assert resp["status"]["message"] == f'Pod "p" is invalid: {error}'


QUANTITY = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"


@pytest.mark.parametrize("key, value", [
    ("nvidia.com/gpu.sliced", "abc"),   # the mutating webhook patched units around it; validation said "single accelerator"
    ("nvidia.com/gpu", "1.2.3"),        # allowed by validation (read as 0)
    ("nvidia.com/gpu", " 1"),           # the API server's ParseQuantity takes no spaces
    ("cpu", "abc"),
])
@pytest.mark.parametrize("webhook", ["pods-validation", "pods-mutation"])
def test_an_unreadable_quantity_is_refused_by_both_pod_webhooks_not_patched(judge, key, value, webhook):
    limits = {"nvidia.com/gpu.sliced.memory-percentage": "20", key: value}
    resp = judge(_pod({"containers": [{"name": "c", "resources": {"limits": limits}}]}), webhook)
    assert resp["allowed"] is False and "patch" not in resp
    assert resp["status"]["message"] == (
        f'Pod "p" is invalid: spec.containers[0].resources.limits[{key}]: Invalid value: "{value}": {QUANTITY}')


@pytest.mark.parametrize("spec, error", [
    ({"resources": "oops"}, _type_error("spec.resources", "string", "object")),
    ({"additionalVolumes": "oops"}, _type_error("spec.additionalVolumes", "string", "array")),
    ({"privileged": "true"}, _type_error("spec.privileged", "string", "boolean")),
    ({"resources": {"acceleratorSlicedMemoryPercentage": "20"}},
     _type_error("spec.resources.acceleratorSlicedMemoryPercentage", "string", "integer")),
    ({"additionalVolumes": [{"mountPath": f"/m/{i}", "configMap": {"name": f"c{i}"}} for i in range(1000)]},
     "spec.additionalVolumes: Too many: 1000: must have at most 100 items"),
    ({"image": "x" * 5000}, "spec.image: Too long: may not be more than 4096 bytes"),
    # unreadable quantities: validation allowed cpu/ram/localStorage ones, the mutation rewrote ram to the default
    ({"resources": {"cpu": "abc"}}, f'spec.resources.cpu: Invalid value: "abc": {QUANTITY}'),
    ({"resources": {"ram": "lots"}}, f'spec.resources.ram: Invalid value: "lots": {QUANTITY}'),
    ({"resources": {"localStorage": "x"}}, f'spec.resources.localStorage: Invalid value: "x": {QUANTITY}'),
    ({"resources": {"accelerator": "1.2.3"}}, f'spec.resources.accelerator: Invalid value: "1.2.3": {QUANTITY}'),
    ({"volume": {"ephemeral": {"capacity": "big"}}}, f'spec.volume.ephemeral.capacity: Invalid value: "big": {QUANTITY}'),
])
@pytest.mark.parametrize("webhook", ["instances-validation", "instances-mutation"])
def test_instance_shapes_are_refused_in_kubernetes_words(judge, spec, error, webhook):
    resp = judge(_instance(**spec), webhook)
    assert resp["allowed"] is False and "patch" not in resp
    assert resp["status"]["message"] == f'Instance.worker.gpustack.ai "i" is invalid: {error}'


def test_the_workload_fit_pin_never_denies_a_malformed_workload(judge):
    workload = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                "metadata": {"name": "w", "namespace": "default"},
                "spec": {"queueName": "gpustack-fnv64-c4680bb149644f1c", "podSets": "oops"}}
    resp = judge(workload, "workloads-mutation")
    assert resp == {"uid": resp["uid"], "allowed": True}


def _caps(schema: dict, path: str = "spec") -> dict[str, tuple]:
    """path -> (type, maxItems, maxLength, maxProperties) for every node of an OpenAPI schema."""
    out = {path: (schema.get("type"), schema.get("maxItems"), schema.get("maxLength"), schema.get("maxProperties"))}
    for key, sub in (schema.get("properties") or {}).items():
        out.update(_caps(sub, f"{path}.{key}"))
    if schema.get("items"):
        out.update(_caps(schema["items"], f"{path}[]"))
    return out


@pytest.mark.parametrize("shape, crd", [
    ("instance", "worker.gpustack.ai_instances.yaml"),
    ("instancetype", "worker.gpustack.ai_instancetypes.yaml"),
    ("setting", "gpustack.ai_settings.yaml"),
])
def test_every_shape_agrees_with_its_crd(shape, crd):
    """Every field a shape declares has the same type and caps in the CRD, and every field of the
    CRD's spec that the shape leaves out has no rule reading it (the Instance's shape covers what its
    rules read; the InstanceType's and Setting's cover the whole spec)."""
    crd_doc = yaml.safe_load((ROOT / "crds" / crd).read_text())
    crd_spec = crd_doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rule_spec = load_rules().get("ObjectShape", shape).openAPIV3Schema.model_dump(exclude_none=True)["properties"]["spec"]
    crd_caps, rule_caps = _caps(crd_spec), _caps(rule_spec)   # caps linked from rules/constants.yaml
    assert {p: crd_caps.get(p) for p in rule_caps} == rule_caps
    if shape != "instance":
        assert set(rule_caps) == set(crd_caps)


@pytest.mark.parametrize("kind, spec, error", [
    # a Python message before: 'str' object has no attribute 'get' (a traceback through decide)
    ("InstanceType", "oops", _type_error("spec", "string", "object")),
    # "Internal error occurred: policy instancetypes-validation: overflow"
    ("InstanceType", {"unitResources": {"cpu": 2 ** 63}}, _type_error("spec.unitResources.cpu", "number", "string")),
    # the mutation labelled the type acceleratable.feature.gpustack.ai/['x']
    ("InstanceType", {"acceleratable": True, "acceleratorGroup": ["x"]}, _type_error("spec.acceleratorGroup", "array", "string")),
    ("InstanceType", {"acceleratable": "true"}, _type_error("spec.acceleratable", "string", "boolean")),
    ("Setting", "oops", _type_error("spec", "string", "object")),   # allowed before
    ("Setting", {"value": True}, _type_error("spec.value", "boolean", "string")),   # allowed before
    ("Setting", {"value": ["true"]}, _type_error("spec.value", "array", "string")),   # Invalid value: "ListType([StringType('true')])"
    ("Setting", {"value": 2 ** 63}, _type_error("spec.value", "number", "string")),   # overflow
])
def test_instancetype_and_setting_shapes_are_refused_in_kubernetes_words(judge, kind, spec, error):
    if kind == "InstanceType":
        obj = {"apiVersion": "worker.gpustack.ai/v1", "kind": kind, "metadata": {"name": "t"}, "spec": spec}
        webhooks, rendered = ["instancetypes-validation", "instancetypes-mutation"], 'InstanceType.worker.gpustack.ai "t"'
    else:
        obj = {"apiVersion": "gpustack.ai/v1", "kind": kind,
               "metadata": {"name": "workload-fit-affinity", "namespace": "gpustack-system"}, "spec": spec}
        webhooks, rendered = ["settings-validation"], 'Setting.gpustack.ai "workload-fit-affinity"'
    for webhook in webhooks:
        resp = judge(obj, webhook)
        assert resp["allowed"] is False and "patch" not in resp
        assert resp["status"]["message"] == f"{rendered} is invalid: {error}"


@pytest.mark.parametrize("spec, error", [
    ({"priority": 2 ** 63, "containers": []}, None),   # a field no rule reads: the API server's float64
    ({"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 2 ** 63}}}]},
     _type_error("spec.containers[0].resources.limits[nvidia.com/gpu]", "number", "integer,string")),
])
@pytest.mark.parametrize("webhook", ["pods-validation", "pods-mutation"])
def test_an_integer_beyond_int64_is_read_as_the_api_server_decodes_it(judge, spec, error, webhook):
    """Before: ``Internal error occurred: policy pods-validation: overflow`` (CEL's int64) for any
    such number anywhere in the object."""
    resp = judge(_pod(spec), webhook)
    if error is None:
        assert resp["allowed"] is True
    else:
        assert resp["status"]["message"] == f'Pod "p" is invalid: {error}'


def test_shape_errors_walk_maps_lists_and_stop_at_the_limit():
    schema = Schema.model_validate({"type": "object", "properties": {
        "xs": {"type": "array", "items": {"type": "integer"}},
        "m": {"type": "object", "additionalProperties": {"type": "string"}}}})
    errors = shape_errors(schema, {"xs": [1, "a", 2.5, True], "m": {"k": 1}, "other": "ignored"})
    assert [e.render() for e in errors] == [
        'xs[1]: Invalid value: "string": xs[1] in body must be of type integer: "string"',
        'xs[2]: Invalid value: "number": xs[2] in body must be of type integer: "number"',
        'xs[3]: Invalid value: "boolean": xs[3] in body must be of type integer: "boolean"',
        'm[k]: Invalid value: "integer": m[k] in body must be of type string: "integer"']
    assert len(shape_errors(schema, {"xs": ["a"] * 50}, limit=5)) == 5
    assert shape_errors(schema, copy.deepcopy({"xs": [1, 2], "m": {"a": "b"}})) == []


@pytest.mark.parametrize("old, error", [
    ({"spec": {"privileged": "true"}, "status": {"phase": "Ready"}},
     _type_error("oldObject.spec.privileged", "string", "boolean")),
    ({"spec": {}, "status": "oops"}, _type_error("oldObject.status", "string", "object")),   # was allowed
])
def test_an_unreadable_old_object_is_refused_not_judged(judge, old, error):
    """`admit --old` reads the old object from the user: the UPDATE rules read its spec and phase."""
    stored = _instance(**old["spec"])
    stored["status"] = old["status"]
    for webhook in ("instances-validation", "instances-mutation"):
        resp = judge(_instance(), webhook, "UPDATE", stored)
        assert resp["allowed"] is False and "patch" not in resp
        assert resp["status"]["message"] == f'Instance.worker.gpustack.ai "i" is invalid: {error}'


def test_an_old_object_over_a_cap_is_still_judged(judge):
    """A stored Instance may predate a cap: only the new object's size is refused."""
    stored = _instance(stop=True, additionalVolumes=[{"mountPath": f"/m/{i}", "configMap": {"name": f"c{i}"}} for i in range(150)])
    stored["status"] = {"phase": "Stopped"}
    edited = _instance(stop=True, additionalVolumes=[{"mountPath": "/m/0", "configMap": {"name": "c0"}}])
    assert judge(edited, "instances-validation", "UPDATE", stored)["allowed"] is True
