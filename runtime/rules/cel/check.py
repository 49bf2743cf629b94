"""Static types and worst-case cost of CEL expressions, over the parse tree of :mod:`runtime.rules.cel.names`.

Nothing is evaluated. Each node of an expression's tree gets a :class:`T` (its CEL type, and the most
elements or characters it can hold) and a cost; a finding (:class:`TypeProblem`) is recorded where an
operator or function is applied to types it has no overload for, where a field or key is read that the
value's type does not have, and where the expression's result is not the type its field needs (a
validation's ``expression`` a bool, a ``messageExpression`` a string). What a name's type is comes
from the caller (:mod:`runtime.rules.checks`): ``object`` from the schema of the matched kind
(:mod:`runtime.rules.schemas`), ``params`` and the label tables from the rule files' values, ``variables``
from their own expressions, custom functions from their declared signatures
(:data:`runtime.rules.cel.library.strings.SIGNATURES`).

Where a type is not known (``dyn``: a ``dig`` result, a map's value of no declared type, a JSON number)
the checker is permissive: anything may be done with it and nothing is reported.

Cost, in the units of Kubernetes' CEL cost model (docs/rule-authoring.md "What lint checks"): reading a
name, a field or an index, an operator and a call cost 1; a literal 0; a string or list built by ``+``
costs a tenth of its size more; a comprehension (``map``, ``filter``, ``all``, ``exists``, ``exists_one``)
costs its range plus, for each element the range can hold, one more than its body; a custom function one
plus what its signature declares per element of its arguments. Sizes come from literals, the rule files'
values, the schema bounds (``maxItems``, ``maxLength``, ``maxProperties``) and, where nothing bounds a
value read from the request, from the webhook's request body cap (:class:`Bounds`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

import lark

from runtime.rules.cel import names as celnames

from runtime.rules.celcalls import PATTERNS, Calls
from runtime.rules.cel.types import (BOOL, DOUBLE, DYN, INF, INT, NULL, NUMERIC, SIZED, SYMBOLS, Bounds, T,
                                   TypeProblem, dyn, join, of_value, parse_type, sized, standard, tenth)

__all__ = ["BOOL", "DYN", "INF", "INT", "Bounds", "Result", "Scope", "T", "TypeProblem", "check", "dyn",
           "of_value", "sized"]

@dataclass
class Scope:
    """What one expression reads: ``roots`` name -> type (``object``, ``params``, ``variables``...),
    ``functions`` name -> signature (see :data:`runtime.rules.cel.library.strings.SIGNATURES`), ``bounds``."""

    roots: dict[str, T]
    functions: Mapping[str, tuple] = field(default_factory=dict)
    bounds: Bounds = field(default_factory=Bounds)


@dataclass
class Result:
    """The checker's answer for one expression: its type, its worst-case cost and its findings."""

    type: T
    cost: float
    problems: list[TypeProblem]


def _tokens(node: Any):
    if isinstance(node, lark.Token):
        yield node
    elif isinstance(node, lark.Tree):
        for child in node.children:
            yield from _tokens(child)


