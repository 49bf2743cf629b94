"""What every stage of the CEL package reports: one finding record and one error base.

A stage that looks at an expression without running it (parse, names, types and cost) answers with
:class:`Finding` records: where in the expression (1-based line and column) and what is wrong. A stage that
cannot go on raises a :class:`CelError`: :class:`CelCompileError` when an expression does not compile,
:class:`CelEvalError` when an evaluation fails, and :class:`CelBudgetExceeded` (a CelEvalError) when
an evaluation has spent its budget (docs/rule-authoring.md "Run-time budget").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Finding:
    """One finding of a static stage: 1-based ``line``/``column`` within the expression and the message
    (a syntax error, an undeclared name, a type mismatch)."""

    line: int
    column: int
    message: str


class CelError(Exception):
    """The base of every error the CEL package raises."""


class CelCompileError(CelError, ValueError):
    """A CEL expression that does not compile; ``line``/``column`` are 1-based within the expression
    (None where the transpiler, not the parser, refused it)."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        super().__init__(message)
        self.line = line
        self.column = column


class CelEvalError(CelError, RuntimeError):
    """A CEL expression failed at evaluation time (missing key, type mismatch, division by zero)."""


class CelBudgetExceeded(CelEvalError):
    """An evaluation stopped because its budget was spent (:mod:`runtime.rules.cel.budget`).

    ``reason``: ``cost``, ``string-size``, ``list-size``, ``deadline`` or ``nesting``; ``limit``: the
    limit that was reached (cost units, characters, elements, seconds or frames); ``setting``: the
    ``runtime`` key of rules/cel.yaml that sets it (empty for the deadline and the nesting limit);
    ``iterations`` and ``cost``: what the evaluation had spent when it stopped (from ``budget``, a
    :class:`~runtime.rules.cel.budget.Budget`); ``where``: the expression's origin (set by
    :meth:`runtime.rules.cel.evaluate.CelExpression.evaluate_cel`). ``str()`` is a sentence without
    Python internals, fit for an AdmissionReview answer.
    """

    def __init__(self, reason: str, limit: float, setting: str = "", budget: Any = None):
        self.reason, self.limit, self.setting, self.where = reason, limit, setting, ""
        self.iterations = budget.iterations if budget is not None else 0
        self.cost = budget.cost if budget is not None else 0.0
        super().__init__(self.describe())

    def describe(self) -> str:
        """``CEL evaluation stopped: <what was spent>`` naming the rules/cel.yaml setting."""
        limit = f"{self.limit:g}" if isinstance(self.limit, float) else str(self.limit)
        what = {
            "cost": f"its cost limit of {limit} units was spent",
            "string-size": f"it built a string longer than {limit} characters",
            "list-size": f"it built a list longer than {limit} elements",
            "deadline": f"the review's deadline of {limit}s passed",
            "nesting": f"the expression nests deeper than the evaluator's limit of {limit} frames",
        }[self.reason]
        where = f" (rules/cel.yaml runtime.{self.setting})" if self.setting else ""
        return f"CEL evaluation stopped: {what}{where}"
