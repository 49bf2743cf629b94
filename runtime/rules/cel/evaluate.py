"""The evaluate stage: a compiled expression run against JSON-shaped variables, converted to CEL only
at the edge, within its budget, and memoised when pure.

A :class:`CelExpression` holds its :class:`Program` (a transpiled code object, run with cel-python's
``CompiledRunner`` interface in the :class:`~runtime.rules.cel.runtime.CelRuntime`'s globals: ~10x
faster than the interpreter). Each evaluation runs with a :class:`~runtime.rules.cel.budget.Budget`
(its generation's limits from rules/cel.yaml, the review's deadline) and stops with
:class:`~runtime.rules.cel.errors.CelBudgetExceeded` when it is spent (docs/rule-authoring.md
"Run-time budget"). Its activation is :class:`~runtime.rules.cel.activation.Activation`: cel-python's
resolves every name through ``typing.cast(Union[...], ...)``, whose ``Union`` subscription costs ~14 us
a call (about 15 % of a slice Pod review).

Pure expressions are memoised per activation (:meth:`CelExpression.evaluate` with ``memo=True``): rule
evaluation has no clock, no I/O and no environment, so equal inputs give equal outputs. The memo is the
runtime's, keyed by type-tagged digests and bounded by entries and bytes (:mod:`runtime.rules.memo`).
"""
from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import celpy.evaluation as _celeval

from runtime.model.cellimits import CelRuntimeLimits
from runtime.rules.cel.activation import Activation, name_container
from runtime.rules.cel.budget import DEFAULT_LIMITS, Budget, Deadline
from runtime.rules.cel.errors import CelBudgetExceeded, CelEvalError
from runtime.rules.cel.runtime import CelRuntime, cel_runtime
from runtime.rules.cel.values import from_cel, to_cel
from runtime.rules.memo import fingerprint

# cel-python logs every evaluation failure at ERROR before raising it; CelEvalError reports it, once.
logging.getLogger("celpy").setLevel(logging.CRITICAL)
_MISSING = object()


class Program:
    """A transpiled CEL expression ready to evaluate: cel-python's ``Transpiler`` around a code object,
    without the parse tree it came from. ``evaluate(context)`` is cel-python's own
    ``Transpiler.evaluate`` (the ``CompiledRunner`` interface) run in the :class:`CelRuntime`'s
    globals, so a program built from a cached code object and one just transpiled run the same code
    the same way."""

    __slots__ = ("tp", "runtime")

    def __init__(self, code: Any, runtime: Optional[CelRuntime] = None):
        self.runtime = runtime or cel_runtime()
        tp = _celeval.Transpiler.__new__(_celeval.Transpiler)
        tp.ast = None
        tp.base_activation = tp.activation = self.runtime.base
        tp.executable_code = code
        self.tp = tp

    def evaluate(self, context: Any) -> Any:
        """cel-python's ``Transpiler.evaluate`` (the ``CompiledRunner`` interface): a CEL value, or a
        ``CELEvalError`` raised; :class:`CelBudgetExceeded` when the thread's budget is spent or the
        expression nests deeper than the recursion limit.

        The activation is a container of the context's values chained to the base activation's,
        where cel-python clones the base's container and loads the values into the copy: names
        resolve the same way (a value before the base's annotations), without copying the base or
        matching path regexes per name. A context that names something the base holds (``google``)
        goes through cel-python's own clone, where such a name is a container and a value at once.
        The code runs in this thread's copy of the runtime's globals
        (:func:`runtime.rules.cel.fast.program_globals`), never in cel-python's module, so no lock."""
        base = self.tp.base_activation
        if not context:
            activation = base
        elif any(name in base.identifiers for name in context):
            activation = base.clone()
            activation.identifiers.load_values(context)
        else:
            activation = Activation.__new__(Activation)
            activation.identifiers = name_container(base.identifiers, context)
            activation.functions = base.functions
            activation.package = base.package
        evaluation_globals = self.runtime.globals()
        evaluation_globals["base_activation"] = activation
        try:
            exec(self.tp.executable_code, evaluation_globals)
            value = evaluation_globals["CEL"]
            if isinstance(value, _celeval.CELEvalError):
                raise value
            return value
        except CelBudgetExceeded:
            raise
        except RecursionError:
            raise CelBudgetExceeded("nesting", sys.getrecursionlimit()) from None
        except Exception as ex:  # cel-python's own wrapping of a Python problem during exec()
            raise _celeval.CELEvalError("evaluation error", type(ex), ex.args)
        finally:
            evaluation_globals["base_activation"] = evaluation_globals["CEL"] = None  # the review is freed


