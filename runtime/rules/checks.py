"""Cross-document static checks of a rules directory: every CEL name, param, lookup, variable and setting.

Runs on the documents that validated (after the schema), so one broken file does not hide the
problems of another. What each expression may name (its activation) is mechanism, declared here once
per rule kind and field (:data:`ACTIVATIONS`), and for AdmissionPolicy built from the policy itself:
``variables`` declared before the expression (policy variables, then the enclosing rules' own
variables in order), ``lookups`` declared before it, ``params`` (the shared tables, ``paramsFrom``
and ``params``), ``settings`` of rules/settings.yaml, ``item`` only inside ``forEach``.

Setting names outside CEL (InstancePod ``overcommit.setting``, ``placement.setting``,
``ssh.imageSetting``; NodeAgent ``settings.*``) are checked against the catalog too.
Source of the rule: issue 12 item 4.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterator, Optional

from pydantic import BaseModel

from runtime.model.admission import SHARED_PARAMS, AdmissionPolicySpec, Validation
from runtime.rules.vocabulary import VOCABULARY_PARAMS
from runtime.model.rulefiles import Expr
from runtime.rules import celnames
from runtime.rules.yamlsrc import SourceDocument, dotted

REQUEST_MEMBERS = frozenset({"operation", "namespace", "name", "user"})
ADMISSION_ROOTS = frozenset({"object", "oldObject", "request", "params", "settings", "lookups", "variables"})

# (kind, dotted spec path pattern) -> the names bound when the engine evaluates that field.
ACTIVATIONS: list[tuple[str, str, frozenset[str]]] = [
    ("PoolDerivation", "managed", frozenset({"labels", "managedKey"})),
    ("PoolDerivation", "flavors.*.*", frozenset({"gKey", "aKey", "os", "arch", "count", "mixed", "hasAccelerators"})),
    ("PoolDerivation", "pools.*", frozenset({"gKey", "aKey", "os", "arch", "aware"})),
    ("PoolDerivation", "catalog.*", frozenset({"gKey", "aKey", "os", "arch", "aware"})),
    ("PoolDerivation", "generalGroup", frozenset({"gKey", "aware"})),
    ("PoolDerivation", "entrance", frozenset({"name", "entrancePrefix"})),
    ("PoolDerivation", "clusterQueue.tooManyFlavorsMessage", frozenset({"count", "max"})),
    ("PoolDerivation", "admissionCheck.readyMessage", frozenset({"node", "nodes", "podSet"})),
    ("PoolDerivation", "admissionCheck.retryMessage", frozenset({"flavor", "podSet"})),
    ("InstancePod", "portName", frozenset({"port", "protocol"})),
    ("KueueConfiguration", "transformations[*].credits", frozenset({"constants"})),
    ("AuditPolicy", "checks[*].*", frozenset({"object", "settings"})),
]

# (kind, dotted spec path pattern) of plain strings that name a setting of rules/settings.yaml.
SETTING_FIELDS: list[tuple[str, str]] = [
    ("InstancePod", "overcommit.setting"),
    ("InstancePod", "placement.setting"),
    ("InstancePod", "ssh.imageSetting"),
    ("NodeAgent", "settings.*"),
]


@dataclass(frozen=True)
class StaticProblem:
    """One finding: file, 1-based line and column, the field path, the message."""

    file: str
    line: int
    column: int
    path: str
    message: str


def _matches(path: str, pattern: str) -> bool:
    """``pattern`` with ``*`` standing for one key or index (``checks[*].*`` matches ``checks[0].when``)."""
    regex = re.escape(pattern).replace(r"\*", r"[^.\[\]]+")
    return re.fullmatch(regex, path) is not None


def activation_of(kind: str, path: str) -> Optional[frozenset[str]]:
    """The names bound for field ``path`` of a ``kind`` document; None when the field is not listed."""
    for k, pattern, names in ACTIVATIONS:
        if k == kind and _matches(path, pattern):
            return names
    return None


def _leaves(value: Any, path: tuple) -> Iterator[tuple[tuple, Any]]:
    """Every leaf of a validated model (an Expr is a leaf) with its path below ``spec``."""
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _leaves(getattr(value, name), path + (name,))
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, path + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _leaves(item, path + (i,))
    else:
        yield path, value


class _Checker:
    def __init__(self, settings: Optional[frozenset[str]], params_tables: dict[str, dict]):
        self.settings = settings
        self.params_tables = params_tables
        self.problems: list[StaticProblem] = []

    def expression(self, file: str, doc: SourceDocument, path: tuple, expr: Expr,
                   names: Optional[celnames.Names]) -> None:
        full = ("spec",) + path
        for found in celnames.check(str(expr), names):
            offset = _offset(str(expr), found.line, found.column)
            line, column = doc.position_in(full, offset)
            self.problems.append(StaticProblem(file, line, column, dotted(full), found.message))

    def setting(self, file: str, doc: SourceDocument, path: tuple, value: Any) -> None:
        if self.settings is None or not isinstance(value, str) or value in self.settings:
            return
        full = ("spec",) + path
        self.problems.append(StaticProblem(
            file, doc.line_of(full), doc.column_of(full), dotted(full),
            f"unknown setting {value!r} (settings: {', '.join(sorted(self.settings))})"))


def _offset(source: str, line: int, column: int) -> int:
    """0-based character offset of 1-based ``line``/``column`` in ``source``."""
    lines = source.split("\n")
    line = max(1, min(line, len(lines)))
    return sum(len(text) + 1 for text in lines[: line - 1]) + max(column - 1, 0)


def _admission(checker: _Checker, file: str, doc: SourceDocument, spec: AdmissionPolicySpec) -> None:
    params: dict = {key: None for key in SHARED_PARAMS + VOCABULARY_PARAMS}
    for ref in spec.paramsFrom:
        params.update(checker.params_tables.get(ref, {}))
    params.update(spec.params)
    members = {"params": frozenset(params), "request": REQUEST_MEMBERS}
    if checker.settings is not None:
        members["settings"] = checker.settings

    def names(variables: list[str], lookups: list[str], item: bool) -> celnames.Names:
        roots = ADMISSION_ROOTS | ({"item"} if item else set())
        return celnames.Names(roots=frozenset(roots), params=params,
                              members={**members, "variables": frozenset(variables), "lookups": frozenset(lookups)})

    lookups: list[str] = []
    for i, lk in enumerate(spec.lookups):
        for field_name in ("when", "nameExpression", "labelValueExpression"):
            expr = getattr(lk, field_name)
            if expr is not None:
                checker.expression(file, doc, ("lookups", i, field_name), expr, names([], lookups, False))
        lookups.append(lk.name)
    declared: list[str] = []
    for i, var in enumerate(spec.variables):
        checker.expression(file, doc, ("variables", i, "expression"), var.expression, names(declared, lookups, False))
        declared.append(var.name)

    def rule(path: tuple, r, visible: list[str], item: bool, parts: tuple[str, ...]) -> None:
        if r.forEach is not None:
            checker.expression(file, doc, path + ("forEach",), r.forEach, names(visible, lookups, item))
        inner_item = item or r.forEach is not None
        local = list(visible)
        for j, var in enumerate(r.variables):
            checker.expression(file, doc, path + ("variables", j, "expression"), var.expression,
                               names(local, lookups, inner_item))
            local.append(var.name)
        scope = names(local, lookups, inner_item)
        for part in parts:
            expr = getattr(r, part)
            if expr is not None:
                checker.expression(file, doc, path + (part,), expr, scope)
        return local, inner_item

    def validation(path: tuple, v: Validation, visible: list[str], item: bool) -> None:
        local, inner = rule(path, v, visible, item,
                            ("when", "expression", "fieldExpression", "messageExpression", "value"))
        for k, sub in enumerate(v.validations):
            validation(path + ("validations", k), sub, local, inner)

    for i, v in enumerate(spec.validations):
        validation(("validations", i), v, declared, False)
    for i, m in enumerate(spec.mutations):
        local, inner = rule(("mutations", i), m, declared, False, ("when",))
        scope = names(local, lookups, inner)
        for k, d in enumerate(m.denials):
            for part in ("expression", "messageExpression"):
                expr = getattr(d, part)
                if expr is not None:
                    checker.expression(file, doc, ("mutations", i, "denials", k, part), expr, scope)
        for k, w in enumerate(m.writes):
            for part in ("when", "paths", "value"):
                expr = getattr(w, part)
                if expr is not None:
                    checker.expression(file, doc, ("mutations", i, "writes", k, part), expr, scope)


def check_documents(documents: list) -> list[StaticProblem]:
    """Static problems of loaded rule documents (``RuleFile`` objects that carry their ``source``).

    Every Expr field is syntax-checked; listed fields (:data:`ACTIVATIONS`, AdmissionPolicy) also have
    their names checked; setting names in :data:`SETTING_FIELDS` must be in the SettingCatalog.
    """
    settings = None
    tables: dict[str, dict] = {}
    for doc in documents:
        if doc.kind == "SettingCatalog":
            settings = frozenset(s.name for s in doc.spec.settings)
        elif doc.kind == "AdmissionParams":
            tables[doc.name] = dict(doc.spec.values)
    checker = _Checker(settings, tables)
    for doc in documents:
        source = doc.source
        if source is None:
            continue
        if doc.kind == "AdmissionPolicy":
            _admission(checker, doc.file, source, doc.spec)
        else:
            for path, expr in ((p, v) for p, v in _leaves(doc.spec, ()) if isinstance(v, Expr)):
                bound = activation_of(doc.kind, dotted(path))
                members = {"settings": settings} if bound and "settings" in bound and settings is not None else {}
                names = celnames.Names(roots=bound, members=members) if bound is not None else None
                checker.expression(doc.file, source, path, expr, names)
        for kind, pattern in SETTING_FIELDS:
            if doc.kind != kind:
                continue
            for path, value in _leaves(doc.spec, ()):
                if _matches(dotted(path), pattern):
                    checker.setting(doc.file, source, path, value)
    return checker.problems
