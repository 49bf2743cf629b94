"""The globals this project's CEL programs run in: cel-python's, with faster equivalents of a few of
its run-time helpers, for cel-python 0.5.0 only (docs/performance.md "Fast to start, light to hold").

cel-python's transpiled code calls its helpers by their dotted paths (``celpy.celtypes.IntType(3)``,
``celpy.evaluation.bool_eq(a, b)``, ``celpy.evaluation.operator_in(x, xs)``), looked up in the globals
it is executed with. :func:`program_globals` is a copy of ``celpy.evaluation``'s globals in which
the name ``celpy`` is a namespace holding every attribute of the real package, with ``evaluation``
and ``celtypes`` namespaces holding every attribute of the real modules except these:

- ``celtypes.IntType``: for a Python ``int`` (a literal, ``size()``, ``len``), the value in int64 or
  ``ValueError('overflow')``, as ``IntType.__new__`` answers, without the ``functools.wraps`` of
  ``int`` (its whole class dictionary copied into a new function) that ``IntType.__new__`` builds on
  every such call; anything else goes to ``IntType`` itself.
- ``evaluation.bool_lt`` ... ``bool_ne``: ``boolean(operator.lt)(a, b)`` without building the wrapper
  (``functools.wraps``) on each comparison.
- ``evaluation.operator_in``: the same loop without its ``typing.cast(Iterable[Result], ...)``
  (a generic alias subscripted per call) and its debug lines.
- ``evaluation.function_size``: ``size()`` returning the fast ``IntType``, without its debug line.
- ``celtypes.DurationType``: ``duration()`` with a string matched by RE2 first (:func:`duration`):
  cel-python's own pattern backtracks on a string that is no duration.

The same namespaces carry the run-time budget (:mod:`runtime.rules.cel.budget`): the comprehension
macros (``evaluation.macro_map``, ``macro_filter``, ``macro_all``, ``macro_exists``,
``macro_exists_one``) read their source in steps of ``checkEvery`` iterations and charge each step to
the budget of the evaluation running on the thread (:class:`~runtime.rules.cel.budget.BudgetSlot`),
the globals' ``operator`` is a namespace whose ``add`` charges and checks the strings and lists it
builds, and ``evaluation.operator_in`` (CEL ``in``) charges a list's length before it looks. Without a
budget in the slot they are cel-python's own.

Nothing in cel-python is changed: its modules, classes and functions are the ones it ships, for
every other caller and thread. Only code executed with these globals (:mod:`runtime.rules.cel.evaluate`'s
programs, under its lock) reads the namespaces. Values are cel-python's own types, so a result
cannot tell which path made it; tests/engine/test_cel_stock_equivalence.py evaluates every
expression of the rule suites both ways and compares typed values and errors. For another
cel-python version (or none installed as a distribution) :func:`program_globals` is cel-python's
own globals with the real ``celpy`` package: stock behaviour.
"""
from __future__ import annotations

import dis
import operator
import types
from typing import Any, Optional

import celpy
import celpy.celtypes as _celtypes
import celpy.evaluation as _celeval

from runtime.model import regex

PINNED = "0.5.0"  # the cel-python release whose helpers the fast paths below reproduce

_INT = _celtypes.IntType
_BOOL = _celtypes.BoolType
_CELEvalError = _celeval.CELEvalError
_int_new = int.__new__
_MACROS = ("macro_map", "macro_filter", "macro_all", "macro_exists", "macro_exists_one")
_CALLS = frozenset({"CALL", "CALL_FUNCTION_EX"})
_BODY_COSTS: dict = {}   # a comprehension body's code object -> its cost per iteration
_MAX_BODY_COSTS = 65536


def cel_int(source: Any) -> Any:
    """``celtypes.IntType(source)``: a Python ``int`` (exactly; not a bool) in int64 becomes an
    ``IntType`` directly, one outside raises ``ValueError('overflow')`` as ``IntType`` does; any
    other source is ``IntType(source)``."""
    if type(source) is int:
        if -(2 ** 63) <= source < 2 ** 63:
            return _int_new(_INT, source)
        raise ValueError("overflow")
    return _INT(source)


def _compare(function: Any) -> Any:
    """cel-python's ``boolean(function)`` (a comparison whose result becomes a ``BoolType``; an
    error operand is the result; ``NotImplemented`` passes through), built once."""
    def compare(a: Any, b: Any) -> Any:
        if isinstance(a, _CELEvalError):
            return a
        if isinstance(b, _CELEvalError):
            return b
        result_value = function(a, b)
        if result_value == NotImplemented:
            return result_value
        return _BOOL(bool(result_value))

    compare.__name__ = compare.__qualname__ = f"bool_{function.__name__}"
    return compare


def operator_in(item: Any, container: Any) -> Any:
    """cel-python's ``operator_in`` (CEL ``in``: True when an element equals ``item``; a comparison
    that raises TypeError makes the answer that error unless a later element matches)."""
    if isinstance(item, _CELEvalError):
        return item
    if isinstance(container, _CELEvalError):
        return container
    result_value: Any = _BOOL(False)
    for c in container:
        try:
            if c == item:
                return _BOOL(True)
        except TypeError as ex:
            result_value = _CELEvalError("no such overload", ex.__class__, ex.args)
    return result_value


