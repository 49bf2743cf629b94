"""The CEL state of a process, in one object: :class:`CelRuntime`.

It owns the one parser (cel-python's Environment with the transpiling runner, built on the first parse:
building it builds cel-python's lark parser, ~0.3 s, which a start from the compiled-rules cache never
needs), the globals programs run in (a copy of ``celpy.evaluation``'s with the custom-function table
reachable by its dotted path, priced (:mod:`runtime.rules.cel.library.pricing`), and cel-python 0.5.0's
hot helpers in faster, counting form, :mod:`runtime.rules.cel.fast`), one copy per thread, so
evaluations on different threads share nothing they write and run without a lock; the one base
activation; the process's memo of pure results; the recursion limit; and the budget slot the counting
helpers charge (docs/rule-authoring.md "Run-time budget"). Nothing is written into cel-python's modules.

The process has one, created on first use (:func:`cel_runtime`); the benchmark's uncounted baseline
installs its own first (:func:`install_runtime`).
"""
from __future__ import annotations

import sys
import threading
from typing import Any, Optional

import celpy
import celpy.evaluation as _celeval

import runtime as _runtime_pkg
from runtime.rules.cel import fast
from runtime.rules.cel.activation import Activation, Runner
from runtime.rules.cel.budget import Budget, BudgetSlot
from runtime.rules.cel.library.pricing import priced_runtime
from runtime.rules.cel.library.table import FUNCTIONS
from runtime.rules.memo import MEMO_BYTES, MEMO_ENTRIES, BoundedMemo


class CelRuntime:
    """The CEL state of a process (see the module docstring): the parser and transpiler's Environment
    (:meth:`environment`, :meth:`parse`, under :attr:`lock`), the program globals (one copy per thread,
    :meth:`globals`), the base activation every program starts from (:attr:`base`, read only), the memo
    of pure results (:attr:`memo`, under :attr:`memo_lock`), the budget slot the counting helpers charge
    (:attr:`slot`) and the recursion limit CEL's nesting needs (raised to ``recursion_limit`` when built:
    cel-python's Environment does the same, and a process that only runs cached programs never builds
    one).

    ``counting=False`` runs cel-python's helpers without the budget (no counting, no stop): the
    benchmark's baseline (benchmarks/cel_budget.py), installed with :func:`install_runtime`.

    Build one with :func:`cel_runtime` (the process's); tests may build their own."""

    def __init__(self, recursion_limit: int = 2500, counting: bool = True):
        self.recursion_limit = max(sys.getrecursionlimit(), recursion_limit)
        sys.setrecursionlimit(self.recursion_limit)
        self.counting = counting
        self.slot = BudgetSlot()
        package = priced_runtime(self.slot) if counting else _runtime_pkg  # functions priced
        self._template = fast.program_globals({**_celeval.__dict__, "runtime": package},
                                              self.slot if counting else None)
        self._threads = threading.local()
        self.base = Activation(annotations=dict(celpy.googleapis), functions=FUNCTIONS)
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
        """The cel-python Environment (transpiling runner), built on first use."""
        with self.lock:
            if self._env is None:
                self._env = celpy.Environment(runner_class=Runner)
            return self._env

    def parse(self, source: str) -> Any:
        """The parse tree of ``source`` by the one parser (the tree class the transpiler takes). Raises
        ``celpy.CELParseError`` (and RecursionError on a pathological nesting)."""
        with self.lock:
            return self.environment().compile(source)

    def run(self, program: Any, context: Any, budget: Optional[Budget]) -> Any:
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
