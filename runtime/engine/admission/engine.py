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

import threading
from dataclasses import dataclass, field
from typing import Any, Optional

from runtime.engine.admission.context import AdmissionView
from runtime.engine.admission.memokeys import _digest, read_inputs
from runtime.engine.admission.builtins import BUILTINS, VARIABLES
from runtime.engine.admission.exceptions import conditions_of, exception_spec, lift
from runtime.engine.admission.patch import apply_writes, diff_writes
from runtime.engine.admission.shapes import shape_errors
from runtime.engine.admission.halt import DeadlineExceeded, deadline_of, failed, halted
from runtime.engine.admission.verdict import MISSING, SHAPE, FieldError, Outcome, enforce
from runtime.engine.policy import Policy
from runtime.engine.resourcekeys import classifier_manufacturers
from runtime.model.rfc3339 import format_time
from runtime.model.admission import AdmissionPolicySpec, Mutation, Validation, Variable
from runtime.model.rulefiles import Expr
from runtime.rules.cel.errors import CelBudgetExceeded, CelEvalError
from runtime.rules.cel.values import cel_map, to_cel
from runtime.rules.memo import MEMO_BYTES, MEMO_ENTRIES, BoundedMemo
from runtime.rules.vocabulary import admission_params


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


_NO_OBJECTS: list = []  # a lookup that found nothing or was not made (shared, never written)


