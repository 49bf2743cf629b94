"""Cross-document static checks of a rules directory: every CEL name, param, lookup, variable and setting.

Runs on the documents that validated (after the schema), so one broken file does not hide the
problems of another. What each expression may name (its activation) is mechanism, declared once per
rule kind and field (:data:`runtime.rules.activations.ACTIVATIONS`), and for AdmissionPolicy built from
the policy itself:
``variables`` declared before the expression (policy variables, then the enclosing rules' own
variables in order), ``lookups`` declared before it, ``params`` (the shared tables, ``paramsFrom``
and ``params``), ``settings`` of rules/settings.yaml, ``item`` only inside ``forEach``.

Setting names outside CEL (InstancePod ``overcommit.setting``, ``placement.setting``,
``ssh.imageSetting``; NodeAgent ``settings.*``) are checked against the catalog too.
Source of the rule: docs/rule-authoring.md "What lint checks".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Optional

from pydantic import BaseModel

from runtime.model.admission import SHARED_PARAMS, AdmissionPolicySpec, Validation
from runtime.model.cellimits import CelLimitsSpec
from runtime.model.rulefiles import Expr
from runtime.rules import conditioncheck
from runtime.rules.activations import ACTIVATION_TYPES, activation_of, expected_type, kind_type, matches, \
    shared_values
from runtime.rules.cel.check import check
from runtime.rules.cel.errors import Finding
from runtime.rules.cel.library.table import LIBRARY
from runtime.rules.cel.names import Names
from runtime.rules.cel.parse import parse
from runtime.rules.cel.types import DYN, INF, Bounds, CelType, Scope, of_value, parse_type, sized
from runtime.rules.includes import included_fragments, placed_in
from runtime.rules.problems import RuleProblem
from runtime.rules.vocabulary import VOCABULARY_PARAMS
from runtime.rules.yamlsrc import SourceDocument, dotted

REQUEST_MEMBERS = frozenset({"operation", "namespace", "name", "user", "time"})
ADMISSION_ROOTS = frozenset({"object", "oldObject", "request", "params", "settings", "lookups", "variables"})

# (kind, dotted spec path pattern) of plain strings that name a setting of rules/settings.yaml.
SETTING_FIELDS: list[tuple[str, str]] = [
    ("InstancePod", "overcommit.setting"),
    ("InstancePod", "placement.setting"),
    ("InstancePod", "ssh.imageSetting"),
    ("NodeAgent", "settings.*"),
]


@dataclass(frozen=True)
class ExpressionCost:
    """One expression's worst-case cost estimate (:mod:`runtime.rules.cel.check`): where it is and its
    text."""

    file: str
    line: int
    column: int
    path: str
    cost: float
    source: str


@dataclass
class StaticReport:
    """What the static checks found: ``problems`` (in the order found) and the worst-case ``costs`` of
    every expression that was typed."""

    problems: list[RuleProblem]
    costs: list[ExpressionCost]


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


class _StaticChecks:
    """The static checks of one rules directory: what they know of it (settings, params tables, limits,
    shared values) and what they found (:attr:`problems`, :attr:`costs`)."""

    def __init__(self, settings: Optional[frozenset[str]], params_tables: dict[str, dict],
                 parsed: Optional[dict] = None, limits: Optional[CelLimitsSpec] = None, types: bool = True):
        self.settings = settings
        self.params_tables = params_tables
        self.parsed = {} if parsed is None else parsed
        self.problems: list[RuleProblem] = []
        self.limits = (limits or CelLimitsSpec()).static
        self.bounds = Bounds(float(self.limits.unboundedStringSize), float(self.limits.unboundedListSize))
        self.types = types
        self.costs: list[ExpressionCost] = []
        self.shared: dict = {}
        self.complete = True
        self.sized = True   # False while params a policy borrows are missing: its sizes are guesses
        self.fragments: dict = {}   # name -> (file, source) of the AdmissionValidations policies name

    def expression(self, file: str, doc: SourceDocument, path: tuple, expr: Expr, names: Optional[Names],
                   scope: Optional[Scope] = None, expect: Optional[str] = None) -> CelType:
        """Check one expression: its syntax; with ``names``, its names and (``scope`` given, types on)
        its types and cost, in one walk; its type."""
        full = ("spec",) + path
        source = str(expr)
        tree = parse(source, self.parsed)
        if isinstance(tree, Finding):
            self.record(file, doc, full, source, tree)
            return DYN
        if names is None:
            return DYN
        typed = scope if self.types else None
        try:
            result = check(source, tree, names, typed, expect)
        except (RecursionError, ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
            # a checker fault refuses the set, in words, never a traceback
            line, column = doc.position_in(full, 0)
            message = f"the type checker could not read this expression ({exc!r}): {_excerpt(source)}"
            self.problems.append(RuleProblem(file, line, column, dotted(full), message))
            return DYN
        for found in result.findings:
            self.record(file, doc, full, source, found)
        if typed is None:
            return DYN
        line, column = doc.position_in(full, 0)
        self.costs.append(ExpressionCost(file, line, column, dotted(full), result.cost, source))
        if result.cost > self.limits.maxExpressionCost and self.sized:
            self.problems.append(RuleProblem(
                file, line, column, dotted(full),
                f"worst-case cost estimate {_number(result.cost)} is over maxExpressionCost "
                f"{self.limits.maxExpressionCost} (CelLimits): {_excerpt(source)}"))
        return result.type

    def record(self, file: str, doc: SourceDocument, full: tuple, source: str, found: Finding) -> None:
        """A finding at ``found``'s line and column within the expression ``source`` at ``full``."""
        line, column = doc.position_in(full, _offset(source, found.line, found.column))
        self.problems.append(RuleProblem(file, line, column, dotted(full), found.message))

    def scope(self, roots: dict[str, CelType]) -> Scope:
        """A type scope of ``roots`` with the custom functions' declarations."""
        return Scope(roots=roots, functions=LIBRARY, bounds=self.bounds)

    def setting(self, file: str, doc: SourceDocument, path: tuple, value: Any) -> None:
        """A finding when ``value``, at ``path`` of a field that names a setting, is not in the catalog."""
        if self.settings is None or not isinstance(value, str) or value in self.settings:
            return
        full = ("spec",) + path
        self.problems.append(RuleProblem(
            file, doc.line_of(full), doc.column_of(full), dotted(full),
            f"unknown setting {value!r} (settings: {', '.join(sorted(self.settings))})"))


