"""Regenerate ``objects.json``: the OpenAPI schemas of the kinds the rules read, for the CEL type checker.

Run ``.venv/bin/python -m runtime.rules.schemas.regenerate`` from the repository root. Sources, each at
the version this repository pins:

- Kubernetes core kinds (:data:`CORE_KINDS`): ``api/openapi-spec/swagger.json`` of the Go module
  ``k8s.io/kubernetes`` at the version of ``e2e/controlplane/go.mod`` (the control plane the build makes);
- Kueue's kinds (:data:`KUEUE_KINDS`): the CRDs under ``config/components/crd/bases`` of ``sigs.k8s.io/kueue``
  at the version of ``e2e/crdsources/go.mod`` (the CRDs the local control plane installs);
- ours: every CRD of ``crds/``.

The modules are read from Go's module cache (``$GOMODCACHE``, else ``$GOPATH/pkg/mod``, else
``~/go/pkg/mod``); fetch them with ``go mod download`` in those folders. Only what the type checker
uses is kept: ``type``, ``properties``, ``items``, ``additionalProperties``, ``$ref``, ``format``, the
size bounds and the int-or-string / preserve-unknown-fields markers; descriptions are dropped.
tests/engine/test_cel_schemas.py checks the file is current when the modules are present.
"""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
OUT = Path(__file__).resolve().parent / "objects.json"
CORE_KINDS = ("Pod", "Node", "Namespace", "ConfigMap")
KUEUE_KINDS = ("Workload", "LocalQueue", "ClusterQueue", "ResourceFlavor", "AdmissionCheck")
KEEP = ("type", "format", "maxItems", "maxLength", "maxProperties", "x-kubernetes-int-or-string",
        "x-kubernetes-preserve-unknown-fields")
_DEF_PREFIX = "#/definitions/"


def mod_cache() -> Path:
    """Go's module cache directory."""
    if os.environ.get("GOMODCACHE"):
        return Path(os.environ["GOMODCACHE"])
    if os.environ.get("GOPATH"):
        return Path(os.environ["GOPATH"].split(os.pathsep)[0]) / "pkg" / "mod"
    return Path.home() / "go" / "pkg" / "mod"


def pinned(go_mod: Path, module: str) -> str:
    """The version ``go_mod`` requires of ``module``. Raises LookupError when it requires none."""
    found = re.search(rf"^\s*{re.escape(module)}\s+(v\S+)", go_mod.read_text(), re.M)
    if found is None:
        raise LookupError(f"{go_mod}: no requirement of {module}")
    return found.group(1)


def module_dir(module: str, version: str) -> Path:
    """The module's folder in the cache (Go's case-encoding: an upper-case letter is ``!`` + lower)."""
    encoded = re.sub(r"[A-Z]", lambda m: "!" + m.group(0).lower(), module)
    return mod_cache() / f"{encoded}@{version}"


def slim(schema: dict) -> dict:
    """``schema`` with only the keys the type checker reads (see the module docstring)."""
    out = {k: schema[k] for k in KEEP if k in schema}
    if "$ref" in schema:
        out["$ref"] = schema["$ref"][len(_DEF_PREFIX):] if schema["$ref"].startswith(
            _DEF_PREFIX) else schema["$ref"]
    if "allOf" in schema and len(schema["allOf"]) == 1 and "$ref" in schema["allOf"][0]:
        out.update(slim(schema["allOf"][0]))
    if isinstance(schema.get("properties"), dict):
        out["properties"] = {k: slim(v) for k, v in sorted(schema["properties"].items())}
    if isinstance(schema.get("items"), dict):
        out["items"] = slim(schema["items"])
    if isinstance(schema.get("additionalProperties"), dict):
        out["additionalProperties"] = slim(schema["additionalProperties"])
    return out


def _refs(schema: dict):
    if "$ref" in schema:
        yield schema["$ref"]
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            yield from _refs(schema[key])
    for sub in (schema.get("properties") or {}).values():
        yield from _refs(sub)


def core(swagger: dict) -> tuple[dict, dict]:
    """``(kinds, definitions)`` of :data:`CORE_KINDS` and every definition they reach."""
    definitions = swagger["definitions"]
    kinds, kept, todo = {}, {}, []
    for kind in CORE_KINDS:
        name = f"io.k8s.api.core.v1.{kind}"
        kinds[kind] = {"$ref": name}
        todo.append(name)
    while todo:
        name = todo.pop()
        if name in kept:
            continue
        kept[name] = slim(definitions[name])
        todo.extend(_refs(kept[name]))
    return kinds, dict(sorted(kept.items()))


def crd_kinds(files) -> dict:
    """``{Kind.group: schema}`` of the served version of every CRD in ``files`` (the storage version)."""
    kinds = {}
    for path in sorted(files):
        for doc in yaml.load_all(Path(path).read_text(),
                                 Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
            if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            version = next(v for v in spec["versions"] if v.get("storage"))
            kinds[f"{spec['names']['kind']}.{spec['group']}"] = slim(version["schema"]["openAPIV3Schema"])
    return kinds


def build() -> dict:
    """The content of ``objects.json``. Raises FileNotFoundError when a pinned module is not in the cache."""
    k8s_version = pinned(ROOT / "e2e" / "controlplane" / "go.mod", "k8s.io/kubernetes")
    kueue_version = pinned(ROOT / "e2e" / "crdsources" / "go.mod", "sigs.k8s.io/kueue")
    swagger_path = module_dir("k8s.io/kubernetes", k8s_version) / "api" / "openapi-spec" / "swagger.json"
    kueue_dir = module_dir("sigs.k8s.io/kueue", kueue_version) / "config" / "components" / "crd" / "bases"
    kinds, definitions = core(json.loads(swagger_path.read_text()))
    kueue = crd_kinds(kueue_dir / f"kueue.x-k8s.io_{kind.lower()}s.yaml" for kind in KUEUE_KINDS)
    ours = crd_kinds((ROOT / "crds").glob("*.yaml"))
    return {
        "generatedBy": "python -m runtime.rules.schemas.regenerate",
        "sources": {"k8s.io/kubernetes": k8s_version, "sigs.k8s.io/kueue": kueue_version,
                    "crds": "crds/*.yaml"},
        "kinds": {**kinds, **kueue, **ours},
        "definitions": definitions,
    }


def render(content: dict) -> str:
    """The file's text: one JSON document, sorted keys, no indentation (it is generated, not read)."""
    return json.dumps(content, sort_keys=True, separators=(",", ":")) + "\n"


def main() -> int:
    """Write ``objects.json``; exit 1 naming the missing module when one is not in the cache."""
    try:
        text = render(build())
    except FileNotFoundError as exc:
        print(f"regenerate: {exc.filename}: not found (go mod download in e2e/controlplane and "
              f"e2e/crdsources)",
              file=sys.stderr)
        return 1
    OUT.write_text(text)
    print(f"{OUT}: {len(text)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
