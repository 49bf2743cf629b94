"""The OpenAPI schemas of the kinds the rules read, as CEL types (:mod:`runtime.rules.cel.types`).

``objects.json`` is generated (``python -m runtime.rules.schemas.regenerate``: Kubernetes' core kinds
from ``k8s.io/kubernetes``'s ``api/openapi-spec`` at the version the control plane build pins, Kueue's
from its CRDs at the version ``e2e/crdsources`` pins, ours from ``crds/``). :func:`object_type` turns a
kind's schema into a :class:`runtime.rules.cel.types.CelType`: an object with properties is an object whose
other fields are findings, ``additionalProperties`` a map, an array a list; ``maxItems``,
``maxLength`` and ``maxProperties`` bound its size, the request body cap (:class:`Bounds`) what they
leave unbounded. A quantity, an int-or-string, a ``number`` (a JSON number may read as int or double)
and a field that keeps unknown fields are ``dyn``.
"""
from __future__ import annotations

import functools
import importlib.resources
import json
from typing import Optional

from runtime.rules.cel.types import BOOL, DYN, INF, INT, Bounds, CelType, sized

_DYN_REFS = frozenset({"io.k8s.apimachinery.pkg.api.resource.Quantity",
                       "io.k8s.apimachinery.pkg.util.intstr.IntOrString",
                       "io.k8s.apimachinery.pkg.runtime.RawExtension"})
_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


@functools.lru_cache(maxsize=1)
def content() -> dict:
    """``objects.json``: ``{sources, kinds: {name: schema}, definitions: {name: schema}}``."""
    return json.loads(
        importlib.resources.files(__name__).joinpath("objects.json").read_text(encoding="utf-8"))


def kind_names() -> dict[str, str]:
    """Every name a rule file may give a kind (``Pod``, ``Workload.kueue.x-k8s.io``, ``Workload``) ->
    its key in ``objects.json``; a bare kind name only where one group has it."""
    kinds = content()["kinds"]
    names = {name: name for name in kinds}
    bare: dict[str, list[str]] = {}
    for name in kinds:
        bare.setdefault(name.split(".", 1)[0], []).append(name)
    names.update({short: full[0] for short, full in bare.items() if len(full) == 1 and short not in names})
    return names


class _Converter:
    def __init__(self, bounds: Bounds):
        self.bounds = bounds
        self.definitions = content()["definitions"]
        self.memo: dict[str, CelType] = {}

    def ref(self, name: str, label: str) -> CelType:
        if name in _DYN_REFS:
            return DYN
        if name not in self.memo:
            self.memo[name] = DYN  # a recursive reference reads as dyn
            self.memo[name] = self.schema(self.definitions.get(name, {}), label)
        return self.memo[name]

    def schema(self, schema: dict, label: str, top: bool = False) -> CelType:
        if "$ref" in schema:
            return self.ref(schema["$ref"], label)
        if schema.get("x-kubernetes-int-or-string") or schema.get("x-kubernetes-preserve-unknown-fields"):
            return DYN
        kind = schema.get("type")
        if kind == "object" or "properties" in schema or "additionalProperties" in schema:
            return self.object(schema, label, top)
        if kind == "array":
            return sized("list", schema.get("maxItems", INF),
                         self.schema(schema.get("items") or {}, label))
        if kind == "string":
            return sized("string", schema.get("maxLength", INF))
        return {"integer": INT, "boolean": BOOL}.get(kind, DYN)

    def object(self, schema: dict, label: str, top: bool) -> CelType:
        size = schema.get("maxProperties", INF)
        if "properties" in schema:
            fields = {k: self.schema(v, f"{label}.{k}") for k, v in schema["properties"].items()}
            if top:  # a CRD's schema leaves the envelope to the API server
                fields.setdefault("apiVersion", sized("string", INF))
                fields.setdefault("kind", sized("string", INF))
                if "properties" not in (schema["properties"].get("metadata") or {}):
                    fields["metadata"] = self.ref(_OBJECT_META, f"{label}.metadata")
            return CelType("object", fields=fields, size=size, name=label)
        extra = schema.get("additionalProperties")
        return sized("map", size, self.schema(extra, label) if isinstance(extra, dict) else DYN)


@functools.lru_cache(maxsize=64)
def object_type(kind: str, label: str, bounds: Bounds = Bounds()) -> Optional[CelType]:
    """The CEL type of an object of ``kind`` (as :func:`kind_names` spells it), its findings naming it
    ``label`` (``object``); None when ``objects.json`` has no such kind."""
    name = kind_names().get(kind)
    if name is None:
        return None
    return _Converter(bounds).schema(content()["kinds"][name], label, top=True)