class _Checker(Calls):
    """The walk (one per expression): :meth:`visit` returns ``(type, cost)`` of a node."""

    def __init__(self, source: str, scope: Scope):
        self.source, self.scope = source, scope
        self.problems: list[TypeProblem] = []
        self.in_has = 0

    # --- findings ---------------------------------------------------------------------------------
    def text(self, node: Any) -> str:
        """The source text of ``node``."""
        meta = getattr(node, "meta", None)
        if meta is not None and not getattr(meta, "empty", True):
            return self.source[meta.start_pos:meta.end_pos]
        tokens = list(_tokens(node))
        return self.source[tokens[0].start_pos:tokens[-1].end_pos] if tokens else ""

    def problem(self, node: Any, message: str) -> None:
        """A finding at ``node``'s first character."""
        token = next(_tokens(node), None) if not isinstance(node, lark.Token) else node
        line = getattr(token, "line", 1) or 1
        column = getattr(token, "column", 1) or 1
        self.problems.append(TypeProblem(line, column, message))

    def mismatch(self, node: Any, op: str, types: list[T]) -> T:
        """Record "no operator for these types" at ``node``; the result is dyn."""
        spelled = ", ".join(t.describe() for t in types)
        self.problem(node, f"type mismatch: no {op!r} for ({spelled}) in {self.text(node)!r}")
        return DYN

    # --- the walk ---------------------------------------------------------------------------------
    def visit(self, node: Any, bound: Mapping[str, T]) -> tuple[T, float]:
        """``(type, cost)`` of ``node`` with comprehension variables ``bound``."""
        if not isinstance(node, lark.Tree):
            return DYN, 0
        handler: Optional[Callable] = _HANDLERS.get(node.data)
        trees = [c for c in node.children if isinstance(c, lark.Tree)]
        if handler is None:
            if len(trees) == 1 and len(node.children) == 1:
                return self.visit(trees[0], bound)
            costs = [self.visit(child, bound)[1] for child in trees]
            return DYN, sum(costs)
        return handler(self, node, bound)

    def expr(self, node, bound):
        """``a ? b : c``: a bool condition, the join of the branches, the dearer branch."""
        if len(node.children) == 1:
            return self.visit(node.children[0], bound)
        cond, then, other = node.children
        ctype, ccost = self.visit(cond, bound)
        self.expect_bool(cond, ctype, "a condition")
        (ttype, tcost), (otype, ocost) = self.visit(then, bound), self.visit(other, bound)
        return join([ttype, otype]), ccost + max(tcost, ocost)

    def expect_bool(self, node: Any, got: T, what: str) -> None:
        """Record a finding when ``got`` is known and not bool."""
        if got.kind not in ("bool", "dyn"):
            self.problem(node, f"type mismatch: {what} must be bool, {self.text(node)!r} is {got.describe()}")

    def logic(self, node, bound):
        """``a || b``, ``a && b``: bool operands."""
        if len(node.children) == 1:
            return self.visit(node.children[0], bound)
        cost = 1.0
        for operand in node.children:
            otype, ocost = self.visit(operand, bound)
            self.expect_bool(operand, otype,
                             "an operand of " + ("||" if node.data == "conditionalor" else "&&"))
            cost += ocost
        return BOOL, cost

    def binary(self, node, bound):
        """``relation``, ``addition``, ``multiplication``: the operator node holds the left operand."""
        if len(node.children) == 1:
            return self.visit(node.children[0], bound)
        op_node, right = node.children
        left = op_node.children[0]
        (ltype, lcost), (rtype, rcost) = self.visit(left, bound), self.visit(right, bound)
        op = op_node.data.split("_", 1)[1]
        result, extra = self.operator(node, op, ltype, rtype)
        return result, lcost + rcost + extra

    def operator(self, node, op: str, a: T, b: T) -> tuple[T, float]:
        """The type and own cost of ``a op b``."""
        if op == "in":
            if b.kind not in ("list", "map", "object", "dyn"):
                return self.mismatch(node, "in", [a, b]), 1
            return BOOL, 1 + (self.scope.bounds.of(b) if b.kind == "list" else 1)
        if op in ("eq", "ne"):
            if a.kind != b.kind and "dyn" not in (a.kind, b.kind) and "null" not in (a.kind, b.kind) \
                    and not (a.kind in NUMERIC and b.kind in NUMERIC) \
                    and not {a.kind, b.kind} <= {"map", "object"}:
                self.mismatch(node, "==" if op == "eq" else "!=", [a, b])
            return BOOL, 1 + tenth(
                min(self.scope.bounds.of(a), self.scope.bounds.of(b)) if a.kind == "string" else 0)
        if op in ("lt", "le", "gt", "ge"):
            ok = "dyn" in (a.kind, b.kind) or (a.kind in NUMERIC and b.kind in NUMERIC) or \
                (a.kind == b.kind and a.kind in ("string", "bytes", "bool", "timestamp", "duration"))
            return (BOOL if ok else self.mismatch(node, SYMBOLS[op], [a, b])), 1
        return self.arithmetic(node, op, a, b)

    def arithmetic(self, node, op: str, a: T, b: T) -> tuple[T, float]:
        """``+ - * / %`` of two numbers of one kind, ``+`` of two strings or two lists."""
        bounds = self.scope.bounds
        if "dyn" in (a.kind, b.kind):
            other = b if a.kind == "dyn" else a
            if op == "add" and other.kind in ("string", "list"):
                size = bounds.of(a) + bounds.of(b)
                return T(other.kind, elem=other.elem, size=size), 1 + tenth(size)
            return (dyn(bounds.of(a) + bounds.of(b)) if op == "add" else DYN), 1
        if a.kind == b.kind and a.kind in NUMERIC:
            return T(a.kind, size=1), 1
        if (a.kind, b.kind, op) in _TIME_ARITHMETIC:
            return T(_TIME_ARITHMETIC[(a.kind, b.kind, op)], size=1), 1
        if op == "add" and a.kind == b.kind and a.kind in ("string", "bytes", "list"):
            size = bounds.of(a) + bounds.of(b)
            elem = join([a.elem or DYN, b.elem or DYN]) if a.kind == "list" else None
            return T(a.kind, elem=elem, size=size), 1 + tenth(size)
        return self.mismatch(node, SYMBOLS[op], [a, b]), 1

    def unary(self, node, bound):
        """``!x`` (bool) and ``-x`` (a number)."""
        if len(node.children) == 1:
            return self.visit(node.children[0], bound)
        op, operand = node.children
        otype, ocost = self.visit(operand, bound)
        if op.data == "unary_not":
            self.expect_bool(operand, otype, "the operand of !")
            return BOOL, ocost + 1
        if otype.kind not in NUMERIC and otype.kind != "dyn":
            return self.mismatch(node, "-", [otype]), ocost + 1
        return otype, ocost + 1

    def literal(self, node, bound):
        """A literal's type; a string's size is its length."""
        token = node.children[0]
        kind = token.type
        if kind in ("STRING_LIT", "MLSTRING_LIT"):
            text = celnames.string_value(token)
            return T("string", size=len(text if text is not None else str(token)), value=text), 0
        return {"INT_LIT": INT, "UINT_LIT": T("uint", size=1), "FLOAT_LIT": DOUBLE, "BOOL_LIT": BOOL,
                "NULL_LIT": NULL, "BYTES_LIT": sized("bytes", len(str(token)))}.get(kind, DYN), 0

    def ident(self, node, bound):
        """A name: a comprehension variable, else a root of the scope (unknown names: celnames' finding)."""
        name = str(node.children[0])
        if name in bound:
            return bound[name], 1
        return self.scope.roots.get(name, DYN), 1

    def paren(self, node, bound):
        return self.visit(node.children[0], bound)

    def list_lit(self, node, bound):
        """``[a, b]``: a list of the join of its elements."""
        items = node.children[0].children if node.children and isinstance(node.children[0], lark.Tree) else []
        found = [self.visit(item, bound) for item in items]
        return sized("list", len(items), join([t for t, _ in found]) if found else DYN), 1 + sum(
            c for _, c in found)

    def map_lit(self, node, bound):
        """``{k: v}``: an object of its literal string keys, else a map."""
        inits = node.children[0].children if node.children and isinstance(node.children[0], lark.Tree) else []
        cost, fields, values, literal = 1.0, {}, [], True
        for key, value in zip(inits[0::2], inits[1::2]):
            (_, kcost), (vtype, vcost) = self.visit(key, bound), self.visit(value, bound)
            cost += kcost + vcost
            text = celnames._string_literal(key)
            literal = literal and text is not None
            if text is not None:
                fields[text] = vtype
            values.append(vtype)
        if literal and fields:
            return T("object", fields=fields, size=len(fields)), cost
        return sized("map", len(values), join(values) if values else DYN), cost

    def member_dot(self, node, bound):
        """``x.f``: the field of an object, the value of a map."""
        receiver, token = node.children[0], node.children[1]
        rtype, rcost = self.visit(receiver, bound)
        return self.select(node, rtype, str(token)), rcost + 1

    def select(self, node, rtype: T, key: str) -> T:
        """The type of field or key ``key`` of ``rtype`` (a finding when an object has no such field)."""
        if rtype.kind == "object":
            fields = rtype.fields or {}
            if key in fields:
                return fields[key]
            if not self.in_has:
                what = self.text(node.children[0])
                self.problem(node.children[1] if isinstance(node.children[1], lark.Token) else node,
                             f"{what} has no field or key {key!r} (known: "
                             f"{', '.join(sorted(fields)) or 'none'}) in {self.text(node)!r}")
            return DYN
        if rtype.kind == "map":
            return rtype.elem or DYN
        if rtype.kind in ("dyn", "null"):
            return dyn(rtype.size)
        self.problem(node, f"type mismatch: {self.text(node.children[0])!r} is {rtype.describe()}, "
                           f"which has no field {key!r}")
        return DYN

    def member_index(self, node, bound):
        """``x[i]``: a list's element, a map's value, an object's field when ``i`` is a literal."""
        receiver, index = node.children[0], node.children[1]
        (rtype, rcost), (itype, icost) = self.visit(receiver, bound), self.visit(index, bound)
        cost = rcost + icost + 1
        if rtype.kind == "list":
            if itype.kind not in ("int", "uint", "dyn"):
                return self.mismatch(node, "[]", [rtype, itype]), cost
            return rtype.elem or DYN, cost
        if rtype.kind == "object":
            literal = celnames._string_literal(index)
            if literal is not None:
                return self.select_index(node, rtype, literal), cost
            return join(list((rtype.fields or {}).values())) if rtype.fields else DYN, cost
        if rtype.kind == "map":
            return rtype.elem or DYN, cost
        if rtype.kind in ("dyn", "null"):
            return dyn(rtype.size), cost
        return self.mismatch(node, "[]", [rtype, itype]), cost

    def select_index(self, node, rtype: T, key: str) -> T:
        """``x['key']`` on an object: as ``x.key``."""
        fields = rtype.fields or {}
        if key in fields:
            return fields[key]
        if not self.in_has:
            what = self.text(node.children[0])
            self.problem(node.children[1], f"{what} has no field or key {key!r} (known: "
                                           f"{', '.join(sorted(fields)) or 'none'}) in {self.text(node)!r}")
        return DYN

    def member_object(self, node, bound):
        costs = [self.visit(c, bound)[1] for c in node.children if isinstance(c, lark.Tree)]
        return DYN, 1 + sum(costs)

    def ident_arg(self, node, bound):
        """``f(a, b)``: a standard or custom function by its signature."""
        token = node.children[0]
        args = node.children[1].children if len(node.children) > 1 and isinstance(
            node.children[1], lark.Tree) else []
        name = str(token)
        if name == "has":
            self.in_has += 1
            try:
                found = [self.visit(a, bound) for a in args]
            finally:
                self.in_has -= 1
            return BOOL, 1 + sum(c for _, c in found)
        found = [self.visit(a, bound) for a in args]
        if name in PATTERNS and len(args) > PATTERNS[name]:
            self.pattern(args[PATTERNS[name]], found[PATTERNS[name]][0])
        result = self.call(node, name, None, [t for t, _ in found], sum(c for _, c in found))
        if name == "dig" and len(args) == 3 and found[0][0].kind == "object":
            return self.dig(args[1], found[0][0], found[2][0]) or result[0], result[1]
        return result

    def dig(self, path: Any, value: T, default: T) -> Optional[T]:
        """``dig(x, ['a', 'b'], d)`` with a literal path: the type at that path of ``x`` joined with
        ``d``'s (a key the schema does not have is left to the default: no finding)."""
        items = celnames._bare(path, "list_lit")
        keys = items.children[0].children if items is not None and items.children and \
            isinstance(items.children[0], lark.Tree) else []
        current = value
        for key in keys:
            literal = celnames._string_literal(key)
            if current.kind == "object" and literal in (current.fields or {}):
                current = (current.fields or {})[literal]
            elif current.kind in ("map", "list"):
                current = current.elem or DYN
            else:
                return None
        if default.kind in (current.kind, "null", "dyn") or {current.kind, default.kind} <= {
                "list", "map", "object"}:
            return current
        return dyn(current.size)

    def member_dot_arg(self, node, bound):
        """``x.f(a)``: a macro (``map``, ``filter``, ``all``, ``exists``, ``exists_one``) or a method."""
        receiver, token = node.children[0], node.children[1]
        args = node.children[2].children if len(node.children) > 2 and isinstance(
            node.children[2], lark.Tree) else []
        rtype, rcost = self.visit(receiver, bound)
        method = str(token)
        variable = celnames._ident_name(args[0]) if args else None
        if method in celnames.MACROS and variable is not None and len(args) in (2, 3):
            return self.comprehension(node, method, rtype, rcost, str(variable), args[1:], bound)
        found = [self.visit(a, bound) for a in args]
        if method in PATTERNS and len(args) >= PATTERNS[method]:
            self.pattern(args[PATTERNS[method] - 1], found[PATTERNS[method] - 1][0])
        return self.call(node, method, rtype, [t for t, _ in found], rcost + sum(c for _, c in found))



