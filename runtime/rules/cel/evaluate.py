"""CEL backend: compile once at rule load, evaluate many times, convert JSON <-> CEL only at the edge.

Pipeline (cel-python): ``Environment`` -> ``compile`` (parse errors carry line/column) -> ``program``
(bound to the custom-function table) -> ``evaluate(activation)``.

Programs use cel-python's ``CompiledRunner`` (the expression is transpiled to Python once; ~10x faster
than the interpreter). The state this needs lives in one :class:`CelRuntime`, created explicitly on
first use (:func:`cel_runtime`), never written into cel-python's modules: the globals programs run in
(a copy of ``celpy.evaluation``'s with the custom-function table reachable by its dotted path and
cel-python 0.5.0's hot helpers in faster, counting form, :mod:`runtime.rules.cel.fast`), one copy per
thread, so evaluations on different threads share nothing they write and run without a lock; the
one base activation; the lazily built Environment (and its lock); the process's memo; the recursion
limit; and the budget slot: each evaluation runs with a :class:`~runtime.rules.cel.budget.Budget`
(its generation's limits from rules/cel.yaml, the review's deadline) and stops with
:class:`CelBudgetExceeded` when it is spent (docs/rule-authoring.md "Run-time budget").
Its activation resolves every name the program reads through ``typing.cast(Union[...], ...)``, whose
``Union`` subscription costs ~14 us a call (about 15 % of a slice Pod review): programs here run
with :class:`~runtime.rules.cel.activation._Activation`, the same resolution without it.

An expression is compiled in two steps: its lark tree is transpiled to a Python code object
(:func:`transpile`), and :func:`program_from_code` binds that code object to a fresh activation. The
loader keeps the code objects of a rules directory in its compiled-rules cache
(:mod:`runtime.rules.compiledcache`), so a warm start evaluates the very same code without building
cel-python's lark parser or parsing anything; the parser is built on the first parse, not at import.

Pure expressions are memoised per activation (`CelExpression.evaluate` with ``memo=True``): rule
evaluation has no clock, no I/O and no environment, so equal inputs give equal outputs. The memo is
keyed by type-tagged digests and bounded by entries and bytes (:mod:`runtime.rules.memo`).
"""
from __future__ import annotations

import logging
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import celpy
import celpy.evaluation as _celeval

import runtime as _runtime_pkg
from runtime.model.cellimits import CelRuntimeLimits
from runtime.rules.cel import fast as celfast

from runtime.rules.cel.library import strings as celfunctions
from runtime.rules.cel.library import pricing as celpricing
from runtime.rules.cel.activation import _Activation, _container, _Runner  # noqa: F401  (tests read them here)
from runtime.rules.cel.budget import DEFAULT_LIMITS, Budget, BudgetSlot, CelBudgetExceeded, CelEvalError, \
    Deadline
from runtime.rules.cel.values import from_cel, to_cel
from runtime.rules.memo import MEMO_BYTES, MEMO_ENTRIES, BoundedMemo, fingerprint

__all__ = ["CelBudgetExceeded", "CelCompileError", "CelEvalError", "CelExpression", "CelRuntime", "Deadline",
           "cel_runtime", "compile_expression", "install_runtime", "program_from_code", "transpile"]
# cel-python logs every evaluation failure at ERROR before raising it; CelEvalError reports it, once.
logging.getLogger("celpy").setLevel(logging.CRITICAL)
_MISSING = object()


class _Program:
    """A transpiled CEL expression ready to evaluate: cel-python's ``Transpiler`` around a code object,
    without the parse tree it came from. ``evaluate(context)`` is cel-python's own
    ``Transpiler.evaluate`` (the ``CompiledRunner`` interface) run in the :class:`CelRuntime`'s
    globals, so a program built from a cached code object and one just transpiled run the same code
    the same way."""

    __slots__ = ("tp", "runtime")

    def __init__(self, code: Any, runtime: Optional["CelRuntime"] = None):
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
            activation = _Activation.__new__(_Activation)
            activation.identifiers = _container(base.identifiers, context)
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


