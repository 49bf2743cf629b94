"""Custom functions priced at run time (docs/rule-authoring.md "Run-time budget").

The static checks price a call of a custom function by its declaration
(:meth:`~runtime.rules.cel.library.declare.Function.price` of its arguments' worst-case sizes). Here
every call made by a program is charged the same price of its arguments' actual lengths to the budget
of the evaluation running on the thread, before it runs, so a call the budget cannot pay for (a regex
over a long text, a sort of a long list) never starts; what it returns (a string or list) is charged and
checked as ``+`` is, and a function whose result can be far longer than its arguments (``flatten``,
``join``: their declared ``ahead``) has its length checked before it builds it.

Transpiled programs call a custom function by its dotted path (``runtime.rules.cel.library.strings.matches``),
looked up in the globals they run in: :func:`priced_runtime` is the ``runtime`` those globals hold, a
namespace mirroring the package in which every function of the table is its priced wrapper. Nothing
in the modules themselves changes; without a budget on the thread a wrapper calls the function as is.
"""
from __future__ import annotations

import types
from typing import Any, Callable

import runtime as _runtime_pkg
from runtime.rules.cel.budget import BudgetSlot
from runtime.rules.cel.library.declare import Function
from runtime.rules.cel.library.table import LIBRARY

_SIZED = (str, bytes, list, dict)


def _size(value: Any) -> int:
    """What an argument counts for its price: a string's characters, a list's elements, a map's
    entries; 1 for anything else."""
    return len(value) if isinstance(value, _SIZED) else 1


def priced(function: Function, slot: BudgetSlot) -> Callable:
    """``function``'s implementation charging its price (:meth:`Function.price` of its arguments'
    lengths) to ``slot``'s budget before it runs, checking the length of what it will build with its
    ``ahead`` (when declared) and charging what it built."""
    implementation, price, ahead = function.implementation, function.price, function.ahead

    def call(*args: Any) -> Any:
        budget = slot.budget
        if budget is None:
            return implementation(*args)
        budget.charge(price([_size(a) for a in args]))
        if ahead is not None:
            budget.ahead(*ahead(*args))
        result = implementation(*args)
        if isinstance(result, (str, list)):
            budget.built(result)
        return result

    call.__name__ = call.__qualname__ = implementation.__name__
    call.__doc__ = implementation.__doc__
    return call


def priced_runtime(slot: BudgetSlot) -> types.SimpleNamespace:
    """The ``runtime`` of the program globals: the package's attributes, and down the dotted path of
    each function of :data:`~runtime.rules.cel.library.table.LIBRARY` a namespace of its module's
    attributes with the function priced (see the module docstring)."""
    root = types.SimpleNamespace(**vars(_runtime_pkg))
    for function in LIBRARY.values():
        implementation = function.implementation
        parts = implementation.__module__.split(".")
        node, real = root, _runtime_pkg
        for part in parts[1:]:
            real = getattr(real, part)
            child = getattr(node, part)
            if not isinstance(child, types.SimpleNamespace):
                child = types.SimpleNamespace(**vars(real))
                setattr(node, part, child)
            node = child
        setattr(node, implementation.__name__, priced(function, slot))
    return root
