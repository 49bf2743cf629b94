"""One home per vocabulary: the names, keys and constants that several rule files use are written once.

Homes (docs/architecture.md "Where to add"):

- label, annotation and finalizer keys, key prefixes and key suffixes: rules/labels.yaml;
- the system namespace, the reserved namespaces (decision 17) and the controller's ServiceAccount:
  rules/controller.yaml;
- the entrance prefix, the resource types and the setting names the derivation reads:
  rules/pools/derivation.yaml;
- numbers shared by several rules (credits, shares and percent per accelerator, the longest object
  name): rules/constants.yaml.

Two mechanisms read the homes, both here:

- :func:`link` runs once at load (runtime/rules/loader.py) and fills the fields a rule file leaves to
  its home: ``SettingCatalog.namespace`` and ``NodeAgent.namespace`` (the system namespace),
  ``NodeAgent.suffixes`` (the label suffixes), ``NodeAgent.capacity.percentPerSlice``
  (``percentPerAccelerator``), and in every AdmissionPolicy ``match.labelRolesExist`` /
  ``match.excludeReservedNamespaces`` / ``lookups[].labelRole`` (into ``labelsExist``,
  ``excludeNamespaces``, ``labelKey``), and in every ObjectShape schema ``maxLengthFrom`` (a number of
  rules/constants.yaml, into ``maxLength``). An unknown role or constant is a load problem naming file
  and field.
- :func:`admission_params` is the shared ``params`` every AdmissionPolicy sees: ``labels`` (keys,
  prefixes, suffixes), ``derivation`` and ``controller`` (names) and ``controllerUsers``; the engine adds
  ``constants``.

tests/engine/test_one_home.py fails when a key, a name pattern or a constant is spelled twice.
"""
from __future__ import annotations

import re
from typing import Any, Protocol

from runtime.model.agent import LabelSuffixes

Problem = tuple
"""(file, line, column, field path, message): the loader turns it into a RuleProblem."""


class RuleSetLike(Protocol):
    """What this module reads of runtime.rules.loader.RuleSet (the loader imports this module)."""

    def get(self, kind: str, name: str | None = None) -> Any: ...

    def all(self, kind: str) -> list: ...


def problem_at(doc, path: str, message: str) -> Problem:
    """The problem at ``path`` (dotted, ``[i]`` indexes) of ``doc``: the field's own line and column
    when the document's source is known, else the document's line."""
    if doc.source is None:
        return (doc.file, doc.line, 0, path, message)
    parts = tuple(int(p) if p.isdigit() else p for p in re.split(r"[.\[\]]", path) if p)
    return (doc.file, doc.source.line_of(parts), doc.source.column_of(parts), path, message)