_TIME_ARITHMETIC = {  # CEL's overloads of + and - on timestamps and durations: (left, right, op) -> result
    ("timestamp", "duration", "add"): "timestamp", ("duration", "timestamp", "add"): "timestamp",
    ("timestamp", "duration", "sub"): "timestamp", ("timestamp", "timestamp", "sub"): "duration",
    ("duration", "duration", "add"): "duration", ("duration", "duration", "sub"): "duration"}

_HANDLERS: dict[str, Callable] = {
    "expr": _Checker.expr,
    "conditionalor": _Checker.logic,
    "conditionaland": _Checker.logic,
    "relation": _Checker.binary,
    "addition": _Checker.binary,
    "multiplication": _Checker.binary,
    "unary": _Checker.unary,
    "literal": _Checker.literal,
    "ident": _Checker.ident,
    "paren_expr": _Checker.paren,
    "list_lit": _Checker.list_lit,
    "map_lit": _Checker.map_lit,
    "member_dot": _Checker.member_dot,
    "member_index": _Checker.member_index,
    "member_object": _Checker.member_object,
    "ident_arg": _Checker.ident_arg,
    "member_dot_arg": _Checker.member_dot_arg,
}


def check(source: str, tree: lark.Tree, scope: Scope, expect: Optional[str] = None) -> Result:
    """Type and cost of the parsed expression ``tree`` (of ``source``) in ``scope``; ``expect``
    (``bool``, ``string``, ``list``), when given, is the type the field needs."""
    checker = _Checker(source, scope)
    found, cost = checker.visit(tree, {})
    if expect is not None and found.kind not in (expect, "dyn") \
            and not (expect == "list" and found.kind == "list"):
        checker.problem(tree, f"type mismatch: this field needs a {expect}, {source.strip()!r} is "
                              f"{found.describe()}")
    return Result(found, cost, sorted(checker.problems, key=lambda p: (p.line, p.column)))
