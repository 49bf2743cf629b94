"""The check stage: one walk over a parsed expression finds its undeclared names, its type mismatches
and its worst-case cost (docs/rule-authoring.md "What lint checks").

Nothing is evaluated. The :class:`Checker` visits each node of the tree once: it asks
:class:`~runtime.rules.cel.names.Names` whether what the node names is declared, and gives the node a
:class:`~runtime.rules.cel.types.CelType` and a cost by the rules of :mod:`runtime.rules.cel.types`.
A type finding is recorded where an operator or function is applied to types it has no overload for,
where a field or key is read that the value's type does not have, where a regular expression known
before any review is one RE2 refuses (docs/rule-authoring.md "Regular expressions"), and where the
expression's result is not the type its field needs (a validation's ``expression`` a bool).

What a name's type is comes from the caller (a :class:`~runtime.rules.cel.types.Scope`,
:mod:`runtime.rules.checks`): ``object`` from the schema of the matched kind, ``params`` from the rule
files' values, ``variables`` from their own expressions, custom functions from their declarations.

Cost, in the units of Kubernetes' CEL cost model: reading a name, a field or an index, an operator and a
call cost 1; a literal 0; a string or list built by ``+`` costs a tenth of its size more; a comprehension
(``map``, ``filter``, ``all``, ``exists``, ``exists_one``) costs its range plus, for each element the
range can hold, one more than its body; a custom function its declared price of its arguments'
worst-case sizes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

import lark

from runtime.model import regex
from runtime.rules.cel.errors import Finding
from runtime.rules.cel.names import MACROS, Names
from runtime.rules.cel.parse import bare, child_trees, first_token, ident_name, position, string_literal, \
    string_value, text
from runtime.rules.cel.types import BOOL, DOUBLE, DYN, INT, NULL, NUMERIC, SYMBOLS, CelType, Scope, \
    comprehension, custom, dig_type, dyn, element_of, join, operator, sized, standard


@dataclass
class Result:
    """The checker's answer for one expression: its type, its worst-case cost, its name findings and
    its type findings (none at the place of a name finding), each in source order."""

    type: CelType
    cost: float
    names: list[Finding]
    types: list[Finding]

    @property
    def findings(self) -> list[Finding]:
        """The name findings, then the type findings."""
        return self.names + self.types


class Checker:
    """The walk of one expression: :meth:`visit` returns ``(type, cost)`` of a node and records its
    findings in :attr:`named` (names) and :attr:`typed` (types)."""

    def __init__(self, source: str, names: Names, scope: Scope):
        self.source, self.names, self.scope, self.bounds = source, names, scope, scope.bounds
        self.named: list[Finding] = []
        self.typed: list[Finding] = []
        self.in_has = 0

    # --- findings ---------------------------------------------------------------------------------
    def name_problem(self, node: Any, message: Optional[str]) -> None:
        """A name finding at ``node`` when ``message`` (a :class:`Names` answer) is not None."""
        if message is not None:
            self.named.append(Finding(*position(node), message))

    def problem(self, node: Any, message: str) -> None:
        """A type finding at ``node``'s first character."""
        self.typed.append(Finding(*position(node), message))

    def text(self, node: Any) -> str:
        """The source text of ``node``."""
        return text(self.source, node)

    def mismatch(self, node: Any, op: str, types: list[CelType]) -> CelType:
        """Record "no operator for these types" at ``node``; the result is dyn."""
        spelled = ", ".join(t.describe() for t in types)
        self.problem(node, f"type mismatch: no {op!r} for ({spelled}) in {self.text(node)!r}")
        return DYN

    def expect_bool(self, node: Any, got: CelType, what: str) -> None:
        """Record a finding when ``got`` is known and not bool."""
        if got.kind not in ("bool", "dyn"):
            self.problem(node, f"type mismatch: {what} must be bool, {self.text(node)!r} is {got.describe()}")

    # --- the walk ---------------------------------------------------------------------------------
    def visit(self, node: Any, bound: Mapping[str, CelType]) -> tuple[CelType, float]:
        """``(type, cost)`` of ``node`` with the comprehension variables ``bound`` (name -> type)."""
        if not isinstance(node, lark.Tree):
            return DYN, 0
        handler: Optional[Callable] = _HANDLERS.get(node.data)
        if handler is not None:
            return handler(self, node, bound)
        trees = child_trees(node)
        if len(trees) == 1 and len(node.children) == 1:
            return self.visit(trees[0], bound)
        return DYN, sum(self.visit(child, bound)[1] for child in trees)

    def expr(self, node, bound):
        """``a ? b : c``: a bool condition, the join of the branches, the dearer branch."""
        if len(node.children) == 1:
            return self.visit(node.children[0], bound)
        cond, then, other = node.children
        ctype, ccost = self.visit(cond, bound)
        self.expect_bool(cond, ctype, "a condition")
        (ttype, tcost), (otype, ocost) = self.visit(then, bound), self.visit(other, bound)
        return join([ttype, otype]), ccost + max(tcost, ocost)

    def logic(self, node, bound):
        """``a || b``, ``a && b``: bool operands."""
        if len(node.children) == 1:
            return self.visit(node.children[0], bound)
        cost = 1.0
        for operand in node.children:
            otype, ocost = self.visit(operand, bound)
            symbol = "||" if node.data == "conditionalor" else "&&"
            self.expect_bool(operand, otype, f"an operand of {symbol}")
            cost += ocost
        return BOOL, cost

    def binary(self, node, bound):
        """``relation``, ``addition``, ``multiplication``: the operator node holds the left operand."""
        if len(node.children) == 1:
            return self.visit(node.children[0], bound)
        op_node, right = node.children
        (ltype, lcost), (rtype, rcost) = self.visit(op_node.children[0], bound), self.visit(right, bound)
        op = op_node.data.split("_", 1)[1]
        result, own, ok = operator(op, ltype, rtype, self.bounds)
        if not ok:
            self.mismatch(node, SYMBOLS[op], [ltype, rtype])
        return result, lcost + rcost + own

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
            value = string_value(token)
            return CelType("string", size=len(value if value is not None else str(token)), value=value), 0
        return {"INT_LIT": INT, "UINT_LIT": CelType("uint", size=1), "FLOAT_LIT": DOUBLE, "BOOL_LIT": BOOL,
                "NULL_LIT": NULL, "BYTES_LIT": sized("bytes", len(str(token)))}.get(kind, DYN), 0

    def ident(self, node, bound):
        """A name: a comprehension variable, else a root of the scope (undeclared: a name finding)."""
        token = node.children[0]
        name = str(token)
        if name in bound:
            return bound[name], 1
        self.name_problem(token, self.names.undeclared(name, bound))
        return self.scope.roots.get(name, DYN), 1

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
            name = string_literal(key)
            literal = literal and name is not None
            if name is not None:
                fields[name] = vtype
            values.append(vtype)
        if literal and fields:
            return CelType("object", fields=fields, size=len(fields)), cost
        return sized("map", len(values), join(values) if values else DYN), cost

    def member(self, receiver: Any, at: Any, member: str, bound: Mapping[str, CelType]) -> None:
        """The name finding of ``root.member`` / ``root['member']`` at ``at`` (a root not bound)."""
        root = ident_name(receiver)
        if root is not None and str(root) not in bound:
            self.name_problem(at, self.names.undeclared_member(str(root), member))

    def field(self, node, rtype: CelType, key: str, at: Any) -> CelType:
        """The type of field ``key`` of the object ``rtype`` (a finding at ``at`` when it has none,
        but inside ``has()``)."""
        fields = rtype.fields or {}
        if key in fields:
            return fields[key]
        if not self.in_has:
            self.problem(at, f"{self.text(node.children[0])} has no field or key {key!r} (known: "
                             f"{', '.join(sorted(fields)) or 'none'}) in {self.text(node)!r}")
        return DYN

    def member_dot(self, node, bound):
        """``x.f``: the field of an object, the value of a map."""
        receiver, token = node.children[0], node.children[1]
        self.member(receiver, token, str(token), bound)
        rtype, rcost = self.visit(receiver, bound)
        if rtype.kind == "object":
            at = token if isinstance(token, lark.Token) else node
            return self.field(node, rtype, str(token), at), rcost + 1
        if rtype.kind == "map":
            return rtype.elem or DYN, rcost + 1
        if rtype.kind in ("dyn", "null"):
            return dyn(rtype.size), rcost + 1
        self.problem(node, f"type mismatch: {self.text(receiver)!r} is {rtype.describe()}, "
                           f"which has no field {str(token)!r}")
        return DYN, rcost + 1

    def member_index(self, node, bound):
        """``x[i]``: a list's element, a map's value, an object's field when ``i`` is a literal."""
        receiver, index = node.children[0], node.children[1]
        literal, root = string_literal(index), ident_name(receiver)
        if literal is not None:
            self.member(receiver, first_token(index), literal, bound)
        elif root is not None and str(root) == "settings" and "settings" not in bound:
            self.setting_param(index, bound)
        (rtype, rcost), (itype, icost) = self.visit(receiver, bound), self.visit(index, bound)
        cost = rcost + icost + 1
        if rtype.kind == "list":
            if itype.kind not in ("int", "uint", "dyn"):
                return self.mismatch(node, "[]", [rtype, itype]), cost
            return rtype.elem or DYN, cost
        if rtype.kind == "object":
            if literal is not None:
                return self.field(node, rtype, literal, index), cost
            return join(list((rtype.fields or {}).values())) if rtype.fields else DYN, cost
        if rtype.kind == "map":
            return rtype.elem or DYN, cost
        if rtype.kind in ("dyn", "null"):
            return dyn(rtype.size), cost
        return self.mismatch(node, "[]", [rtype, itype]), cost

    def setting_param(self, index: Any, bound: Mapping[str, CelType]) -> None:
        """``settings[params.X]``: the setting named by params value X must be declared."""
        dot = bare(index, "member_dot")
        if dot is None:
            return
        root = ident_name(dot.children[0])
        if root is not None and str(root) == "params" and "params" not in bound:
            self.name_problem(dot.children[1], self.names.unknown_setting(str(dot.children[1])))

    def member_object(self, node, bound):
        return DYN, 1 + sum(self.visit(c, bound)[1] for c in child_trees(node))

    def ident_arg(self, node, bound):
        """``f(a, b)``: a standard or custom function by its signature."""
        token = node.children[0]
        args = node.children[1].children if len(node.children) > 1 and isinstance(
            node.children[1], lark.Tree) else []
        name = str(token)
        self.name_problem(token, self.names.unknown_function(name))
        if name == "has":
            self.in_has += 1
            try:
                found = [self.visit(a, bound) for a in args]
            finally:
                self.in_has -= 1
            return BOOL, 1 + sum(c for _, c in found)
        found = [self.visit(a, bound) for a in args]
        self.pattern(name, args, [t for t, _ in found], 0)
        result = self.call(node, name, None, [t for t, _ in found], sum(c for _, c in found))
        if name == "dig" and len(args) == 3 and found[0][0].kind == "object":   # a literal path: its type
            path = bare(args[1], "list_lit")
            keys = path.children[0].children if path is not None and path.children and isinstance(
                path.children[0], lark.Tree) else []
            typed = dig_type(found[0][0], [string_literal(k) for k in keys], found[2][0])
            return typed or result[0], result[1]
        return result

    def member_dot_arg(self, node, bound):
        """``x.f(a)``: a macro (``map``, ``filter``, ``all``, ``exists``, ``exists_one``) or a method."""
        receiver, token = node.children[0], node.children[1]
        args = node.children[2].children if len(node.children) > 2 and isinstance(
            node.children[2], lark.Tree) else []
        rtype, rcost = self.visit(receiver, bound)
        method = str(token)
        variable = ident_name(args[0]) if args else None
        if method in MACROS and variable is not None:
            if len(args) in (2, 3):
                return self.comprehension(node, method, rtype, rcost, str(variable), args[1:], bound)
            inner = {**bound, str(variable): DYN}   # a macro of another arity: cel-python refuses it
            return DYN, rcost + 1 + sum(self.visit(a, inner)[1] for a in args[1:])
        self.name_problem(token, self.names.unknown_function(method))
        found = [self.visit(a, bound) for a in args]
        self.pattern(method, args, [t for t, _ in found], 1)
        return self.call(node, method, rtype, [t for t, _ in found], rcost + sum(c for _, c in found))

    def comprehension(self, node, macro: str, rtype: CelType, rcost: float, variable: str, body: list,
                      bound: Mapping[str, CelType]) -> tuple[CelType, float]:
        """A macro over a list (its elements) or a map (its keys): range cost + n * (1 + body)."""
        elem = element_of(rtype)
        if elem is None:
            self.problem(node, f"type mismatch: {macro}() needs a list or a map, "
                               f"{self.text(node.children[0])!r} is {rtype.describe()}")
            elem = DYN
        inner = {**bound, variable: elem}
        found = [self.visit(part, inner) for part in body]
        if macro != "map" or len(body) == 2:
            self.expect_bool(body[0], found[0][0], f"the predicate of {macro}()")
        result, iterations = comprehension(macro, rtype, elem, found[-1][0], self.bounds)
        return result, rcost + iterations * (1 + sum(c for _, c in found))

    def call(self, node, name: str, receiver: Optional[CelType], args: list[CelType],
             cost: float) -> tuple[CelType, float]:
        """A function call's type and cost (``cost``: its arguments'): the standard functions, then the
        custom ones of :attr:`Scope.functions` by their declarations."""
        everything = ([receiver] if receiver is not None else []) + args
        known = standard(name, everything, self.bounds)
        if known is not None:
            result, own, wrong = known
            for arg in wrong:
                self.problem(node, f"type mismatch: {name}() of {arg.describe()} in {self.text(node)!r}")
            return result, cost + own
        function = self.scope.functions.get(name)
        if function is None:
            return DYN, cost + 1
        typed = custom(function, everything, self.bounds)
        if typed is None:
            self.problem(node, f"{name}() takes {len(function.params)} argument(s), {self.text(node)!r} "
                               f"passes {len(everything)}")
            return DYN, cost + 1
        result, own, mistyped = typed
        for i, want, got in mistyped:
            self.problem(node, f"type mismatch: argument {i + 1} of {name}() must be {want}, "
                               f"got {got.describe()} in {self.text(node)!r}")
        return result, cost + own

    def pattern(self, name: str, args: list, types: list[CelType], receivers: int) -> None:
        """The regular expression argument of a call of ``name`` (its declaration's ``pattern``; the
        call has ``receivers`` arguments before ``args``), when its text is known before any review (a
        literal, a params value): compiled by RE2 here, a finding when RE2 refuses it; a pattern built
        at run time is compiled when the review runs."""
        function = self.scope.functions.get(name)
        where = None if function is None or function.pattern is None else function.pattern - receivers
        if where is None or not 0 <= where < len(args):
            return
        found = types[where]
        if found.kind != "string" or found.value is None:
            return
        why = regex.problem(found.value)
        if why:
            node = args[where]
            self.problem(node, why if string_literal(node) is not None else f"{self.text(node)}: {why}")