def _number(cost: float) -> str:
    return "unbounded" if cost == INF else f"{cost:.3g}" if cost >= 1e6 else str(int(cost))


def _excerpt(source: str, width: int = 120) -> str:
    text = " ".join(source.split())
    return repr(text if len(text) <= width else text[: width - 3] + "...")


def _offset(source: str, line: int, column: int) -> int:
    """0-based character offset of 1-based ``line``/``column`` in ``source``."""
    lines = source.split("\n")
    line = max(1, min(line, len(lines)))
    return sum(len(text) + 1 for text in lines[: line - 1]) + max(column - 1, 0)


_LOOKUP_TYPES = {"when": "bool", "nameExpression": "string", "labelValueExpression": "string"}
_VALIDATION_TYPES = {"when": "bool", "expression": "bool", "fieldExpression": "string",
                     "messageExpression": "string", "value": None}
_DENIAL_TYPES = {"expression": "bool", "messageExpression": "string"}
_WRITE_TYPES = {"when": "bool", "paths": "list", "value": None}


class _PolicyScope:
    """What one AdmissionPolicy's expressions may name and their types, and the checks of its parts in order.

    ``params`` are the shared tables, ``paramsFrom`` and ``params``; ``lookups`` grows as the
    lookups are checked (each sees only those declared before it); ``variables`` (name -> type) as
    the variables are. ``object``/``oldObject`` are typed by the schema of ``objectKind``
    (:mod:`runtime.rules.schemas`), a lookup by its kind's. Source: docs/rule-authoring.md.
    """

    def __init__(self, checker: _StaticChecks, file: str, doc: SourceDocument, spec: AdmissionPolicySpec):
        self.checker, self.file, self.doc = checker, file, doc
        params: dict = {key: None for key in SHARED_PARAMS + VOCABULARY_PARAMS}
        params.update({k: v for k, v in checker.shared.items() if k in params})
        for ref in spec.paramsFrom:
            params.update(checker.params_tables.get(ref, {}))
        params.update(spec.params)
        self.params = params
        self.members = {"params": frozenset(params), "request": REQUEST_MEMBERS}
        missing = [ref for ref in spec.paramsFrom if ref not in checker.params_tables]
        if missing:  # a table of a broken file is that file's problem, not this policy's: params unchecked
            del self.members["params"]
            if checker.complete:
                checker.problems.append(RuleProblem(
                    file, doc.line_of(("spec", "paramsFrom")), doc.column_of(("spec", "paramsFrom")),
                    "spec.paramsFrom", f"no AdmissionParams named {missing[0]!r} (AdmissionParams: "
                    f"{', '.join(sorted(checker.params_tables)) or 'none'})"))
        if checker.settings is not None:
            self.members["settings"] = checker.settings
        self.lookups: dict[str, CelType] = {}
        obj = kind_type(spec.objectKind, checker.bounds)
        name = sized("string", 253)
        self.roots = {
            "object": obj, "oldObject": obj,
            "params": DYN if missing else of_value(params, "params"),
            "request": CelType("object", fields={"operation": name, "namespace": name, "name": name,
                                                 "user": DYN, "time": sized("string", 64)}),
            "settings": sized("map", len(checker.settings or ()) or INF, DYN),
        }

    def names(self, variables, item: bool) -> Names:
        """The names bound with ``variables`` and the lookups so far visible; ``item`` inside forEach."""
        roots = ADMISSION_ROOTS | ({"item"} if item else set())
        return Names(roots=frozenset(roots), params=self.params,
                              members={**self.members, "variables": frozenset(variables),
                                       "lookups": frozenset(self.lookups)})

    def types(self, variables: dict[str, CelType], item: Optional[CelType]) -> Scope:
        """The types of the roots with ``variables`` visible, ``item`` when inside forEach."""
        roots = {**self.roots, "variables": CelType("object", fields=dict(variables)),
                 "lookups": CelType("object", fields=dict(self.lookups))}
        if item is not None:
            roots["item"] = item
        return self.checker.scope(roots)

    def expression(self, path: tuple, expr: Expr, variables: dict[str, CelType], item: Optional[CelType],
                   expect: Optional[str] = None) -> CelType:
        """Check one expression at ``path`` below ``spec``; its type."""
        return self.checker.expression(self.file, self.doc, path, expr,
                                       self.names(variables, item is not None), self.types(variables, item),
                                       expect)

    def check_lookups(self, spec: AdmissionPolicySpec) -> None:
        """``spec.lookups`` in order, each seeing the lookups before it; records their names and types."""
        for i, lk in enumerate(spec.lookups):
            for field_name, expect in _LOOKUP_TYPES.items():
                expr = getattr(lk, field_name)
                if expr is not None:
                    self.expression(("lookups", i, field_name), expr, {}, None, expect)
            bound = 1 if lk.nameExpression is not None else INF
            elem = kind_type(lk.kind, self.checker.bounds)
            self.lookups[lk.name] = sized(
                "list", bound if bound == 1 else self.checker.bounds.elements, elem)

    def check_variables(self, spec: AdmissionPolicySpec) -> dict[str, CelType]:
        """The policy variables in order, each seeing those before it; returns their types."""
        declared: dict[str, CelType] = {}
        for i, var in enumerate(spec.variables):
            declared[var.name] = self.builtin(("variables", i), var) if var.builtin else \
                self.expression(("variables", i, "expression"), var.expression, declared, None)
        return declared

    def rule(self, path: tuple, r, visible: dict[str, CelType], item: Optional[CelType],
             parts: dict[str, Optional[str]]) -> tuple[dict[str, CelType], Optional[CelType]]:
        """A validation's or mutation's forEach, own variables and ``parts`` (name -> the type it needs).

        Returns the variables visible inside it and the type of ``item`` there (None: not bound).
        """
        inner_item = item
        if r.forEach is not None:
            each = self.expression(path + ("forEach",), r.forEach, visible, item, "list")
            inner_item = (each.elem or DYN) if each.kind == "list" else DYN
        local = dict(visible)
        for j, var in enumerate(r.variables):
            local[var.name] = self.builtin(path + ("variables", j), var) if var.builtin else \
                self.expression(path + ("variables", j, "expression"), var.expression, local, inner_item)
        for part, expect in parts.items():
            expr = getattr(r, part)
            if expr is not None:
                self.expression(path + (part,), expr, local, inner_item, expect)
        return local, inner_item

    def builtin(self, path: tuple, var) -> CelType:
        """A ``builtin:`` variable: a name of ``conditioncheck.BUILTIN_VARIABLES``; its value a string."""
        if var.builtin not in conditioncheck.BUILTIN_VARIABLES:
            full, known = ("spec",) + path + ("builtin",), sorted(conditioncheck.BUILTIN_VARIABLES)
            self.checker.problems.append(RuleProblem(self.file, self.doc.line_of(full), self.doc.column_of(
                full), dotted(full), f"unknown builtin {var.builtin!r} (known: {', '.join(known)})"))
        return sized("string", INF)

    def validation(self, path: tuple, v: Validation, visible: dict[str, CelType],
                   item: Optional[CelType]) -> None:
        """One validation and, depth first, its nested validations."""
        local, inner = self.rule(path, v, visible, item, _VALIDATION_TYPES)
        scope, inner_path = (placed_in(self, self.checker.fragments[v.validationsFrom]), ()) \
            if v.validationsFrom in self.checker.fragments else (self, path)   # runtime/rules/includes.py
        for k, sub in enumerate(v.validations):
            scope.validation(inner_path + ("validations", k), sub, local, inner)

    def mutation(self, i: int, m, declared: dict[str, CelType]) -> None:
        """Mutation ``i``: its own parts, then its denials and writes in the mutation's scope."""
        local, inner = self.rule(("mutations", i), m, declared, None, {"when": "bool"})
        for k, d in enumerate(m.denials):
            for part, expect in _DENIAL_TYPES.items():
                expr = getattr(d, part)
                if expr is not None:
                    self.expression(("mutations", i, "denials", k, part), expr, local, inner, expect)
        for k, w in enumerate(m.writes):
            for part, expect in _WRITE_TYPES.items():
                expr = getattr(w, part)
                if expr is not None:
                    self.expression(("mutations", i, "writes", k, part), expr, local, inner, expect)