def link(ruleset: RuleSetLike) -> list[Problem]:
    """Fill every field left to its home (module docstring); the problems found (none when linked).

    Runs on a complete rule set (every required kind present); mutates the loaded specs in place.
    """
    labels = ruleset.get("LabelCatalog")
    derivation = ruleset.get("PoolDerivation")
    controller = ruleset.get("ControllerPolicy")
    constants = ruleset.get("Constants")
    problems = []
    settings = ruleset.get("SettingCatalog")
    settings.namespace = settings.namespace or controller.systemNamespace
    known_settings = {s.name for s in settings.settings}
    for doc in ruleset.all("PoolDerivation"):
        for role, name in derivation.settings.items():
            if name not in known_settings:
                problems.append(problem_at(doc, f"spec.settings.{role}",
                                           f"no setting {name!r} in rules/settings.yaml"))
    for doc in ruleset.all("NodeAgent"):
        agent = doc.spec
        agent.namespace = agent.namespace or controller.systemNamespace
        if not agent.capacity.percentPerSlice:
            agent.capacity.percentPerSlice = constants.percentPerAccelerator
        if agent.suffixes is None:
            wanted = {name: labels.suffixes.get(name) for name in LabelSuffixes.model_fields}
            missing = sorted(name for name, value in wanted.items() if value is None)
            if missing:
                problems.append(problem_at(doc, "spec.suffixes", "rules/labels.yaml suffixes lacks "
                                           + ", ".join(missing)))
                continue
            agent.suffixes = LabelSuffixes(**wanted)
    for doc in ruleset.all("AdmissionPolicy"):
        match = doc.spec.match
        for role in match.labelRolesExist:
            if role not in labels.keys:
                problems.append(problem_at(doc, "spec.match.labelRolesExist",
                                           f"no label key role {role!r} in rules/labels.yaml keys"))
            elif labels.keys[role] not in match.labelsExist:
                match.labelsExist.append(labels.keys[role])
        if match.excludeReservedNamespaces:
            match.excludeNamespaces.extend(ns for ns in controller.reservedNamespaces
                                           if ns not in match.excludeNamespaces)
        for i, lookup in enumerate(doc.spec.lookups):
            if lookup.labelRole:
                if lookup.labelRole not in labels.keys:
                    problems.append(problem_at(doc, f"spec.lookups[{i}].labelRole", f"no label key role "
                                               f"{lookup.labelRole!r} in rules/labels.yaml keys"))
                else:
                    lookup.labelKey = labels.keys[lookup.labelRole]
    for doc in ruleset.all("ObjectShape"):
        problems += _link_schema(doc, doc.spec.openAPIV3Schema, "spec.openAPIV3Schema", constants)
    problems += _link_dra(ruleset, derivation)
    return problems


def _link_dra(ruleset: RuleSetLike, derivation) -> list[Problem]:
    """The DRA rows (rules/dra.yaml, docs/concepts/dra.md "Accelerators from DRA drivers"): a known
    manufacturer, one row per driver, one ``DraPolicy`` beside them, its DeviceClass ownership role among the
    derivation's resourceTypes."""
    problems: list[Problem] = []
    drivers = ruleset.all("DraDriver")
    policies = ruleset.all("DraPolicy")
    manufacturers = {m.id for m in ruleset.get("ManufacturerTable").manufacturers}
    seen: dict[str, object] = {}
    for doc in drivers:
        spec = doc.spec
        if spec.manufacturer not in manufacturers:
            known = ", ".join(sorted(manufacturers))
            problems.append(problem_at(doc, "spec.manufacturer", f"no manufacturer {spec.manufacturer!r} in "
                                       f"rules/manufacturers.yaml (known: {known})"))
        if spec.driver in seen:
            problems.append(problem_at(doc, "spec.driver",
                                       f"driver {spec.driver!r} already has a DraDriver row "
                                       f"({seen[spec.driver].file}:{seen[spec.driver].line})"))
        seen.setdefault(spec.driver, doc)
    if drivers and len(policies) != 1:
        problems.append(problem_at(drivers[0], "kind", f"DraDriver rows need exactly one DraPolicy document, "
                                   f"found {len(policies)}"))
    for doc in policies:
        role = doc.spec.deviceClass.resourceType
        if role not in derivation.resourceTypes:
            problems.append(problem_at(doc, "spec.deviceClass.resourceType", f"no resource type {role!r} in "
                                       "rules/pools/derivation.yaml resourceTypes"))
    return problems


def _link_schema(doc, schema, path: str, constants) -> list[Problem]:
    """Fill ``maxLength`` from ``maxLengthFrom`` (a number of rules/constants.yaml) in ``schema`` and
    every schema below it; a name that is no integer constant is a problem at ``<path>.maxLengthFrom``."""
    problems = []
    if schema.maxLengthFrom is not None:
        value = getattr(constants, schema.maxLengthFrom) \
            if schema.maxLengthFrom in type(constants).model_fields \
            else None
        if type(value) is not int:
            problems.append(problem_at(doc, f"{path}.maxLengthFrom", f"no number {schema.maxLengthFrom!r} in "
                                       "rules/constants.yaml"))
        else:
            schema.maxLength = value
    for key, sub in schema.properties.items():
        problems += _link_schema(doc, sub, f"{path}.properties.{key}", constants)
    for key in ("items", "additionalProperties"):
        if getattr(schema, key) is not None:
            problems += _link_schema(doc, getattr(schema, key), f"{path}.{key}", constants)
    return problems