class CelRuntime:
    """The CEL state of a process, in one object (see the module docstring): the program globals
    (one copy per thread, :meth:`globals`), the base activation every program starts from
    (:attr:`base`, read only), the Environment (:meth:`environment`, built on first use under
    :attr:`lock`), the memo of pure results (:attr:`memo`, under :attr:`memo_lock`), the budget slot
    the counting helpers charge (:attr:`slot`) and the recursion limit CEL's nesting needs (raised to
    ``recursion_limit`` when built: cel-python's Environment does the same, and a process that only
    runs cached programs never builds one).

    ``counting=False`` runs cel-python's helpers without the budget (no counting, no stop): the
    benchmark's baseline (benchmarks/cel_budget.py), installed with :func:`install_runtime`.

    Build one with :func:`cel_runtime` (the process's); tests may build their own."""

    def __init__(self, recursion_limit: int = 2500, counting: bool = True):
        self.recursion_limit = max(sys.getrecursionlimit(), recursion_limit)
        sys.setrecursionlimit(self.recursion_limit)
        self.counting = counting
        self.slot = BudgetSlot()
        package = celpricing.priced_runtime(self.slot) if counting else _runtime_pkg  # functions priced
        self._template = celfast.program_globals({**_celeval.__dict__, "runtime": package},
                                                 self.slot if counting else None)
        self._threads = threading.local()
        self.base = _Activation(annotations=dict(celpy.googleapis), functions=celfunctions.FUNCTIONS)
        self.lock = threading.RLock()
        self._env: Optional[celpy.Environment] = None
        # One memo for every expression of the process: the bound is the process's, not 32 MiB times
        # the ~500 expressions of a rules generation. Keys: (the expression's token, the activation's
        # fingerprint); an expression of an older generation ages out with its entries.
        self.memo = BoundedMemo(MEMO_ENTRIES, MEMO_BYTES)
        self.memo_lock = threading.Lock()

    def globals(self) -> dict:
        """This thread's copy of the program globals (programs write ``CEL`` and their lambdas there)."""
        found = getattr(self._threads, "globals", None)
        if found is None:
            found = self._threads.globals = dict(self._template)
        return found

    def environment(self) -> celpy.Environment:
        """The cel-python Environment (transpiling runner), built on first use: building it builds
        cel-python's lark parser (~0.3 s), which a start from the compiled-rules cache never needs."""
        with self.lock:
            if self._env is None:
                self._env = celpy.Environment(runner_class=_Runner)
            return self._env

    def run(self, program: _Program, context: Any, budget: Optional[Budget]) -> Any:
        """``program.evaluate(context)`` charging ``budget`` (set in this thread's slot meanwhile;
        None: uncounted)."""
        slot = self.slot
        outer, slot.budget = slot.budget, budget
        try:
            return program.evaluate(context)
        finally:
            slot.budget = outer


_RUNTIME: Optional[CelRuntime] = None
_RUNTIME_LOCK = threading.Lock()


def cel_runtime() -> CelRuntime:
    """The process's :class:`CelRuntime`, created on the first call (importing this module creates
    nothing and changes nothing in cel-python or the interpreter)."""
    global _RUNTIME
    if _RUNTIME is None:
        with _RUNTIME_LOCK:
            if _RUNTIME is None:
                _RUNTIME = CelRuntime()
    return _RUNTIME


def install_runtime(runtime: CelRuntime) -> CelRuntime:
    """Make ``runtime`` the process's :class:`CelRuntime` (before any expression is compiled: a
    program keeps the runtime it was built with). Raises RuntimeError when one is in use already."""
    global _RUNTIME
    with _RUNTIME_LOCK:
        if _RUNTIME is not None and _RUNTIME is not runtime:
            raise RuntimeError("a CEL runtime is in use already: install another before compiling rules")
        _RUNTIME = runtime
    return runtime


