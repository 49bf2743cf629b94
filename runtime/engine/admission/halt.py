"""Reviews stopped before their verdict (docs/rule-authoring.md "Run-time budget"): a spent CEL
budget (:class:`runtime.rules.cel.errors.CelBudgetExceeded`) or a passed deadline, and the outcome each
gets."""
from __future__ import annotations

from typing import Optional

from runtime.engine.admission.verdict import HALT_BUDGET, HALT_TIMEOUT, RULE_ERROR, Outcome, timeout_denial
from runtime.model.admission import AdmissionPolicySpec
from runtime.rules.cel.budget import Deadline
from runtime.rules.cel.errors import CelEvalError


class DeadlineExceeded(Exception):
    """The caller cancelled the review (its ``cancel`` event was set) or its deadline passed: the
    webhook's per-review deadline; the worker thread stops at the next expression, or inside one at
    the next budget check (:mod:`runtime.rules.cel.budget`)."""


def deadline_of(cancel) -> Optional[Deadline]:
    """A review's :class:`~runtime.rules.cel.budget.Deadline` from what the caller gave: a Deadline,
    a cancel event (no time of its own), or None."""
    if cancel is None or isinstance(cancel, Deadline):
        return cancel
    return Deadline(None, cancel)


def halted(name: str, spec: AdmissionPolicySpec, base: dict, exc: Exception, outcome: Outcome) -> None:
    """``outcome`` (in place) of a review of policy ``name`` stopped before its verdict by ``exc``: a
    spent CEL budget (``budget-exceeded``: 500 InternalError alone naming the policy, rule and budget,
    or allowed under ``failurePolicy: Ignore``) or its deadline (``timeout``: the webhook's 504
    Timeout). ``base``: the review's top scope (``_rule``: the rule being judged, ``_cancel``: its
    :class:`~runtime.rules.cel.budget.Deadline`)."""
    outcome.errors, outcome.patch, outcome.mutated = [], [], None
    outcome.halt_rule = rule = base.get("_rule", "")
    deadline = base.get("_cancel")
    if isinstance(exc, DeadlineExceeded) and deadline is not None and deadline.running:
        outcome.halt_rule = deadline.running   # between expressions: the rule whose expression spent the time
    if isinstance(exc, DeadlineExceeded) or getattr(exc, "reason", "") == "deadline":
        outcome.halt = HALT_TIMEOUT
        seconds = (deadline.seconds if deadline is not None else None) or 0
        outcome.halt_detail = f"{getattr(exc, 'where', '') or 'between expressions'}: deadline passed"
        outcome.denial = timeout_denial(name, seconds)
        return
    outcome.halt = HALT_BUDGET
    outcome.halt_class = exc.reason
    outcome.halt_detail = f"{exc.where}: {exc}"
    outcome.rules.append(HALT_BUDGET)
    if spec.failurePolicy == "Fail":  # an Ignore webhook (the Workload fit pin) never denies
        outcome.denial = (500, "InternalError", f"policy {name}, rule {rule or '-'}: {exc}")


def error_class(exc: BaseException) -> str:
    """The class of a rule's run-time error, for its log line and the rate limit of those lines: the Python
    exception cel-python reports inside a :class:`~runtime.rules.cel.errors.CelEvalError` (``KeyError``: a
    key or member missing, ``TypeError``: no overload for these types, ``ValueError``, ``ZeroDivisionError``),
    else the exception's own class."""
    args = getattr(exc.__cause__, "args", ()) if isinstance(exc, CelEvalError) else ()
    for _ in range(8):   # cel-python nests (message, class, args) in its error values
        if len(args) < 2 or not isinstance(args[1], type):
            break
        if not issubclass(args[1], Exception) or args[1].__name__ != "CELEvalError":
            return args[1].__name__
        args = args[2] if isinstance(args[2], tuple) else ()
    return type(exc).__name__


def failed(name: str, spec: AdmissionPolicySpec, base: dict, exc: Exception, outcome: Outcome) -> None:
    """``outcome`` (in place) of a review of policy ``name`` whose rule failed to evaluate (a missing key,
    no overload, a pattern RE2 refuses): verdict ``rule-error``, whatever the policy answers (``Fail``:
    500 InternalError naming the policy and the error; ``Ignore``: allowed), with the rule, the error's
    class (:func:`error_class`) and the error for the log line (docs/observability.md "Rule errors")."""
    outcome.errors, outcome.patch, outcome.mutated = [], [], None
    outcome.rules.append(RULE_ERROR)
    outcome.halt, outcome.halt_rule = RULE_ERROR, base.get("_rule", "")
    outcome.halt_class, outcome.halt_detail = error_class(exc), str(exc)
    if spec.failurePolicy == "Fail":  # an Ignore webhook (the Workload fit pin) never denies
        outcome.denial = (500, "InternalError", f"policy {name}: {exc}")
