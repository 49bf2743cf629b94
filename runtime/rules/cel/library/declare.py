"""How a custom CEL function is declared: once, where it is written, with its signature and its price.

``@cel_function(...)`` above a function's ``def`` gives everything the CEL stages know of it (a
:class:`Function`): the checker types a call by ``params``, ``result`` and ``size``
(:mod:`runtime.rules.cel.check`), and both the checker and the run-time budget price it by ``cost``
(:meth:`Function.price`, of the arguments' worst-case sizes at lint and of their lengths at run time:
docs/rule-authoring.md "Run-time budget"). :func:`collect` gathers the declared functions of some
modules into the one table (:mod:`runtime.rules.cel.library.table`).

A type is ``dyn``, ``bool``, ``int``, ``double``, ``string``, ``list``, ``map`` or ``list<T>``; the
result size is ``argN`` (at most argument N's size), a number, or None (sized by the bounds of what
nothing else bounds). The cost is a number per element of the arguments, or ``"regex"`` (Kubernetes'
price of a regex match: a tenth of the text's length times a quarter of the pattern's, each rounded
up; docs/rule-authoring.md "Regular expressions") or ``"sort"`` (n times log2 n of the first
argument's n elements).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, Optional, Sequence, Union

Cost = Union[float, str]


def _ceil(value: float) -> float:
    return value if math.isinf(value) else math.ceil(value)


@dataclass(frozen=True)
class Function:
    """One custom CEL function: its CEL ``name``, the Python ``implementation`` programs call, the
    argument types ``params``, the ``result`` type and its ``size`` rule, the ``cost`` per element of its
    arguments; for a function whose result can be far longer than its arguments, ``ahead``: the
    length of what it will build, ``(is a list, size)``, known from its arguments before it runs; for
    a function that takes a regular expression, ``pattern``: which argument (0-based, a method's
    receiver counted as argument 0), checked by RE2 at lint when its text is known."""

    name: str
    implementation: Callable
    params: tuple[str, ...]
    result: str
    size: Union[int, str, None]
    cost: Cost
    ahead: Optional[Callable[..., tuple[bool, int]]] = None
    pattern: Optional[int] = None

    def price(self, sizes: Sequence[float]) -> float:
        """The price of one call whose arguments hold ``sizes`` characters, elements or entries (1 for
        anything else), the same at lint and at run time: 1, plus ``cost`` times the sum of ``sizes``, or
        the regex or sort price (see the module docstring)."""
        if self.cost == "regex":
            return 1 + _ceil(sizes[0] / 10) * _ceil(sizes[1] / 4)
        if self.cost == "sort":
            n = sizes[0]
            return 1 + (n if math.isinf(n) else n * math.ceil(math.log2(n + 1)))
        return 1 + (self.cost * sum(sizes) if self.cost else 0)


def cel_function(params: tuple[str, ...], result: str, size: Union[int, str, None], cost: Cost,
                 ahead: Optional[Callable[..., tuple[bool, int]]] = None,
                 pattern: Optional[int] = None) -> Callable[[Callable], Callable]:
    """Declare the function below as a custom CEL function of that name (see :class:`Function`); the
    function itself is returned unchanged, so programs call it directly."""
    def declare(implementation: Callable) -> Callable:
        implementation.cel_function = Function(implementation.__name__, implementation, tuple(params), result,
                                               size, cost, ahead, pattern)
        return implementation

    return declare


def collect(*modules: ModuleType) -> dict[str, Function]:
    """Every function declared with :func:`cel_function` in ``modules``, by CEL name, in the order
    written. Raises ValueError when two share a name."""
    table: dict[str, Function] = {}
    for module in modules:
        for value in vars(module).values():
            declared: Any = getattr(value, "cel_function", None)
            if not isinstance(declared, Function) or value.__module__ != module.__name__:
                continue   # not a declared function, or one this module imported
            if declared.name in table:
                raise ValueError(f"two CEL functions named {declared.name!r}: {module.__name__} and "
                                 f"{table[declared.name].implementation.__module__}")
            table[declared.name] = declared
    return table