def environment() -> celpy.Environment:
    """The process runtime's cel-python Environment (:meth:`CelRuntime.environment`)."""
    return cel_runtime().environment()


class CelCompileError(ValueError):
    """A CEL expression that does not parse; ``line``/``column`` are 1-based within the expression."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        super().__init__(message)
        self.line = line
        self.column = column


@dataclass
class CelExpression:
    """One compiled CEL expression.

    ``source`` is the CEL text; ``where`` names its origin (``file:line field.path``) for error
    messages. Build with :func:`compile_expression`; evaluate with :meth:`evaluate`.
    """

    source: str
    where: str
    _program: Any = field(repr=False, default=None)
    _token: object = field(repr=False, default_factory=object, compare=False)
    # its generation's
    limits: CelRuntimeLimits = field(repr=False, default_factory=lambda: DEFAULT_LIMITS, compare=False)

    def evaluate(self, activation: Mapping[str, Any], memo: bool = True,
                 deadline: Optional[Deadline] = None) -> Any:
        """Evaluate against JSON-shaped variables; returns a JSON-shaped result.

        Raises :class:`CelEvalError` naming ``where`` when evaluation fails, :class:`CelBudgetExceeded`
        (a CelEvalError) when its budget (``limits``, ``deadline``) is spent.
        """
        key = fingerprint(activation) if memo else None  # type-tagged digest; None: not memoisable
        runtime = self._program.runtime
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
        program = self._program
        try:
            runtime = program.runtime
            budget = Budget(self.limits, deadline) if runtime.counting else None
            result = runtime.run(program, cel_activation, budget)
        except CelBudgetExceeded as exc:
            exc.where = self.where
            raise
        except Exception as exc:  # cel-python raises CELEvalError and wraps Python errors
            raise CelEvalError(f"{self.where}: evaluating {self.source!r}: {_describe(exc)}") from exc
        if isinstance(result, _celeval.CELEvalError):
            raise CelEvalError(f"{self.where}: evaluating {self.source!r}: {_describe(result)}")
        return from_cel(result)


def _describe(exc: BaseException) -> str:
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


def transpile(tree: Any) -> Any:
    """The Python code object cel-python's transpiler makes of the parse tree ``tree`` (from
    :func:`runtime.rules.cel.names.parse`); :func:`program_from_code` makes it a program.

    Raises :class:`CelCompileError` when the transpiler rejects a construct.
    """
    runtime = cel_runtime()
    with runtime.lock:
        try:
            return _Runner(runtime.environment(), tree, celfunctions.FUNCTIONS).tp.executable_code
        except Exception as exc:  # transpiler rejects some constructs
            raise CelCompileError(f"CEL program error: {exc}") from exc


def program_from_code(source: str, where: str, code: Any,
                      limits: CelRuntimeLimits = DEFAULT_LIMITS) -> CelExpression:
    """The :class:`CelExpression` of ``source`` whose program runs ``code`` (from :func:`transpile`, or
    the compiled-rules cache); ``where`` names its origin for error messages; ``limits``: its run-time
    budget (rules/cel.yaml ``runtime``; the loader sets its generation's)."""
    return CelExpression(source=source, where=where, _program=_Program(code), limits=limits)


def compile_expression(source: str, where: str = "<expr>") -> CelExpression:
    """Compile ``source`` once, bound to the custom-function table.

    Raises :class:`CelCompileError` with the parser's line and column.
    """
    if not isinstance(source, str) or not source.strip():
        raise CelCompileError("expression must be a non-empty string")
    runtime = cel_runtime()
    with runtime.lock:
        try:
            ast = runtime.environment().compile(source)
        except celpy.CELParseError as exc:
            first = str(exc).splitlines()[0] if str(exc) else "syntax error"
            raise CelCompileError(f"CEL syntax error: {first}", getattr(exc, "line", None),
                                  getattr(exc, "column", None)) from exc
    return program_from_code(source, where, transpile(ast))