@dataclass
class CelExpression:
    """One compiled CEL expression.

    ``source`` is the CEL text; ``where`` names its origin (``file:line field.path``) for error
    messages; ``limits`` its generation's run-time budget. Built by
    :func:`runtime.rules.cel.compile.program_from_code`; evaluate with :meth:`evaluate`.
    """

    source: str
    where: str
    program: Program = field(repr=False, default=None)
    _token: object = field(repr=False, default_factory=object, compare=False)
    limits: CelRuntimeLimits = field(repr=False, default_factory=lambda: DEFAULT_LIMITS, compare=False)

    def evaluate(self, activation: Mapping[str, Any], memo: bool = True,
                 deadline: Optional[Deadline] = None) -> Any:
        """Evaluate against JSON-shaped variables; returns a JSON-shaped result.

        Raises :class:`CelEvalError` naming ``where`` when evaluation fails, :class:`CelBudgetExceeded`
        (a CelEvalError) when its budget (``limits``, ``deadline``) is spent.
        """
        key = fingerprint(activation) if memo else None  # type-tagged digest; None: not memoisable
        runtime = self.program.runtime
        if key is not None:
            with runtime.memo_lock:
                hit = runtime.memo.get((self._token, key), _MISSING)
            if hit is not _MISSING:
                return hit
        value = self.evaluate_cel({name: to_cel(value) for name, value in activation.items()}, deadline)
        if key is not None:
            with runtime.memo_lock:
                runtime.memo.put((self._token, key), value)
        return value

    def evaluate_cel(self, cel_activation: Mapping[str, Any], deadline: Optional[Deadline] = None) -> Any:
        """Evaluate against variables already converted to CEL values
        (:func:`runtime.rules.cel.values.to_cel`), so a caller converts what does not change (params, a
        review's object) once, not per evaluation.

        Runs with a fresh :class:`~runtime.rules.cel.budget.Budget` of ``limits`` and ``deadline``.
        Returns a JSON-shaped result; no memo. Raises :class:`CelEvalError` naming ``where``, and
        :class:`CelBudgetExceeded` (its ``where`` set) when the budget is spent.
        """
        program = self.program
        try:
            runtime = program.runtime
            budget = Budget(self.limits, deadline) if runtime.counting else None
            result = runtime.run(program, cel_activation, budget)
        except CelBudgetExceeded as exc:
            exc.where = self.where
            raise
        except Exception as exc:  # cel-python raises CELEvalError and wraps Python errors
            raise CelEvalError(f"{self.where}: evaluating {self.source!r}: {describe(exc)}") from exc
        if isinstance(result, _celeval.CELEvalError):
            raise CelEvalError(f"{self.where}: evaluating {self.source!r}: {describe(result)}")
        return from_cel(result)


def describe(exc: BaseException) -> str:
    """The innermost cause of a cel-python error: ``('evaluation error', cls, ('unbound function',
    KeyError, ('fnv64',)))`` -> ``unbound function: fnv64``."""
    parts: list[str] = []
    args = getattr(exc, "args", ())
    while args:
        head = args[0]
        if isinstance(head, str) and head not in ("evaluation error",):
            parts.append(head)
        nested = args[-1] if len(args) > 1 else None
        if isinstance(nested, tuple):
            args = nested
        elif isinstance(nested, BaseException):
            args = getattr(nested, "args", ())
        else:
            if isinstance(head, str) and not parts:
                parts.append(head)
            break
    return ": ".join(dict.fromkeys(parts)) or str(exc)
