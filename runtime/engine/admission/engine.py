"""The admission engine: AdmissionPolicy rule files (runtime.model.admission) applied to a request.

:class:`AdmissionEngine` is built once per rules generation. :meth:`AdmissionEngine.run` judges one
request with one policy and returns an :class:`~runtime.engine.admission.verdict.Outcome`;
:meth:`AdmissionEngine.admit` runs every matching policy the way kube-apiserver chains them
(mutating first, each on the result of the previous; then validating on the mutated object).

Cost: every CEL expression is evaluated with an activation holding only the names it references
(``variables.x`` narrowed to those variables), memoised per activation, so repeated shapes cost a
dictionary freeze instead of a cel-python evaluation.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

from runtime.engine.admission.context import AdmissionView
from runtime.engine.admission.builtins import BUILTINS
from runtime.engine.admission.patch import apply_writes, diff_writes
from runtime.engine.admission.verdict import MISSING, FieldError, Outcome
from runtime.engine.policy import Policy
from runtime.engine.resourcekeys import classifier_manufacturers
from runtime.model.admission import AdmissionPolicySpec, Mutation, Validation, Variable
from runtime.model.rulefiles import Expr
from runtime.rules.cel import CelEvalError
from runtime.rules.vocabulary import admission_params

_TOP = ("object", "oldObject", "request", "params", "settings", "lookups", "item")
_NAME_RE = re.compile(r"(?<![\w.'\"])(" + "|".join(_TOP + ("variables",)) + r")\b")
_VAR_RE = re.compile(r"\bvariables\.([A-Za-z_]\w*)")


@dataclass
class AdmissionRequest:
    """The parts of an AdmissionReview v1 ``request`` the rules read (already type-checked)."""

    uid: str
    kind: dict
    resource: dict
    operation: str
    name: str
    namespace: str
    object: dict
    old_object: dict
    user: dict = field(default_factory=dict)


class _Stop(Exception):
    """A rule answered alone (``alone``/InternalError) or a mutation denied."""

    def __init__(self, error: FieldError | None = None, denial: tuple | None = None):
        super().__init__()
        self.error = error
        self.denial = denial


@dataclass
class _Scope:
    base: dict
    variables: dict
    item: Any = MISSING

    def child(self, item: Any = MISSING) -> "_Scope":
        return _Scope(self.base, dict(self.variables), self.item if item is MISSING else item)


_MEMO_LIMIT = 8192
_PINNED_LIMIT = 50000


def _freeze(value: Any) -> Any:
    """A hashable, type-tagged copy of a JSON value (dict/list/bool/float tagged: no 1 == True)."""
    t = type(value)
    if t is dict:
        return (1, tuple((k, _freeze(v)) for k, v in value.items()))
    if t is list:
        return (2, tuple(_freeze(v) for v in value))
    if t is bool or t is float:
        return (3 if t is bool else 4, value)
    return value


def _refs(expr: Expr) -> tuple[tuple[str, ...], tuple[str, ...]]:
    cached = getattr(expr, "_refs", None)
    if cached is None:
        names = tuple(sorted(set(_NAME_RE.findall(expr))))
        cached = (names, tuple(sorted(set(_VAR_RE.findall(expr)))))
        expr._refs = cached
    return cached


class AdmissionEngine:
    """Every AdmissionPolicy of a rules generation, ready to judge requests.

    ``params`` of each policy get shared tables: ``manufacturers`` (id, base, partitionKind from
    rules/manufacturers.yaml), ``constants`` (rules/constants.yaml), ``settingCatalog``, and the
    vocabulary homes of :func:`runtime.rules.vocabulary.admission_params` (``labels``,
    ``derivation``, ``controllerUsers``).
    """

    def __init__(self, policy: Policy):
        self.policy = policy
        shared = {
            **admission_params(policy.ruleset),
            "manufacturers": classifier_manufacturers(policy),
            "constants": policy.constants.model_dump(),
            "settingCatalog": {
                "namespace": policy.settings.namespace,
                "names": sorted(d.name for d in policy.settings.settings),
                "types": {d.name: d.type for d in policy.settings.settings},
                "booleans": list(policy.settings.booleanTrue) + list(policy.settings.booleanFalse),
            },
        }
        self._memo: dict[int, dict] = {}
        self._pinned: dict[int, tuple] = {}
        self.policies: dict[str, AdmissionPolicySpec] = {}
        self.params: dict[str, dict] = {}
        tables = {doc.name: doc.spec.values for doc in policy.ruleset.all("AdmissionParams")}
        for doc in policy.ruleset.all("AdmissionPolicy"):
            for mutation in doc.spec.mutations:
                if mutation.builtin is not None and mutation.builtin not in BUILTINS:
                    raise KeyError(f"{doc.file}:{doc.line} mutation {mutation.name}: unknown builtin "
                                   f"{mutation.builtin!r} (known: {', '.join(sorted(BUILTINS))})")
            self.policies[doc.name] = doc.spec
            merged = dict(shared)
            for ref in doc.spec.paramsFrom:
                if ref not in tables:
                    raise KeyError(f"{doc.file}:{doc.line} spec.paramsFrom: no AdmissionParams named {ref!r}")
                merged.update(tables[ref])
            self.params[doc.name] = {**merged, **doc.spec.params}
        self._params_frozen = {id(p): _freeze(p) for p in self.params.values()}  # params live as long

    # -- selection -----------------------------------------------------------------------------------
    def by_path(self, path: str) -> Optional[str]:
        """The policy served at HTTPS ``path`` (None when none)."""
        for name, spec in self.policies.items():
            if spec.path == path:
                return name
        return None

    def matching(self, request: AdmissionRequest) -> list[str]:
        """Policies that judge ``request``: mutating first, then validating, each in name order."""
        out = [n for n, s in self.policies.items() if self.matches(s, request)]
        return sorted(out, key=lambda n: (self.policies[n].type != "mutating", n))

    @staticmethod
    def matches(spec: AdmissionPolicySpec, request: AdmissionRequest) -> bool:
        """Kind, group, operation, excluded namespaces and the label selector of ``spec.match``."""
        m = spec.match
        if request.kind.get("kind") != m.kind or request.kind.get("group", "") != m.group:
            return False
        if request.operation not in m.operations:
            return False
        if request.namespace and request.namespace in m.excludeNamespaces:
            return False
        obj = request.object or request.old_object
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(key in labels for key in m.labelsExist)

    # -- evaluation ----------------------------------------------------------------------------------
    def admit(self, request: AdmissionRequest, view: AdmissionView) -> Outcome:
        """All matching policies, chained as kube-apiserver does; the first denial wins.

        The returned patch is the mutating policies' combined patch against the original object.
        """
        names = self.matching(request)
        if not names:
            return Outcome(policy="", name=request.name)
        current = request
        writes_outcome: Optional[Outcome] = None
        patches: list[dict] = []
        rules: list[str] = []
        for name in names:
            outcome = self.run(name, current, view)
            rules.extend(outcome.rules)
            if not outcome.allowed:
                outcome.rules = rules
                return outcome
            if self.policies[name].type == "mutating" and outcome.mutated is not None:
                patches.extend(outcome.patch)
                current = AdmissionRequest(**{**current.__dict__, "object": outcome.mutated})
                writes_outcome = outcome
        final = Outcome(policy=",".join(names), name=request.name, patch=patches,
                        mutated=current.object if writes_outcome else None)
        final.rules = rules
        return final

    def run(self, name: str, request: AdmissionRequest, view: AdmissionView) -> Outcome:
        """Judge ``request`` with policy ``name``.

        A rule evaluation failure becomes a 500 InternalError denial, or, for a policy with
        ``failurePolicy: Ignore``, an unchanged admission.
        """
        spec = self.policies[name]
        meta = request.object.get("metadata") or request.old_object.get("metadata") or {}
        outcome = Outcome(policy=name, kind=spec.match.kind, group=spec.match.group,
                          object_kind=spec.objectKind, name=str(meta.get("name") or request.name))
        if (spec.match.skipDeleting and request.operation == "UPDATE"
                and (request.object.get("metadata") or {}).get("deletionTimestamp")):
            return outcome
        base = {
            "object": request.object, "oldObject": request.old_object,
            "request": {"operation": request.operation, "namespace": request.namespace,
                        "name": request.name, "user": request.user},
            "params": self.params[name], "settings": dict(view.settings), "_view": view,
        }
        scope = _Scope(base, {})
        try:
            base["lookups"] = {}
            for lk in spec.lookups:  # in order: a lookup may read the ones before it (a new dict each time)
                base["lookups"] = {**base["lookups"], lk.name: self._lookup(lk, scope, view)}
            self._variables(spec.variables, scope)
            if spec.type == "validating":
                self._validate(spec.validations, scope, outcome)
            else:
                writes: list = []
                for mutation in spec.mutations:
                    self._mutate(mutation, scope, writes, outcome)
                outcome.mutated, outcome.patch = apply_writes(request.object, writes, spec.patchOrder)
        except _Stop as stop:
            if stop.error is not None:
                if stop.error.reason == "InternalError":
                    outcome.errors = []
                    outcome.denial = (500, "InternalError", stop.error.detail)
                elif stop.error.reason == "Forbidden" and not stop.error.field:  # a guard, not a field
                    outcome.errors = []
                    outcome.denial = (403, "Forbidden", stop.error.detail)
                else:
                    outcome.errors = [stop.error]
            else:
                outcome.errors = []
                outcome.denial = stop.denial
        except (CelEvalError, ValueError, KeyError, TypeError) as exc:
            outcome.errors, outcome.patch, outcome.mutated = [], [], None
            outcome.rules.append("rule-error")
            if spec.failurePolicy == "Fail":  # an Ignore webhook (the Workload fit pin) never denies
                outcome.denial = (500, "InternalError", f"policy {name}: {exc}")
        return outcome

    def _eval(self, expr: Expr, scope: _Scope) -> Any:
        """Evaluate with only the referenced names; memoised on their frozen values.

        Frozen forms are cached by object identity with the object pinned (so its id cannot be
        reused while cached): params, cluster objects and memoised results are frozen once, a
        request's own values once per review.
        """
        names, var_names = _refs(expr)
        act: dict[str, Any] = {}
        key: list = []
        frozen = self._pinned
        for n in names:
            if n == "variables":
                value = {v: scope.variables[v] for v in var_names if v in scope.variables}
                key.append(tuple((v, self._frozen(scope.variables[v], frozen)) for v in value))
            else:
                value = (None if scope.item is MISSING else scope.item) if n == "item" else scope.base[n]
                key.append(self._frozen(value, frozen))
            act[n] = value
        memo = self._memo.setdefault(id(expr), {})
        k = tuple(key)
        try:
            return memo[k]
        except KeyError:
            pass
        result = expr.evaluate(act, memo=False)
        if len(memo) >= _MEMO_LIMIT:
            memo.clear()
        memo[k] = result
        return result

    def _frozen(self, value: Any, cache: dict) -> Any:
        if type(value) not in (dict, list):
            return _freeze(value)
        ident = id(value)
        hit = self._params_frozen.get(ident)
        if hit is not None:
            return hit
        entry = cache.get(ident)
        if entry is None:  # pin the value: its id must not be reused while the entry lives
            if len(cache) >= _PINNED_LIMIT:
                cache.clear()
            entry = cache[ident] = (value, _freeze(value))
        return entry[1]

    def _lookup(self, lk, scope: _Scope, view: AdmissionView) -> list[dict]:
        if lk.when is not None and self._eval(lk.when, scope) is not True:
            return []
        namespace = str(scope.base["request"]["namespace"] or "") if lk.namespaced else ""
        if lk.nameExpression is not None:
            value = self._eval(lk.nameExpression, scope)
            return view.get(lk.kind, str(value), namespace) if value else []
        value = self._eval(lk.labelValueExpression, scope)
        return view.by_label(lk.kind, lk.labelKey, str(value)) if value else []

    def _variables(self, variables: list[Variable], scope: _Scope) -> None:
        for var in variables:
            scope.variables[var.name] = self._eval(var.expression, scope)

    def _items(self, rule, scope: _Scope) -> list[_Scope]:
        if rule.forEach is None:
            return [scope.child()]
        items = self._eval(rule.forEach, scope)
        if not isinstance(items, list):
            raise TypeError(f"forEach of {rule.name or 'a rule'} must be a list, got {type(items).__name__}")
        return [scope.child(item) for item in items]

    def _validate(self, rules: list[Validation], scope: _Scope, outcome: Outcome) -> None:
        for rule in rules:
            for sub in self._items(rule, scope):
                self._variables(rule.variables, sub)
                if rule.when is not None and self._eval(rule.when, sub) is not True:
                    continue
                if rule.validations:
                    self._validate(rule.validations, sub, outcome)
                    continue
                if self._eval(rule.expression, sub) is True:
                    continue
                error = FieldError(
                    reason=rule.reason,
                    field=str(self._eval(rule.fieldExpression, sub)) if rule.fieldExpression else rule.field,
                    detail=str(self._eval(rule.messageExpression, sub)) if rule.messageExpression else rule.message,
                    value=self._eval(rule.value, sub) if rule.value is not None else MISSING,
                    rule=rule.name)
                outcome.rules.append(rule.name)
                if rule.alone or rule.reason == "InternalError":
                    raise _Stop(error=error)
                outcome.errors.append(error)

    def _mutate(self, mutation: Mutation, scope: _Scope, writes: list, outcome: Outcome) -> None:
        for sub in self._items(mutation, scope):
            self._variables(mutation.variables, sub)
            if mutation.when is not None and self._eval(mutation.when, sub) is not True:
                continue
            for denial in mutation.denials:
                if self._eval(denial.expression, sub) is True:
                    message = (str(self._eval(denial.messageExpression, sub)) if denial.messageExpression
                               else denial.message)
                    outcome.rules.append(f"{mutation.name}/{denial.name}")
                    code = 500 if denial.reason == "InternalError" else 403
                    raise _Stop(denial=(code, denial.reason, message))
            wrote = False
            if mutation.builtin is not None:
                base = sub.base
                new = BUILTINS[mutation.builtin](self.policy, base["object"], base["_view"], base["params"])
                changes = diff_writes(base["object"], new, 2)
                writes.extend(changes)
                wrote = bool(changes)
            for write in mutation.writes:
                if write.when is not None and self._eval(write.when, sub) is not True:
                    continue
                value = self._eval(write.value, sub)
                for path in self._eval(write.paths, sub):
                    writes.append((tuple(path), value))
                    wrote = True
            if wrote:
                outcome.rules.append(mutation.name)