def controller_users(ruleset: RuleSetLike) -> list[str]:
    """The Kubernetes user names of the controller: its ServiceAccount in the system namespace."""
    controller = ruleset.get("ControllerPolicy")
    return [f"system:serviceaccount:{controller.systemNamespace}:{controller.controllerServiceAccount}"]


# the keys admission_params gives every policy
VOCABULARY_PARAMS = ("labels", "derivation", "controller", "controllerUsers", "exceptions")


def _leaves(validations, lifted: bool) -> list[tuple[str, bool]]:
    """``(name, exceptable)`` of every validation that yields errors (not a group), in order; a rule inside
    a group marked ``exceptable: false`` is not exceptable either."""
    out: list[tuple[str, bool]] = []
    for v in validations:
        ok = lifted and v.exceptable
        out += _leaves(v.validations, ok) if v.validations else [(v.name, ok)] if v.name else []
    return out


def exception_params(ruleset: RuleSetLike) -> dict:
    """What a PolicyException may name (docs/concepts/exceptions.md "What may be excepted"): ``namespaces``
    and ``maxDuration`` (a CEL duration, ``720h``) of rules/exceptions.yaml, and per validating
    AdmissionPolicy its ``kind`` (objectKind), ``validations`` (every rule that yields errors) and
    ``notExceptable`` (those marked ``exceptable: false``, or inside a group so marked). Without an
    ExceptionPolicy document no namespace may hold one."""
    found = ruleset.all("ExceptionPolicy")
    spec = found[0].spec if len(found) == 1 else None
    policies = {}
    for doc in sorted(ruleset.all("AdmissionPolicy"), key=lambda d: d.name):
        if doc.spec.type != "validating":
            continue
        leaves = _leaves(doc.spec.validations, True)
        policies[doc.name] = {"kind": doc.spec.objectKind, "validations": [n for n, _ in leaves],
                              "notExceptable": [n for n, ok in leaves if not ok]}
    return {"namespaces": list(spec.namespaces) if spec else [],
            "maxDuration": spec.maxDuration if spec else "0s", "policies": policies}


def admission_params(ruleset: RuleSetLike) -> dict:
    """The shared params of every AdmissionPolicy that come from the vocabulary homes.

    ``labels``: ``keys``, ``prefixes``, ``suffixes`` of rules/labels.yaml (role -> string);
    ``derivation``: ``entrancePrefix``, ``resourceTypes`` and ``settings`` (role -> setting name) of
    rules/pools/derivation.yaml; ``controller``: ``systemNamespace`` and ``reservedNamespaces`` of
    rules/controller.yaml;
    ``controllerUsers``: :func:`controller_users`; ``exceptions``: :func:`exception_params`.
    """
    labels = ruleset.get("LabelCatalog")
    derivation = ruleset.get("PoolDerivation")
    controller = ruleset.get("ControllerPolicy")
    return {
        "labels": {"keys": dict(labels.keys), "prefixes": dict(labels.prefixes),
                   "suffixes": dict(labels.suffixes)},
        "derivation": {
            "entrancePrefix": derivation.entrancePrefix,
            "resourceTypes": dict(derivation.resourceTypes),
            "settings": dict(derivation.settings),
        },
        "controller": {
            "systemNamespace": controller.systemNamespace,
            "reservedNamespaces": list(controller.reservedNamespaces),
        },
        "controllerUsers": controller_users(ruleset),
        "exceptions": exception_params(ruleset),
    }
