"""What the static type checks of :mod:`runtime.rules.checks` read besides the expressions: the values of
the shared params every AdmissionPolicy gets, and the object types of the kinds a policy matches or
looks up (docs/rule-authoring.md "What lint checks")."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from runtime.rules import celtyping
from runtime.rules.celtyping import DYN, T


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
    from runtime.rules.vocabulary import admission_params

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


def kind_type(kind: str, bounds: celtyping.Bounds) -> T:
    """The CEL type of an object of ``kind`` (its schema, :mod:`runtime.rules.schemas`), else dyn."""
    from runtime.rules import schemas

    return schemas.object_type(kind, "object", bounds) or DYN


@dataclass(frozen=True)
class ExpressionCost:
    """One expression's worst-case cost estimate (:mod:`runtime.rules.celtyping`): where it is and its
    text."""

    file: str
    line: int
    column: int
    path: str
    cost: float
    source: str


@dataclass
class StaticReport:
    """What the static checks found: ``problems`` (:class:`runtime.rules.checks.StaticProblem`, in the
    order found) and the worst-case ``costs`` of every expression that was typed."""

    problems: list
    costs: list[ExpressionCost]
