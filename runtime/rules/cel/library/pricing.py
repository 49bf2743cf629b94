"""Custom functions priced at run time (docs/rule-authoring.md "Run-time budget").

The static checks price a call of a custom function by its declared signature
(:data:`runtime.rules.cel.library.strings.SIGNATURES`, :func:`runtime.rules.cel.budget.call_cost` of its
arguments' worst-case sizes). Here every call made by a program is charged the same price of its
arguments' actual lengths to the budget of the evaluation running on the thread, before it runs, so a
call the budget cannot pay for (a regex over a long text, a sort of a long list) never starts; what it
returns (a string or list) is charged and checked as ``+`` is, and the two functions whose result can
be far longer than their arguments (``flatten``, ``join``) have its length checked before they build it.

Transpiled programs call a custom function by its dotted path (``runtime.rules.cel.library.objects.matches``),
looked up in the globals they run in: :func:`priced_runtime` is the ``runtime`` those globals hold, a
namespace mirroring the package in which every function of the table is its priced wrapper. Nothing
in the modules themselves changes; without a budget on the thread a wrapper calls the function as is.
"""
from __future__ import annotations

import types
from typing import Any, Callable, Optional

import runtime as _runtime_pkg
from runtime.rules.cel.budget import BudgetSlot, call_cost
from runtime.rules.cel.library.strings import FUNCTIONS, SIGNATURES

_SIZED = (str, bytes, list, dict)


def _size(value: Any) -> int:
    """What an argument counts for its price: a string's characters, a list's elements, a map's
    entries; 1 for anything else."""
    return len(value) if isinstance(value, _SIZED) else 1


def _flatten_size(items: Any, *_: Any) -> tuple[bool, int]:
    return True, sum(len(sub) for sub in items if isinstance(sub, _SIZED))


def _join_size(items: Any, sep: Any = "", *_: Any) -> tuple[bool, int]:
    texts = [len(item) for item in items if isinstance(item, str)]
    return False, sum(texts) + len(str(sep)) * max(len(items) - 1, 0)


# function -> the length of what it will build, known from its arguments (list or string, size)
AHEAD: dict[str, Callable[..., tuple[bool, int]]] = {"flatten": _flatten_size, "join": _join_size}


def priced(function: Callable, per_element: Any, slot: BudgetSlot,
           ahead: Optional[Callable[..., tuple[bool, int]]] = None) -> Callable:
    """``function`` charging :func:`~runtime.rules.cel.budget.call_cost` of its arguments (``per_element``:
    its signature's cost per element) to ``slot``'s budget before it runs, checking the length of what it
    will build with ``ahead`` (when given) and charging what it built."""
    def call(*args: Any) -> Any:
        budget = slot.budget
        if budget is None:
            return function(*args)
        budget.charge(call_cost(per_element, [_size(a) for a in args]))
        if ahead is not None:
            budget.ahead(*ahead(*args))
        result = function(*args)
        if isinstance(result, (str, list)):
            budget.built(result)
        return result

    call.__name__ = call.__qualname__ = function.__name__
    call.__doc__ = function.__doc__
    return call


def priced_runtime(slot: BudgetSlot) -> types.SimpleNamespace:
    """The ``runtime`` of the program globals: the package's attributes, and down the dotted path of
    each function of :data:`~runtime.rules.cel.library.strings.FUNCTIONS` a namespace of its module's
    attributes with the function priced (see the module docstring)."""
    root = types.SimpleNamespace(**vars(_runtime_pkg))
    for name, function in FUNCTIONS.items():
        parts = function.__module__.split(".")
        node, real = root, _runtime_pkg
        for part in parts[1:]:
            real = getattr(real, part)
            child = getattr(node, part)
            if not isinstance(child, types.SimpleNamespace):
                child = types.SimpleNamespace(**vars(real))
                setattr(node, part, child)
            node = child
        setattr(node, function.__name__, priced(function, SIGNATURES[name][3], slot, AHEAD.get(name)))
    return root
