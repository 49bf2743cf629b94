"""Unit tests of the admission pieces: key classification, CEL helpers, patches, verdicts, requests."""
from __future__ import annotations

import base64
import json

import pytest
from celpy import celtypes

from runtime.engine.admission import AdmissionEngine, BadReview, Outcome, build_response, parse_review, review_for
from runtime.engine.admission.patch import REMOVE, apply_writes, diff_writes, escape
from runtime.engine.admission.verdict import FieldError, aggregate, render_value
from runtime.engine.policy import Policy
from runtime.model.resourcefamily import resource_family
from runtime.rules.cel.compile import compile_expression
from runtime.rules.cel.library.objects import podContainers
from runtime.rules.loader import load_rules


@pytest.fixture(scope="module")
def engine() -> AdmissionEngine:
    return AdmissionEngine(Policy(load_rules()))


# docs/reference/controller.md "Pod accelerator requests", the whole table
@pytest.mark.parametrize("name, family", [
    ("nvidia.com/gpu", "exclusive"), ("amd.com/gpu", "exclusive"), ("nvidia.com/gpu.shared", "shared"),
    ("nvidia.com/gpu.sliced", "sliced"), ("nvidia.com/gpu.sliced.units", "sliced"),
    ("nvidia.com/gpu.sliced.memory-percentage", "sliced"), ("nvidia.com/gpu.partitioned", "partitioned"),
    ("nvidia.com/gpu.partitioned.units", "partitioned"), ("nvidia.com/gpu.partitioned.mig-3g.40gb", "partitioned"),
    ("device.gpustack.ai/nvidia.visibility", "visibility"), ("device.gpustack.ai/example.visibility", "none"),
    ("credits.gpustack.ai/nvidia", "none"), ("example.com/foo", "none"), ("example.com/foo.sliced", "none"),
    ("example.com/foo.partitioned", "none"), ("nvidia.com/gpu.sliced.bogus", "none"),
    ("nvidia.com/gpu.partitioned.bogus", "none"), ("nvidia.com/gpu.partitioned.mig-", "none"),
    ("nvidia.com/gpu.sliced.mig-1g.10gb", "none"), ("cpu", "none"), ("device.gpustack.ai/rdma.shared", "none"),
    ("hygon.com/dcu.partitioned.mig-2g.15gb", "partitioned"), ("alibabacloud.com/ppu.partitioned.mig-4g.48gb", "partitioned"),
])
def test_family_classifier(engine, name, family):
    params = engine.params["pods-validation"]
    assert resource_family(name, params["resourceKeys"], params["manufacturers"])["family"] == family


def test_family_base_and_profile(engine):
    params = engine.params["pods-validation"]
    got = resource_family("nvidia.com/gpu.partitioned.mig-3g.40gb", params["resourceKeys"], params["manufacturers"])
    assert got == {"family": "partitioned", "base": "nvidia.com/gpu", "profile": "3g.40gb"}


@pytest.mark.parametrize("expr, want", [
    ("cleanPath('/workspace/.')", "/workspace"), ("cleanPath('/tmp/../data')", "/data"),
    ("cleanPath('//a//b/')", "/a/b"), ("cleanPath('/..')", "/"), ("cleanPath('')", ""),
    ("qValue('0.5')", 1), ("qValue('1m')", 1), ("qIsOne('1m')", False), ("qIsOne('1')", True),
    ("qCompare('1500m', '2')", -1), ("qCompare('2Gi', '2048Mi')", 0), ("qIsInt('1m')", False),
    ("binaryQuantity(1610612736)", "1536Mi"), ("binaryQuantity(25769803776)", "24Gi"),
    ("quantity(266666)", "266666"), ("quantity(12800000)", "12800k"), ("quantity(8000000)", "8M"),
    ("join(sortedUnique(['b', 'a', 'b']), ' ')", "a b"), ("dig({'a': [{'b': 2}]}, ['a', 0, 'b'], 0)", 2),
    ("dig({'a': 1}, ['x', 'y'], 'd')", "d"), ("isEmpty({})", True), ("isEmpty('x')", False),
    ("indexed(['x', 'y'])[1].i", 1), ("'..' in pathElements('conf/../../etc')", True),
])
def test_cel_helpers(expr, want):
    assert compile_expression(expr).evaluate({}) == want


def test_with_node_requirement_placement():
    req = {"key": "k", "operator": "Gt", "values": ["1"]}
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]}, {}]}}}
    out = compile_expression("withNodeRequirement(a, r)").evaluate({"a": aff, "r": req})
    terms = out["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"] == [req] and terms[1] == {}
    again = compile_expression("withNodeRequirement(a, r)").evaluate({"a": out, "r": req})
    assert again == out


