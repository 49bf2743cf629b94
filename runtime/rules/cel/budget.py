"""The run-time budget of one CEL evaluation (docs/rule-authoring.md "Run-time budget").

Every evaluation of a rule expression carries a :class:`Budget`: the limits of its rules generation
(``runtime`` of the ``CelLimits`` document, rules/cel.yaml; Kubernetes' defaults when the file is
absent) and, during an admission review, the review's deadline and cancel event. The program
globals (:func:`runtime.rules.cel.fast.program_globals`) count what the program spends:

- a comprehension (``map``, ``filter``, ``all``, ``exists``, ``exists_one``) costs, per iteration,
  1 plus the calls its body makes directly (each operator, function or macro the body's transpiled
  code calls); its source is read in steps of ``checkEvery`` iterations, charged, and the deadline
  checked at each step, as Kubernetes interrupts comprehensions every 100 iterations; every
  ``checkEvery`` iterations the evaluation also lets the other threads of the process run (it drops
  the interpreter lock for a moment), so a costly review takes its turn with the others' reviews
  instead of holding the lock for the interpreter's whole switch interval (5 ms);
- a string, bytes or list built by ``+`` costs one unit per 10 characters or elements (Kubernetes'
  0.1 per character) and may not be longer than ``maxStringSize`` / ``maxListSize``.

A spent budget raises :class:`~runtime.rules.cel.errors.CelBudgetExceeded` with its ``reason``:
``cost``, ``string-size``, ``list-size``, ``deadline`` or ``nesting`` (an expression nested deeper
than the evaluator's recursion limit). It is an exception cel-python's error values do not absorb
(``true || <error>`` is true; a spent budget is never true), so it ends the evaluation at once.
"""
from __future__ import annotations

import threading
import time
from typing import Optional

from runtime.model.cellimits import CelRuntimeLimits
from runtime.rules.cel.errors import CelBudgetExceeded

_yield = time.sleep  # time.sleep(0) releases the interpreter lock: a thread waiting for it runs

DEFAULT_LIMITS = CelRuntimeLimits()   # Kubernetes' defaults (rules/cel.yaml may set others)


class Deadline:
    """When an admission review must be answered: ``at`` (time.monotonic() seconds; None: none) and
    ``cancel`` (set by the webhook when it answered without waiting); ``seconds`` is the deadline
    named in messages; ``running``: the rule whose expression the review's evaluation runs now (set by
    the engine), what a timeout names."""

    __slots__ = ("at", "cancel", "seconds", "running")

    def __init__(self, seconds: Optional[float] = None, cancel: Optional[threading.Event] = None):
        self.seconds = seconds
        self.at = None if seconds is None else time.monotonic() + seconds
        self.cancel = cancel
        self.running = ""

    def passed(self) -> bool:
        """True once the review was cancelled or its time is up."""
        return (self.cancel is not None and self.cancel.is_set()) or (
            self.at is not None and time.monotonic() >= self.at)


class Budget:
    """What one evaluation may still spend: ``cost`` units spent so far against ``limits``
    (:class:`runtime.model.cellimits.CelRuntimeLimits`), ``iterations`` run, the review's
    :class:`Deadline` (optional). Not shared between threads (one per evaluation)."""

    __slots__ = ("cost", "iterations", "limit", "every", "max_string", "max_list", "deadline", "_unyielded")

    def __init__(self, limits: CelRuntimeLimits = DEFAULT_LIMITS, deadline: Optional[Deadline] = None):
        self.cost = 0.0
        self.iterations = 0
        self.limit = limits.costLimit
        self.every = limits.checkEvery
        self.max_string = limits.maxStringSize
        self.max_list = limits.maxListSize
        self.deadline = deadline
        self._unyielded = 0

    def step(self, iterations: int, cost: float) -> None:
        """Charge ``iterations`` comprehension iterations costing ``cost`` units in all; check the
        cost limit and the deadline; every ``checkEvery`` iterations let other threads run. Raises
        :class:`CelBudgetExceeded`."""
        self.iterations += iterations
        self._spend(iterations, cost)

    def charge(self, cost: float) -> None:
        """Charge one call of a custom function or one ``in`` costing ``cost`` units (its price,
        :meth:`~runtime.rules.cel.library.declare.Function.price`) before it runs; check the cost limit
        and the deadline; every ``checkEvery`` calls let other threads run. Raises
        :class:`CelBudgetExceeded`."""
        self._spend(1, cost)

    def _spend(self, steps: int, cost: float) -> None:
        self.cost += cost
        self._unyielded += steps
        if self._unyielded >= self.every:
            self._unyielded = 0
            _yield(0)
        if self.cost > self.limit:
            raise CelBudgetExceeded("cost", self.limit, "costLimit", self)
        deadline = self.deadline
        if deadline is not None and deadline.passed():
            raise CelBudgetExceeded("deadline", deadline.seconds or 0, "", self)

    def ahead(self, is_list: bool, size: int) -> None:
        """Check, before it is built, that a list (``is_list``) or string of ``size`` elements or
        characters fits ``maxListSize`` / ``maxStringSize``. Raises :class:`CelBudgetExceeded`."""
        if is_list:
            if size > self.max_list:
                raise CelBudgetExceeded("list-size", self.max_list, "maxListSize", self)
        elif size > self.max_string:
            raise CelBudgetExceeded("string-size", self.max_string, "maxStringSize", self)

    def built(self, value) -> None:
        """Charge a string, bytes or list that ``+`` or a custom function built (one unit per 10
        characters or elements) and check its size. Raises :class:`CelBudgetExceeded`."""
        size = len(value)
        self.ahead(isinstance(value, list), size)
        self.cost += size / 10
        if self.cost > self.limit:
            raise CelBudgetExceeded("cost", self.limit, "costLimit", self)


class BudgetSlot(threading.local):
    """The budget of the evaluation running on this thread (None: none running): what the counting
    helpers of :mod:`runtime.rules.cel.fast` charge. One evaluation runs at a time per thread."""

    budget: Optional[Budget] = None