def _counted_in(slot: Any) -> Any:
    """:func:`operator_in` charging the thread's budget, before it looks, one unit plus one per element
    of a list (its price in the static checks: the loop is linear in the list)."""
    def counted_in(item: Any, container: Any) -> Any:
        budget = slot.budget
        if budget is not None and isinstance(container, list):
            budget.charge(1 + len(container))
        return operator_in(item, container)

    counted_in.__name__ = counted_in.__qualname__ = "operator_in"
    return counted_in


# cel-python 0.5.0's own duration pattern (celtypes.DurationType): its Python ``re`` backtracks (a
# 24-character non-duration takes seconds), RE2 answers it in linear time
_DURATION = r"^[-+]?([0-9]*(\.[0-9]*)?[a-z]+)+$"


def duration(value: Any, *args: Any) -> Any:
    """``celtypes.DurationType(value)`` (CEL ``duration()``) with a string first matched by RE2 against
    cel-python's own pattern: one that does not match is cel-python's ``ValueError`` at once, never its
    backtracking (docs/rule-authoring.md "Regular expressions")."""
    if isinstance(value, str) and not regex.search(_DURATION, value):
        raise ValueError(f"Invalid duration {value!r}")
    return _celtypes.DurationType(value, *args)


def function_size(container: Any) -> Any:
    """cel-python's ``function_size`` (``size()``: ``len`` as an ``IntType``; 0 for null)."""
    if container is None:
        return cel_int(0)
    return cel_int(len(container))


def body_cost(code: Any) -> int:
    """The cost of one iteration of a comprehension whose body is ``code`` (a transpiled lambda's
    code object): 1 plus the calls it makes directly (operators, functions, nested macros), counted
    once per code object."""
    cost = _BODY_COSTS.get(code)
    if cost is None:
        if len(_BODY_COSTS) >= _MAX_BODY_COSTS:  # code objects of generations gone: start again
            _BODY_COSTS.clear()
        cost = _BODY_COSTS[code] = 1 + sum(1 for i in dis.get_instructions(code) if i.opname in _CALLS)
    return cost


def _counted(macro: Any, slot: Any) -> Any:
    """cel-python's comprehension ``macro`` reading its source through the thread's budget (see the
    module docstring); cel-python's own when no budget is set."""
    def comprehension(activation: Any, bind_variable: str, cel_expr: Any, cel_gen: Any) -> Any:
        budget = slot.budget
        if budget is None:
            return macro(activation, bind_variable, cel_expr, cel_gen)
        per = body_cost(getattr(cel_expr, "__code__", None))
        every = budget.every

        def source(act: Any) -> Any:
            count = 0
            for value in cel_gen(act):
                if count == every:
                    budget.step(count, count * per)
                    count = 0
                count += 1
                yield value
            budget.step(count, count * per)

        return macro(activation, bind_variable, cel_expr, source)

    comprehension.__name__ = comprehension.__qualname__ = macro.__name__
    return comprehension


def _checked_add(slot: Any) -> Any:
    """``operator.add`` (CEL ``+``) charging the strings, bytes and lists it builds to the thread's
    budget and checking their size."""
    add = operator.add

    def checked_add(a: Any, b: Any) -> Any:
        value = add(a, b)
        if isinstance(value, (str, bytes, list)):
            budget = slot.budget
            if budget is not None:
                budget.built(value)
        return value

    return checked_add


def _installed_version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("cel-python")
    except importlib.metadata.PackageNotFoundError:
        return ""


def program_globals(evaluation_globals: dict, slot: Optional[Any] = None) -> dict:
    """The globals to execute transpiled programs with: a copy of ``evaluation_globals`` (cel-python's
    ``celpy.evaluation`` globals, with whatever the caller added to them) whose ``celpy`` is the
    namespace described in the module docstring when cel-python is :data:`PINNED`; else
    ``evaluation_globals`` itself (stock behaviour, no budget). ``slot``: the
    :class:`~runtime.rules.cel.budget.BudgetSlot` the counting helpers charge (None: no counting)."""
    if _installed_version() != PINNED:
        return evaluation_globals
    evaluation = types.SimpleNamespace(**vars(_celeval))
    evaluation.bool_lt = _compare(operator.lt)
    evaluation.bool_le = _compare(operator.le)
    evaluation.bool_gt = _compare(operator.gt)
    evaluation.bool_ge = _compare(operator.ge)
    evaluation.bool_eq = _compare(operator.eq)
    evaluation.bool_ne = _compare(operator.ne)
    evaluation.operator_in = operator_in
    evaluation.function_size = function_size
    out = dict(evaluation_globals)
    if slot is not None:
        for name in _MACROS:
            setattr(evaluation, name, _counted(getattr(_celeval, name), slot))
        evaluation.operator_in = _counted_in(slot)
        out["operator"] = types.SimpleNamespace(**{**vars(operator), "add": _checked_add(slot)})
    celtypes = types.SimpleNamespace(**vars(_celtypes))
    celtypes.IntType = cel_int
    celtypes.DurationType = duration
    package = types.SimpleNamespace(**vars(celpy))
    package.evaluation = evaluation
    package.celtypes = celtypes
    out["celpy"] = package
    return out