def test_patch_add_whole_map_replace_remove_and_order():
    obj = {"spec": {"containers": [{"resources": {"limits": {"a/b": "1", "x": "9"}}}], "initContainers": [{}],
                    "keep": 1, "gone": 2}}
    writes = [
        (("spec", "affinity"), {"n": 1}),
        (("spec", "containers", 0, "resources", "limits", "a/b"), "1"),  # equal: no operation
        (("spec", "containers", 0, "resources", "limits", "x"), "10"),
        (("spec", "containers", 0, "resources", "requests", "z"), "2"),
        (("spec", "containers", 0, "resources", "requests", "y~"), "3"),
        (("spec", "initContainers", 0, "resources", "limits", "q"), "4"),
        (("spec", "gone"), REMOVE),
        (("spec", "missing"), REMOVE),
    ]
    order = {"initContainers": 0, "containers": 1, "affinity": 2, "requests": 0, "limits": 1}
    mutated, ops = apply_writes(obj, writes, order)
    assert ops == [
        {"op": "add", "path": "/spec/initContainers/0/resources", "value": {"limits": {"q": "4"}}},
        {"op": "add", "path": "/spec/containers/0/resources/requests", "value": {"z": "2", "y~": "3"}},
        {"op": "replace", "path": "/spec/containers/0/resources/limits/x", "value": "10"},
        {"op": "add", "path": "/spec/affinity", "value": {"n": 1}},
        {"op": "remove", "path": "/spec/gone"},
    ]
    assert "gone" not in mutated["spec"] and obj["spec"]["gone"] == 2  # the input is not changed
    assert escape("a~/b") == "a~0~1b"


def test_diff_writes_depth():
    old = {"metadata": {"labels": {"a": "1"}}, "spec": {"x": 1, "y": 2}}
    new = {"metadata": {"labels": {"a": "2"}, "finalizers": ["f"]}, "spec": {"x": 1, "z": 3}}
    assert diff_writes(old, new, 2) == [
        (("metadata", "finalizers"), ["f"]), (("metadata", "labels"), {"a": "2"}),
        (("spec", "y"), REMOVE), (("spec", "z"), 3)]


def test_render_values_and_aggregate():
    assert render_value("2") == '"2"' and render_value(120) == "120" and render_value(True) == "true"
    e1 = FieldError("Invalid", "spec.a", "bad", "2")
    e2 = FieldError("Forbidden", "spec", "no")
    assert e1.render() == 'spec.a: Invalid value: "2": bad'
    assert aggregate([e1]) == 'spec.a: Invalid value: "2": bad'
    assert aggregate([e1, e2, e1]) == '[spec.a: Invalid value: "2": bad, spec: Forbidden: no]'
    assert FieldError("NotFound", "spec.type", "", "x").render() == 'spec.type: Not found: "x"'
    assert FieldError("Unsupported", "f", "supported values: \"a\"", "b").render() == \
        'f: Unsupported value: "b": supported values: "a"'


def test_build_response_shapes():
    invalid = Outcome(policy="p", kind="Instance", group="worker.gpustack.ai", object_kind="Instance.worker.gpustack.ai",
                      name="x", errors=[FieldError("Required", "spec.type", "type must be specified")])
    resp = build_response("u1", invalid)["response"]
    assert resp == {"uid": "u1", "allowed": False, "status": {
        "status": "Failure", "reason": "Invalid", "code": 422,
        "message": 'Instance.worker.gpustack.ai "x" is invalid: spec.type: Required value: type must be specified',
        "details": {"name": "x", "kind": "Instance", "group": "worker.gpustack.ai", "causes": [
            {"reason": "FieldValueRequired", "message": "Required value: type must be specified", "field": "spec.type"}]}}}
    internal = build_response("u2", Outcome(policy="p", denial=(500, "InternalError", "not ready; retry")))["response"]
    assert internal["status"] == {"status": "Failure", "message": "Internal error occurred: not ready; retry",
                                  "reason": "InternalError", "code": 500}
    patched = build_response("u3", Outcome(policy="p", patch=[{"op": "add", "path": "/a", "value": 1}]))["response"]
    assert patched["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(patched["patch"])) == [{"op": "add", "path": "/a", "value": 1}]


@pytest.mark.parametrize("body, uid, message", [
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u", "kind": {"kind": 3},
                                                                             "operation": "CREATE", "object": {}}},
     "u", "request.kind.kind must be a string"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u", "kind": {}, "operation": "PATCH"}},
     "u", "request.operation must be one of CREATE, UPDATE, DELETE, CONNECT"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u", "kind": {}, "operation": "CREATE"}},
     "u", "request.object is required for CREATE"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "kind": {}, "operation": "CREATE", "object": {"metadata": {"labels": {"a": 1}}}}},
     "u", "request.object.metadata.labels values must be strings"),
])
def test_parse_review_errors(body, uid, message):
    with pytest.raises(BadReview) as info:
        parse_review(body)
    assert info.value.uid == uid and str(info.value) == message


def test_review_for_builds_a_request():
    review = review_for({"apiVersion": "worker.gpustack.ai/v1", "kind": "Instance", "metadata": {"name": "i"}}, uid="x")
    req = parse_review(review)
    assert (req.uid, req.kind, req.namespace, req.operation) == (
        "x", {"group": "worker.gpustack.ai", "version": "v1", "kind": "Instance"}, "default", "CREATE")


def test_cel_values_cross_the_edge_as_json():
    got = podContainers(celtypes.MapType(), {"families": []}, [])
    assert list(got) == []
