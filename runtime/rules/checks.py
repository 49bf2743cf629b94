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
    ("PoolDerivation", "startGuard.expectFacts", frozenset({"labels", "annotations", "keys", "devices", "role"})),
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
    ("ManufacturerTable", "manufacturers[*].views.*", frozenset({"accelerator"})),
    ("DraDriver", "kind.expression", frozenset({"attributes", "device"})),
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
    def __init__(self, settings: Optional[frozenset[str]], params_tables: dict[str, dict], parsed: Optional[dict] = None):
        self.settings = settings
        self.params_tables = params_tables
        self.parsed = parsed
        self.problems: list[StaticProblem] = []

    def expression(self, file: str, doc: SourceDocument, path: tuple, expr: Expr,
                   names: Optional[celnames.Names]) -> None:
        full = ("spec",) + path
        for found in celnames.check(str(expr), names, self.parsed):
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


class _PolicyScope:
    """What one AdmissionPolicy's expressions may name, and the checks of its parts in order.

    ``params`` are the shared tables, ``paramsFrom`` and ``params``; ``lookups`` grows as the
    lookups are checked (each sees only those declared before it). Source: issue 12 item 4.
    """

    def __init__(self, checker: _Checker, file: str, doc: SourceDocument, spec: AdmissionPolicySpec):
        self.checker, self.file, self.doc = checker, file, doc
        params: dict = {key: None for key in SHARED_PARAMS + VOCABULARY_PARAMS}
        for ref in spec.paramsFrom:
            params.update(checker.params_tables.get(ref, {}))
        params.update(spec.params)
        self.params = params
        self.members = {"params": frozenset(params), "request": REQUEST_MEMBERS}
        if checker.settings is not None:
            self.members["settings"] = checker.settings
        self.lookups: list[str] = []

    def names(self, variables: list[str], item: bool) -> celnames.Names:
        """The names bound with ``variables`` and the lookups so far visible; ``item`` inside forEach."""
        roots = ADMISSION_ROOTS | ({"item"} if item else set())
        return celnames.Names(roots=frozenset(roots), params=self.params,
                              members={**self.members, "variables": frozenset(variables),
                                       "lookups": frozenset(self.lookups)})

    def expression(self, path: tuple, expr: Expr, scope: celnames.Names) -> None:
        """Check one expression at ``path`` below ``spec`` against ``scope``."""
        self.checker.expression(self.file, self.doc, path, expr, scope)

    def check_lookups(self, spec: AdmissionPolicySpec) -> None:
        """``spec.lookups`` in order, each seeing the lookups before it; records their names."""
        for i, lk in enumerate(spec.lookups):
            for field_name in ("when", "nameExpression", "labelValueExpression"):
                expr = getattr(lk, field_name)
                if expr is not None:
                    self.expression(("lookups", i, field_name), expr, self.names([], False))
            self.lookups.append(lk.name)

    def check_variables(self, spec: AdmissionPolicySpec) -> list[str]:
        """The policy variables in order, each seeing those before it; returns their names."""
        declared: list[str] = []
        for i, var in enumerate(spec.variables):
            self.expression(("variables", i, "expression"), var.expression, self.names(declared, False))
            declared.append(var.name)
        return declared

    def rule(self, path: tuple, r, visible: list[str], item: bool,
             parts: tuple[str, ...]) -> tuple[list[str], bool]:
        """A validation's or mutation's forEach, own variables and ``parts``.

        Returns the variables visible inside it and whether ``item`` is bound there.
        """
        if r.forEach is not None:
            self.expression(path + ("forEach",), r.forEach, self.names(visible, item))
        inner_item = item or r.forEach is not None
        local = list(visible)
        for j, var in enumerate(r.variables):
            self.expression(path + ("variables", j, "expression"), var.expression, self.names(local, inner_item))
            local.append(var.name)
        scope = self.names(local, inner_item)
        for part in parts:
            expr = getattr(r, part)
            if expr is not None:
                self.expression(path + (part,), expr, scope)
        return local, inner_item

    def validation(self, path: tuple, v: Validation, visible: list[str], item: bool) -> None:
        """One validation and, depth first, its nested validations."""
        local, inner = self.rule(path, v, visible, item,
                                 ("when", "expression", "fieldExpression", "messageExpression", "value"))
        for k, sub in enumerate(v.validations):
            self.validation(path + ("validations", k), sub, local, inner)

    def mutation(self, i: int, m, declared: list[str]) -> None:
        """Mutation ``i``: its own parts, then its denials and writes in the mutation's scope."""
        local, inner = self.rule(("mutations", i), m, declared, False, ("when",))
        scope = self.names(local, inner)
        for k, d in enumerate(m.denials):
            for part in ("expression", "messageExpression"):
                expr = getattr(d, part)
                if expr is not None:
                    self.expression(("mutations", i, "denials", k, part), expr, scope)
        for k, w in enumerate(m.writes):
            for part in ("when", "paths", "value"):
                expr = getattr(w, part)
                if expr is not None:
                    self.expression(("mutations", i, "writes", k, part), expr, scope)


def _admission(checker: _Checker, file: str, doc: SourceDocument, spec: AdmissionPolicySpec) -> None:
    """One AdmissionPolicy's static checks: lookups, variables, validations, then mutations."""
    scope = _PolicyScope(checker, file, doc, spec)
    scope.check_lookups(spec)
    declared = scope.check_variables(spec)
    for i, v in enumerate(spec.validations):
        scope.validation(("validations", i), v, declared, False)
    for i, m in enumerate(spec.mutations):
        scope.mutation(i, m, declared)


def check_documents(documents: list, parsed: Optional[dict] = None) -> list[StaticProblem]:
    """Static problems of loaded rule documents (``RuleFile`` objects that carry their ``source``).

    ``parsed`` (CEL source -> parse tree or syntax error, :func:`runtime.rules.celnames.parse`) reuses
    the loader's parses.

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
    checker = _Checker(settings, tables, parsed)
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
