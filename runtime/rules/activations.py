"""What the static checks (:mod:`runtime.rules.checks`) know of each rule field besides its expression:
the names the engine binds when it evaluates the field (its activation) and their types, the type the
field's result must have, the values of the shared params every AdmissionPolicy gets, and the object
types of the kinds a policy matches or looks up (docs/rule-authoring.md "What lint checks").

The names are mechanism: the engine binds them, each field of each kind in one way, so they are
declared here once, per kind and field (``*`` stands for one key or index). An AdmissionPolicy's names
come from the policy itself (:mod:`runtime.rules.checks`).
"""
from __future__ import annotations

from typing import Any, Optional

from runtime.rules import schemas
from runtime.rules.cel.types import DYN, Bounds, CelType
from runtime.rules.vocabulary import admission_params

# (kind, dotted spec path pattern) -> the names bound when the engine evaluates that field.
ACTIVATIONS: list[tuple[str, str, frozenset[str]]] = [
    ("PoolDerivation", "managed", frozenset({"labels", "managedKey"})),
    ("PoolDerivation", "flavors.*.*",
     frozenset({"namePrefix", "gKey", "aKey", "os", "arch", "count", "mixed", "hasAccelerators"})),
    ("PoolDerivation", "pools.*", frozenset({"namePrefix", "gKey", "aKey", "os", "arch", "aware"})),
    ("PoolDerivation", "catalog.*", frozenset({"namePrefix", "gKey", "aKey", "os", "arch", "aware"})),
    ("PoolDerivation", "generalGroup", frozenset({"gKey", "aware"})),
    ("PoolDerivation", "entrance", frozenset({"name", "entrancePrefix"})),
    ("PoolQueues", "clusterQueue.tooManyFlavorsMessage", frozenset({"count", "max"})),
    ("PoolQueues", "admissionCheck.readyMessage", frozenset({"node", "nodes", "podSet"})),
    ("PoolQueues", "admissionCheck.retryMessage", frozenset({"flavor", "podSet", "closed"})),
    ("ControllerPolicy", "startGuard.expectFacts",
     frozenset({"labels", "annotations", "keys", "devices", "role"})),
    ("InstancePod", "portName", frozenset({"port", "protocol"})),
    ("KueueConfiguration", "transformations[*].credits", frozenset({"constants"})),
    ("AuditPolicy", "checks[*].*", frozenset({"object", "settings"})),
    ("ManufacturerTable", "manufacturers[*].views.*", frozenset({"accelerator"})),
    ("DraDriver", "kind.expression", frozenset({"attributes", "device"})),
]

# The types of the names ACTIVATIONS binds, where the engine binds one type (runtime/engine/pools): the
# others are dyn. ``constants`` is typed from rules/constants.yaml.
ACTIVATION_TYPES = {
    "gKey": "string", "aKey": "string", "os": "string", "arch": "string", "name": "string",
    "entrancePrefix": "string", "namePrefix": "string", "managedKey": "string", "closed": "string",
    "count": "int", "max": "int", "mixed": "bool", "hasAccelerators": "bool", "aware": "bool",
}

# (kind, dotted spec path pattern) of non-admission fields and the type their expression must have.
EXPECTED_TYPES: list[tuple[str, str, str]] = [
    ("PoolQueues", "clusterQueue.tooManyFlavorsMessage", "string"),
    ("PoolQueues", "admissionCheck.readyMessage", "string"),
    ("PoolQueues", "admissionCheck.retryMessage", "string"),
]


def _steps(path: str) -> list[str]:
    """The steps of a dotted field path: ``checks[0].when`` -> ``['checks', '[0]', 'when']``."""
    return path.replace("[", ".[").split(".")


def _step_matches(step: str, wanted: str) -> bool:
    if wanted == "*":
        return bool(step) and "[" not in step and "]" not in step
    if wanted == "[*]":
        return len(step) > 2 and step[0] == "[" and step[-1] == "]" and "[" not in step[1:-1]
    return step == wanted


def matches(path: str, pattern: str) -> bool:
    """``pattern`` with ``*`` standing for one key or index (``checks[*].*`` matches ``checks[0].when``),
    compared step by step: no regular expression, so nothing to backtrack."""
    steps, wanted = _steps(path), _steps(pattern)
    return len(steps) == len(wanted) and all(_step_matches(s, w) for s, w in zip(steps, wanted))


def activation_of(kind: str, path: str) -> Optional[frozenset[str]]:
    """The names bound for field ``path`` of a ``kind`` document; None when the field is not listed."""
    for k, pattern, names in ACTIVATIONS:
        if k == kind and matches(path, pattern):
            return names
    return None


def expected_type(kind: str, path: str) -> Optional[str]:
    """The type the expression of field ``path`` of a ``kind`` document must have; None: any."""
    return next((t for k, pattern, t in EXPECTED_TYPES if k == kind and matches(path, pattern)), None)


class _Documents:
    """The validated documents as :mod:`runtime.rules.vocabulary` reads a RuleSet (``get``, ``all``)."""

    def __init__(self, documents: list):
        self.documents = documents

    def get(self, kind: str, name: Optional[str] = None) -> Any:
        found = [d.spec for d in self.documents if d.kind == kind and (name is None or d.name == name)]
        if len(found) != 1:
            raise KeyError(kind)
        return found[0]

    def all(self, kind: str) -> list:
        return [d for d in self.documents if d.kind == kind]


def shared_values(documents: list) -> dict:
    """The values of the shared params every AdmissionPolicy reads (those of
    :class:`runtime.engine.admission.engine.AdmissionEngine`), from the documents that validated; a
    table whose document is missing or broken is left out (its type is then dyn)."""
    rules = _Documents(documents)
    shared: dict = {}
    try:
        shared.update(admission_params(rules))
    except (KeyError, AttributeError):
        pass
    for kind, build in (
        ("Constants", lambda spec: spec.model_dump()),
        ("ManufacturerTable", lambda spec: spec.classifier_rows()),
        ("SettingCatalog",
         lambda spec: {"namespace": spec.namespace, "names": sorted(d.name for d in spec.settings),
                                         "types": {d.name: d.type for d in spec.settings},
                                         "booleans": list(spec.booleanTrue) + list(spec.booleanFalse)}),
    ):
        try:
            shared[{"Constants": "constants", "ManufacturerTable": "manufacturers",
                    "SettingCatalog": "settingCatalog"}[kind]] = build(rules.get(kind))
        except KeyError:
            pass
    return shared


def kind_type(kind: str, bounds: Bounds) -> CelType:
    """The CEL type of an object of ``kind`` (its schema, :mod:`runtime.rules.schemas`), else dyn."""
    return schemas.object_type(kind, "object", bounds) or DYN
