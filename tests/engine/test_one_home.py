"""One home per vocabulary (docs/architecture.md "Where to add"): a label key, a name pattern or a constant is spelled once in rules/.

The homes are rules/labels.yaml (keys, prefixes, suffixes), rules/controller.yaml (namespaces,
the controller's ServiceAccount), rules/pools/derivation.yaml (the name and entrance prefixes) and
rules/constants.yaml; every other rule reads
them (runtime/rules/vocabulary.py). :func:`restatements` lists each word found in more than one rule
document; spelled twice, renaming it in one place would silently break the other (the Workload fit pin
once matched on its own copy of the entrance prefix).
"""
from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterator

import yaml

from runtime.rules.loader import DEFAULT_RULES_DIR

# A label/annotation key or key prefix: a DNS subdomain, a slash, an optional name.
LABEL_KEY = re.compile(r"(?<![-A-Za-z0-9_.])(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?\.)+[a-z]{2,}/[-A-Za-z0-9_.]*")
# A name pattern: a quoted CEL literal, or a whole value, that is a name prefix ending in '-'.
NAME_PREFIX = re.compile(r"""['"]([a-z0-9][-a-z0-9]*-)['"]""")
WHOLE_NAME_PREFIX = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*-")
# Constants whose value is distinctive enough to recognise as a literal elsewhere (>= 100; 10, the
# shares per accelerator, is also every other small count).
DISTINCTIVE = 100
# (document, field path) holding a number equal to a constant that means something else.
OTHER_MEANING = {
    ("instances/pod.yaml:instance-pod", "spec.overcommit.acceleratedCpuMillisPerCore"):
        "100 millicores of CPU per core (decision 12), not a percentage of an accelerator",
    ("admission/shapes.yaml:instance", "spec.openAPIV3Schema.properties.spec.properties.additionalVolumes.maxItems"):
        "at most 100 additional volumes (the Instance CRD's cap), not a percentage of an accelerator",
    ("cel.yaml:cel", "spec.runtime.checkEvery"):
        "100 comprehension iterations between budget checks (Kubernetes'), not a percentage of an accelerator",
}


def documents(root: Path) -> Iterator[tuple[str, dict]]:
    """``(file:name, document)`` of every rule document below ``root`` (rule tests excluded)."""
    for path in sorted(root.rglob("*.yaml")):
        rel = path.relative_to(root)
        if rel.parts[0] == "tests" or path.name.startswith("_"):
            continue
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc:
                yield f"{rel.as_posix()}:{doc['metadata']['name']}", doc


def leaves(value: Any, path: tuple = ()) -> Iterator[tuple[str, Any]]:
    """``(dotted path, scalar)`` of every scalar below ``value``."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from leaves(item, path + (str(key),))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from leaves(item, path + (str(i),))
    else:
        yield ".".join(path), value


def restatements(root: Path) -> list[str]:
    """Every key, name pattern, home name or constant of ``root`` spelled in more than one document."""
    docs = [(name, list(leaves(doc.get("spec") or {}, ("spec",)))) for name, doc in documents(root)]
    homes = {name.split(":")[0]: scalars for name, scalars in docs}
    where: dict[str, set[str]] = defaultdict(set)
    for name, scalars in docs:
        for _, value in scalars:
            if isinstance(value, str):
                for token in LABEL_KEY.findall(value) + NAME_PREFIX.findall(value):
                    where[token].add(name)
                if WHOLE_NAME_PREFIX.fullmatch(value):
                    where[value].add(name)
    out = [f"{token!r} in {', '.join(sorted(names))}" for token, names in sorted(where.items()) if len(names) > 1]
    names = sorted({str(v) for path, v in homes.get("controller.yaml", [])
                    if path.split(".")[1] in ("systemNamespace", "reservedNamespaces", "controllerServiceAccount")})
    for word in names:
        pattern = re.compile(r"(?<![-a-z0-9])" + re.escape(word) + r"(?![-a-z0-9])")
        found = sorted({name for name, scalars in docs for _, v in scalars if isinstance(v, str) and pattern.search(v)})
        if len(found) > 1:
            out.append(f"name {word!r} in {', '.join(found)}")
    numbers = sorted({v for _, v in homes.get("constants.yaml", []) if type(v) is int and v >= DISTINCTIVE})
    for number in numbers:
        literal = re.compile(r"(?<![\w.])" + str(number) + r"(?![\w.])")
        for name, scalars in docs:
            if name.startswith("constants.yaml:"):
                continue
            for path, v in scalars:
                hit = (type(v) is int and v == number) or (isinstance(v, str) and literal.search(v))
                if hit and (name, path) not in OTHER_MEANING:
                    out.append(f"constant {number} restated at {name} {path}")
    return out


def test_every_key_name_and_constant_has_one_home():
    assert restatements(DEFAULT_RULES_DIR) == []


def test_a_restated_key_name_or_constant_is_found(tmp_path):
    """The check finds what it is for: a label key, an entrance prefix, a namespace and a constant copied."""
    (tmp_path / "constants.yaml").write_text(
        "metadata: {name: constants}\nspec: {percentPerAccelerator: 100, maxNameLength: 253}\n")
    (tmp_path / "pools").mkdir()
    (tmp_path / "pools" / "derivation.yaml").write_text("metadata: {name: pools}\nspec: {entrancePrefix: gpustack-fnv64-}\n")
    (tmp_path / "controller.yaml").write_text(
        "metadata: {name: controller}\nspec: {systemNamespace: gpustack-system, reservedNamespaces: [kube-system],\n"
        "  controllerServiceAccount: gpustack-controller}\n")
    (tmp_path / "labels.yaml").write_text("metadata: {name: labels}\nspec: {keys: {queueName: kueue.x-k8s.io/queue-name}}\n")
    (tmp_path / "copy.yaml").write_text(
        "metadata: {name: copy}\n"
        "spec:\n"
        "  match: {labelsExist: [kueue.x-k8s.io/queue-name], excludeNamespaces: [kube-system]}\n"
        "  params: {queuePrefix: gpustack-fnv64-}\n"
        "  expression: size(item.n) <= 253\n"
        "  message: must be within (0, 100]\n")
    (tmp_path / "shape.yaml").write_text(
        "metadata: {name: shape}\n"
        "spec: {openAPIV3Schema: {properties: {name: {type: string, maxLength: 253}}}}\n")
    assert restatements(tmp_path) == [
        "'gpustack-fnv64-' in copy.yaml:copy, pools/derivation.yaml:pools",
        "'kueue.x-k8s.io/queue-name' in copy.yaml:copy, labels.yaml:labels",
        "name 'kube-system' in controller.yaml:controller, copy.yaml:copy",
        "constant 100 restated at copy.yaml:copy spec.message",
        "constant 253 restated at copy.yaml:copy spec.expression",
        "constant 253 restated at shape.yaml:shape spec.openAPIV3Schema.properties.name.maxLength",
    ]