def _admission(checker: _StaticChecks, file: str, doc: SourceDocument, spec: AdmissionPolicySpec) -> None:
    """One AdmissionPolicy's static checks: lookups, variables, validations, then mutations."""
    scope = _PolicyScope(checker, file, doc, spec)
    checker.sized = "params" in scope.members   # a borrowed table missing: no cost finding on guessed sizes
    scope.check_lookups(spec)
    declared = scope.check_variables(spec)
    for i, v in enumerate(spec.validations):
        scope.validation(("validations", i), v, declared, None)
    for i, m in enumerate(spec.mutations):
        scope.mutation(i, m, declared)


def static_checks(documents: list, parsed: Optional[dict] = None, types: bool = True,
                  complete: bool = True) -> StaticReport:
    """Static problems and costs of loaded rule documents (``RuleFile`` objects that carry their ``source``).

    ``parsed`` (CEL source -> parse tree or syntax finding, :func:`runtime.rules.cel.parse.parse`) reuses
    the loader's parses. Every Expr field is syntax-checked; listed fields
    (:data:`runtime.rules.activations.ACTIVATIONS`, AdmissionPolicy) also have their names checked and,
    with ``types``, their types and worst-case cost in the same walk (:mod:`runtime.rules.cel.check`, the
    limit of the ``CelLimits`` document); setting names in
    :data:`SETTING_FIELDS` must be in the SettingCatalog. ``complete`` False: some rule file did not
    load (its own problems say why), so a table a policy borrows may be missing through no fault of
    the policy: nothing is reported against what it borrows.
    """
    settings = None
    tables: dict[str, dict] = {}
    limits = None
    for doc in documents:
        if doc.kind == "SettingCatalog":
            settings = frozenset(s.name for s in doc.spec.settings)
        elif doc.kind == "AdmissionParams":
            tables[doc.name] = dict(doc.spec.values)
        elif doc.kind == "CelLimits":
            limits = doc.spec
    checker = _StaticChecks(settings, tables, parsed, limits, types)
    checker.complete = complete
    checker.shared = shared_values(documents) if types else {}
    checker.fragments = included_fragments(documents)   # checked inside the policies naming them
    for doc in documents:
        if doc.source is None or (doc.kind == "AdmissionValidations" and doc.name in checker.fragments):
            continue
        if doc.kind == "AdmissionPolicy":
            _admission(checker, doc.file, doc.source, doc.spec)
        else:
            _other(checker, doc, settings)
        for kind, pattern in SETTING_FIELDS:
            if doc.kind != kind:
                continue
            for path, value in _leaves(doc.spec, ()):
                if matches(dotted(path), pattern):
                    checker.setting(doc.file, doc.source, path, value)
    return StaticReport(checker.problems, checker.costs)


