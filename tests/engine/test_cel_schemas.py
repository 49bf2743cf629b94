"""The generated schemas the CEL type checker reads, the declared signatures, and what the checker
allows (dyn, ``has()``) and refuses (an unknown field of a schema-typed object)."""
from __future__ import annotations

import functools

import pytest

from types import ModuleType

from runtime.rules import schemas
from runtime.rules.cel.check import check
from runtime.rules.cel.library.declare import cel_function, collect
from runtime.rules.cel.library.table import FUNCTIONS, LIBRARY
from runtime.rules.cel.names import Names
from runtime.rules.cel.parse import parse
from runtime.rules.cel.types import DYN, Bounds, Scope, parse_type
from runtime.rules.schemas import regenerate


@functools.lru_cache(maxsize=1)
def _built() -> "dict | None":
    """What the regeneration script would write, or None when the pinned modules are not in the cache."""
    try:
        return regenerate.build()
    except (FileNotFoundError, LookupError):
        return None


@pytest.mark.skipif(_built() is None, reason="the pinned k8s.io/kubernetes and sigs.k8s.io/kueue modules "
                                                    "are not in Go's module cache")
def test_objects_json_is_current():
    """``python -m runtime.rules.schemas.regenerate`` writes what is checked in."""
    assert regenerate.render(_built()) == regenerate.OUT.read_text()


def test_objects_json_names_its_sources_and_kinds():
    content = schemas.content()
    assert content["sources"] == {"k8s.io/kubernetes": "v1.37.2", "sigs.k8s.io/kueue": "v0.17.0", "crds": "crds/*.yaml"}
    assert {"Pod", "Node", "Workload.kueue.x-k8s.io", "Instance.worker.gpustack.ai"} <= set(content["kinds"])


def test_every_custom_function_is_declared_once_with_its_signature_and_price():
    """The one table holds every function the rules may call, each under its own name, with a signature
    whose types read and a price that is a number per element or a named model."""
    assert sorted(LIBRARY) == sorted(FUNCTIONS) == [
        "beforeDash", "binaryQuantity", "cleanPath", "dig", "firstIndex", "flatten", "fnv64a", "groupBy",
        "indexed", "isEmpty", "join", "lowerAscii", "matches", "maxOf", "minOf", "nodePin", "objectName",
        "pathElements", "podContainers", "podDemand", "qCompare", "qError", "qFloor", "qIsInt", "qIsOne",
        "qIsZero", "qValid", "qValue", "quantity", "resourceFamily", "sortedUnique", "withNodeRequirement",
        "withNodeRequirements"]
    for name, function in LIBRARY.items():
        assert FUNCTIONS[name] is function.implementation and function.implementation.__name__ == name
        assert [parse_type(t, Bounds()).kind for t in function.params + (function.result,)]
        assert function.cost in ("regex", "sort") or isinstance(function.cost, (int, float)), name
    assert LIBRARY["matches"].pattern == 1 and LIBRARY["flatten"].ahead is not None


def test_two_functions_of_one_name_are_refused():
    def module(name: str) -> ModuleType:
        found = ModuleType(name)

        def lowerAscii(text):  # noqa: N802
            return text

        lowerAscii.__module__ = name
        found.lowerAscii = cel_function(("string",), "string", "arg0", 0.1)(lowerAscii)
        return found

    with pytest.raises(ValueError) as refused:
        collect(module("first"), module("second"))
    assert str(refused.value) == "two CEL functions named 'lowerAscii': second and first"


def _check(source: str, roots: dict, expect=None) -> list[str]:
    scope = Scope(roots=roots, functions=LIBRARY)
    return [p.message for p in check(source, parse(source), Names(roots=frozenset(roots)), scope, expect).types]


def test_a_pod_field_the_schema_does_not_have_is_a_finding():
    pod = schemas.object_type("Pod", "object")
    assert _check("object.spec.nodeName == 'a'", {"object": pod}) == []
    assert _check("object.spec.nodeNam == 'a'", {"object": pod})[0].startswith(
        "object.spec has no field or key 'nodeNam' (known: activeDeadlineSeconds, affinity, ")
    assert _check("has(object.spec.nodeNam)", {"object": pod}) == []   # a presence test reads no field


def test_dyn_is_permissive_and_quantities_are_dyn():
    pod = schemas.object_type("Pod", "object")
    assert _check("object.spec.containers[0].resources.limits['nvidia.com/gpu'] + 1 > 0", {"object": pod}) == []
    assert _check("dig(object, ['x'], 0) + 'a' == 'b'", {"object": pod}) == []
    assert _check("x.y.z + 1", {"x": DYN}) == []


def _cost(source: str, roots: dict) -> float:
    return check(source, parse(source), Names(roots=frozenset(roots)), Scope(roots=roots, functions=LIBRARY)).cost


def test_costs_follow_the_model_and_the_schema_bounds():
    """Reading a name or field 1; a comprehension its range + n * (1 + body); n the schema's maxItems
    (crds/worker.gpustack.ai_instances.yaml: spec.command maxItems 256) or the literal's length."""
    instance = schemas.object_type("Instance.worker.gpustack.ai", "object")
    command = instance.fields["spec"].fields["command"]
    assert (command.kind, command.size, command.elem.size) == ("list", 256, 16384)
    assert _cost("object.spec.command.map(c, c)", {"object": instance}) == 3 + 256 * 2
    assert _cost("[1, 2, 3].map(c, c + 1)", {}) == 1 + 3 * (1 + 2)
    assert _cost("'ab' + 'cd'", {}) == 1 + 1   # a tenth of the 4 characters, rounded up