_HANDLERS: dict[str, Callable] = {
    "expr": Checker.expr,
    "conditionalor": Checker.logic,
    "conditionaland": Checker.logic,
    "relation": Checker.binary,
    "addition": Checker.binary,
    "multiplication": Checker.binary,
    "unary": Checker.unary,
    "literal": Checker.literal,
    "ident": Checker.ident,
    "list_lit": Checker.list_lit,
    "map_lit": Checker.map_lit,
    "member_dot": Checker.member_dot,
    "member_index": Checker.member_index,
    "member_object": Checker.member_object,
    "ident_arg": Checker.ident_arg,
    "member_dot_arg": Checker.member_dot_arg,
}


def check(source: str, tree: lark.Tree, names: Names, scope: Optional[Scope] = None,
          expect: Optional[str] = None) -> Result:
    """Names, types and worst-case cost of the parsed expression ``tree`` (of ``source``), in one walk:
    what it may name is ``names``, the types of what it reads ``scope`` (None: names only, no type
    finding; the type and cost then mean nothing); ``expect`` (``bool``, ``string``, ``list``), when
    given, is the type the field needs."""
    checker = Checker(source, names, scope if scope is not None else Scope(roots={}))
    found, cost = checker.visit(tree, {})
    named = sorted(checker.named, key=lambda f: (f.line, f.column))
    if scope is None:
        return Result(found, cost, named, [])
    if expect is not None and found.kind not in (expect, "dyn") \
            and not (expect == "list" and found.kind == "list"):
        checker.problem(tree, f"type mismatch: this field needs a {expect}, {source.strip()!r} is "
                              f"{found.describe()}")
    seen = {(f.line, f.column) for f in named}
    typed = [f for f in checker.typed if (f.line, f.column) not in seen]
    return Result(found, cost, named, sorted(typed, key=lambda f: (f.line, f.column)))