def _other(checker: _StaticChecks, doc: Any, settings: Optional[frozenset[str]]) -> None:
    """The expressions of a document of another kind than AdmissionPolicy: the names of
    :data:`runtime.rules.activations.ACTIVATIONS` (typed by ``ACTIVATION_TYPES``, ``constants`` and a
    string field of the document, e.g. ``namePrefix``, by their values, else dyn), the result types of
    ``EXPECTED_TYPES``."""
    checker.sized = True
    constants = of_value(checker.shared.get("constants"), "constants") \
        if "constants" in checker.shared else DYN
    for path, expr in ((p, v) for p, v in _leaves(doc.spec, ()) if isinstance(v, Expr)):
        where = dotted(path)
        bound = activation_of(doc.kind, where)
        members = {"settings": settings} if bound and "settings" in bound and settings is not None else {}
        names = Names(roots=bound, members=members) if bound is not None else None
        scope = None
        if bound is not None:
            scope = checker.scope({name: constants if name == "constants" else of_value(own)
                                   if type(own := getattr(doc.spec, name, None)) is str else
                                   parse_type(ACTIVATION_TYPES[name], checker.bounds)
                                   if name in ACTIVATION_TYPES else DYN for name in bound})
        checker.expression(doc.file, doc.source, path, expr, names, scope, expected_type(doc.kind, where))
