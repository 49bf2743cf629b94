"""The one table of custom CEL functions every expression sees (docs/rule-authoring.md "Run-time budget").

:data:`LIBRARY` holds each function's declaration (:class:`~runtime.rules.cel.library.declare.Function`:
implementation, signature, price), collected from the modules that define them; add a function by
declaring it with ``@cel_function`` in one of them. :data:`FUNCTIONS` is the same table as cel-python
takes it (name -> implementation).
"""
from __future__ import annotations

from runtime.rules.cel.library import lists, objects, quantities, strings
from runtime.rules.cel.library.declare import Function, collect

LIBRARY: dict[str, Function] = collect(strings, quantities, lists, objects)
FUNCTIONS = {name: function.implementation for name, function in LIBRARY.items()}