def _stopped(stop: _Stop, outcome: Outcome) -> None:
    """``outcome`` of a review a rule stopped: an InternalError or a guard's Forbidden (no field)
    becomes the denial alone (500 / 403), a field error is the only error, a mutation's denial wins."""
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
        self.exception_spec, self.exception_table = exception_spec(policy), shared["exceptions"]
        self.conditions = conditions_of(policy)   # PolicyException match conditions (compiled once)
        self._memo = BoundedMemo(MEMO_ENTRIES, MEMO_BYTES)
        self._memo_lock = threading.Lock()
        self.policies: dict[str, AdmissionPolicySpec] = {}
        self.params: dict[str, dict] = {}
        tables = {doc.name: doc.spec.values for doc in policy.ruleset.all("AdmissionParams")}
        self.shapes = {doc.name: doc.spec.openAPIV3Schema for doc in policy.ruleset.all("ObjectShape")}
        for doc in policy.ruleset.all("AdmissionPolicy"):
            if doc.spec.shape and doc.spec.shape not in self.shapes:
                raise KeyError(f"{doc.file}:{doc.line} spec.shape: no ObjectShape named {doc.spec.shape!r}")
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
        self._params_keys = {id(p): _digest(p) for p in self.params.values()}  # params live as long
        self._params_cel = {id(p): to_cel(p) for p in self.params.values()}

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
    def admit(self, request: AdmissionRequest, view: AdmissionView, cancel=None, now=None) -> Outcome:
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
        warnings: list[str] = []
        lifted: list = []
        for name in names:
            outcome = self.run(name, current, view, cancel, now)
            rules.extend(outcome.rules)
            warnings.extend(outcome.warnings)
            lifted.extend(outcome.lifted)
            if not outcome.allowed:
                outcome.rules, outcome.warnings = rules, warnings
                return outcome
            if self.policies[name].type == "mutating" and outcome.mutated is not None:
                patches.extend(outcome.patch)
                current = AdmissionRequest(**{**current.__dict__, "object": outcome.mutated})
                writes_outcome = outcome
        final = Outcome(policy=",".join(names), name=request.name, patch=patches,
                        mutated=current.object if writes_outcome else None, warnings=warnings, lifted=lifted)
        final.rules = rules
        return final

    def run(self, name: str, request: AdmissionRequest, view: AdmissionView, cancel=None,
            now=None) -> Outcome:
        """Judge ``request`` with policy ``name`` at ``now`` (an aware datetime, the caller's clock: the
        PolicyExceptions in force then lift their rules' errors, and CEL reads it as ``request.time``;
        None: no exception applies, ``request.time`` is "").

        ``cancel`` (a :class:`threading.Event` or a :class:`~runtime.rules.cel.budget.Deadline`,
        optional) stops the evaluation once set or past (the webhook's per-review deadline): the
        outcome is the 504 Timeout, verdict ``timeout``.

        A rule evaluation failure becomes a 500 InternalError denial, or, for a policy with
        ``failurePolicy: Ignore``, an unchanged admission; a spent CEL budget the same, with verdict
        ``budget-exceeded`` (:func:`~runtime.engine.admission.halt.halted`).
        """
        spec = self.policies[name]
        meta = request.object.get("metadata") or request.old_object.get("metadata") or {}
        outcome = Outcome(policy=name, kind=spec.match.kind, group=spec.match.group,
                          object_kind=spec.objectKind, name=str(meta.get("name") or request.name),
                          namespace=request.namespace)
        if (spec.match.skipDeleting and request.operation == "UPDATE"
                and (request.old_object.get("metadata") or {}).get("deletionTimestamp")):
            return outcome  # the stored object already has a deletionTimestamp (finalizers finishing)
        errors = self._shape_errors(spec, request)
        if errors:  # the rules cannot read this object: answer the shape errors alone
            outcome.rules.append(SHAPE)
            if spec.failurePolicy == "Fail":  # an Ignore webhook (the Workload fit pin) never denies
                outcome.errors = errors
            return enforce(outcome, spec.enforcement)
        scope = self._scope(name, request, view, cancel, now)
        try:
            self._judge(spec, scope, request, view, outcome)
            lift(self, name, request, view, now, outcome)
        except _Stop as stop:
            _stopped(stop, outcome)
        except (CelBudgetExceeded, DeadlineExceeded) as exc:
            halted(name, spec, scope.base, exc, outcome)
        except (CelEvalError, ValueError, KeyError, TypeError) as exc:
            failed(name, spec, scope.base, exc, outcome)
        return enforce(outcome, spec.enforcement)

    def _shape_errors(self, spec: AdmissionPolicySpec, request: AdmissionRequest) -> list[FieldError]:
        """The object's errors against the policy's ObjectShape; when it has none, the old object's
        type errors (``oldObject.spec...``: an offline ``admit --old``; the API server's stored object is
        well-formed, though it may predate a size cap, so caps are not checked on it)."""
        if not spec.shape:
            return []
        schema = self.shapes[spec.shape]
        errors = shape_errors(schema, request.object) if request.object else []
        if not errors and request.old_object:
            errors = [e for e in shape_errors(schema, request.old_object,
                                              "oldObject") if e.reason == "Invalid"]
        return errors

    def _scope(self, name: str, request: AdmissionRequest, view: AdmissionView, cancel, now=None) -> _Scope:
        """The review's top scope: the names every expression of policy ``name`` may read, plus the
        engine's per-review state (``_view``, ``_inputs``, ``_cancel``); no variables yet."""
        base = {
            "object": request.object, "oldObject": request.old_object,
            "request": {"operation": request.operation, "namespace": request.namespace,
                        "name": request.name, "user": request.user,
                        "time": format_time(now) if now else ""},
            "params": self.params[name], "_view": view, "_inputs": {}, "_cancel": deadline_of(cancel),
            "_rule": "",
            # the view's own settings map (read only, converted once per view), a copy of any other mapping
            "settings": view.settings if type(view.settings) is dict else dict(view.settings),
        }
        return _Scope(base, {})

    def _judge(self, spec: AdmissionPolicySpec, scope: _Scope, request: AdmissionRequest,
               view: AdmissionView, outcome: Outcome) -> None:
        """Lookups, variables, then validations or mutations into ``outcome``.

        Raises :class:`_Stop` when a rule answers alone or a mutation denies, and the rule errors
        (CelEvalError, ValueError, KeyError, TypeError) :meth:`run` turns into a verdict.
        """
        base = scope.base
        base["lookups"] = {}
        for lk in spec.lookups:  # in order: a lookup may read the ones before it (a new dict each time)
            base["_rule"] = f"lookups.{lk.name}"
            base["lookups"] = {**base["lookups"], lk.name: self._lookup(lk, scope, view)}
        base["_rule"] = "variables"
        self._variables(spec.variables, scope)
        if spec.type == "validating":
            self._validate(spec.validations, scope, outcome)
        else:
            writes: list = []
            for mutation in spec.mutations:
                self._mutate(mutation, scope, writes, outcome)
            outcome.mutated, outcome.patch = apply_writes(request.object, writes, spec.patchOrder)

    def _eval(self, expr: Expr, scope: _Scope) -> Any:
        """Evaluate with only the referenced names; memoised on their type-tagged digests.

        Each value an expression reads gets its memo key part and its CEL value once per review
        (:func:`~runtime.engine.admission.memokeys.new_input`: ``scope.base['_inputs']``, by identity),
        params once per engine, a lookup's objects and the settings once per view
        (:func:`~runtime.engine.admission.memokeys.held_input`); the memo
        (:class:`runtime.rules.memo.BoundedMemo`) is bounded by entries and bytes and holds results
        only, never the request. Raises :class:`DeadlineExceeded` once the review's ``cancel`` event
        is set.
        """
        base = scope.base
        deadline = base.get("_cancel")
        if deadline is not None:
            if deadline.passed():
                raise DeadlineExceeded()
            deadline.running = base["_rule"]   # what a timeout names: the rule whose expression runs
        read, k = read_inputs(expr, scope.variables, None if scope.item is MISSING else scope.item, base,
                              self._params_keys, self._params_cel)
        if k is not None:
            with self._memo_lock:
                hit = self._memo.get(k, MISSING)
            if hit is not MISSING:
                return hit
        cel_act = {n: cel_map({v: entry.cel_value() for v, entry in entry_or_entries}) if n == "variables"
                   else entry_or_entries.cel_value() for n, entry_or_entries in read}
        result = expr.program.evaluate_cel(cel_act, deadline)
        if k is not None:
            with self._memo_lock:
                self._memo.put(k, result)
        return result

    def _lookup(self, lk, scope: _Scope, view: AdmissionView) -> list[dict]:
        if lk.when is not None and self._eval(lk.when, scope) is not True:
            return _NO_OBJECTS
        namespace = str(scope.base["request"]["namespace"] or "") if lk.namespaced else ""
        if lk.nameExpression is not None:
            value = self._eval(lk.nameExpression, scope)
            return view.get(lk.kind, str(value), namespace) if value else _NO_OBJECTS
        value = self._eval(lk.labelValueExpression, scope)
        return view.by_label(lk.kind, lk.labelKey, str(value)) if value else _NO_OBJECTS

    def _variables(self, variables: list[Variable], scope: _Scope) -> None:
        for var in variables:
            base = scope.base
            scope.variables[var.name] = VARIABLES[var.builtin](self.policy, base["object"], base["_view"],
                                                               base["params"]) if var.builtin else \
                self._eval(var.expression, scope)

    def _items(self, rule, scope: _Scope) -> list[_Scope]:
        if rule.forEach is None:
            return [scope.child()]
        items = self._eval(rule.forEach, scope)
        if not isinstance(items, list):
            raise TypeError(f"forEach of {rule.name or 'a rule'} must be a list, got {type(items).__name__}")
        return [scope.child(item) for item in items]

    def _validate(self, rules: list[Validation], scope: _Scope, outcome: Outcome) -> None:
        for rule in rules:
            scope.base["_rule"] = rule.name
            for sub in self._items(rule, scope):
                sub.base["_rule"] = rule.name  # again: a nested rule's name was set meanwhile
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
                    detail=str(self._eval(rule.messageExpression, sub)) if rule.messageExpression
                    else rule.message,
                    value=self._eval(rule.value, sub) if rule.value is not None else MISSING,
                    rule=rule.name)
                outcome.rules.append(rule.name)
                if rule.alone or rule.reason == "InternalError":
                    raise _Stop(error=error)
                outcome.errors.append(error)

    def _mutate(self, mutation: Mutation, scope: _Scope, writes: list, outcome: Outcome) -> None:
        scope.base["_rule"] = mutation.name
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
