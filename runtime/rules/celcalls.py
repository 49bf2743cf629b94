"""Comprehensions and function calls of the CEL type checker (:mod:`runtime.rules.cel.check`): their
types by the standard functions' and the declared signatures
(:data:`runtime.rules.cel.library.strings.SIGNATURES`), their worst-case cost (docs/rule-authoring.md
"What lint checks")."""
from __future__ import annotations

from typing import Any, Mapping, Optional

from runtime.model import regex
from runtime.rules.cel import names as celnames

from runtime.rules.cel.budget import call_cost
from runtime.rules.cel.types import BOOL, DYN, INF, SIZED, T, dyn, parse_type, sized, standard


# function name -> the argument that is a regular expression (0-based, the receiver of a method call
# counted as argument 0): CEL's ``matches(text, pattern)`` and ``text.matches(pattern)``
PATTERNS = {"matches": 1}


class Calls:
    """The methods of the checker for macros and calls (the checker supplies ``visit``, ``problem``,
    ``text``, ``expect_bool`` and ``scope``)."""

    def comprehension(self, node, macro: str, rtype: T, rcost: float, variable: str, body: list,
                      bound: Mapping[str, T]):
        """A macro over a list (its elements) or a map (its keys): range cost + n * (1 + body)."""
        if rtype.kind == "list":
            elem = rtype.elem or DYN
        elif rtype.kind in ("map", "object"):
            elem = sized("string", INF)
        elif rtype.kind == "dyn":
            elem = DYN
        else:
            self.problem(node, f"type mismatch: {macro}() needs a list or a map, "
                               f"{self.text(node.children[0])!r} is {rtype.describe()}")
            elem = DYN
        inner = {**bound, variable: elem}
        found = [self.visit(part, inner) for part in body]
        if macro != "map" or len(body) == 2:
            self.expect_bool(body[0], found[0][0], f"the predicate of {macro}()")
        size = rtype.size if rtype.size != INF else self.scope.bounds.elements
        if rtype.kind in ("map", "object") and rtype.size == INF:
            size = self.scope.bounds.elements
        cost = rcost + size * (1 + sum(c for _, c in found))
        if macro == "map":
            return sized("list", size, found[-1][0]), cost
        if macro == "filter":
            return sized("list", size, elem), cost
        return BOOL, cost

    def call(self, node, name: str, receiver: Optional[T], args: list[T], cost: float) -> tuple[T, float]:
        """A function call's type and cost: the standard functions, then :attr:`Scope.functions`."""
        everything = ([receiver] if receiver is not None else []) + args
        known = standard(self, node, name, everything)
        if known is not None:
            return known[0], cost + known[1]
        signature = self.scope.functions.get(name)
        if signature is None:
            return DYN, cost + 1
        return self.custom(node, name, signature, everything, cost)

    def custom(self, node, name: str, signature: tuple, args: list[T], cost: float) -> tuple[T, float]:
        """A custom function by its declared ``(arguments, result, result size, cost per element)``; its
        cost :func:`runtime.rules.cel.budget.call_cost` of its arguments' sizes."""
        params, result, size_rule, per_element = signature
        bounds = self.scope.bounds
        if len(params) != len(args):
            self.problem(node,
                         f"{name}() takes {len(params)} argument(s), {self.text(node)!r} passes {len(args)}")
            return DYN, cost + 1
        for i, (want, got) in enumerate(zip(params, args)):
            wanted = parse_type(want, bounds)
            if wanted.kind != "dyn" and got.kind not in ("dyn", wanted.kind) \
                    and not (wanted.kind == "map" and got.kind == "object"):
                self.problem(node, f"type mismatch: argument {i + 1} of {name}() must be {want}, "
                                   f"got {got.describe()} in {self.text(node)!r}")
        out = parse_type(result, bounds)
        sizes = [bounds.of(a) if a.kind in SIZED or a.kind == "dyn" else 1 for a in args]
        if isinstance(size_rule, str) and size_rule.startswith("arg"):
            out = T(out.kind, elem=out.elem, size=min(sizes[int(size_rule[3:])], out.size))
        elif isinstance(size_rule, (int, float)):
            out = T(out.kind, elem=out.elem, size=size_rule)
        return out, cost + call_cost(per_element, sizes)

    def pattern(self, node, found: T) -> None:
        """A regex argument whose text is known before any review (a literal, a params value):
        compiled by RE2 here, a finding when RE2 refuses it (docs/rule-authoring.md "Regular
        expressions"); a pattern built at run time is compiled when the review runs."""
        if found.kind != "string" or found.value is None:
            return
        why = regex.problem(found.value)
        if why:
            literal = celnames._string_literal(node) is not None
            self.problem(node, why if literal else f"{self.text(node)}: {why}")
