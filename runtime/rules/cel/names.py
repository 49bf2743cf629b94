"""Static checks of CEL expressions: syntax with line and column, and undeclared names in every branch.

An expression is parsed once (cel-python's lark grammar) and its tree walked; nothing is evaluated,
so a name in a branch no test takes is found too. What an expression may name is a :class:`Names`:

- ``roots``: the free identifiers bound in its activation (``object``, ``params``, ``gKey``...);
- ``members``: for a root whose members are declared (``variables``, ``params``, ``lookups``,
  ``settings``, ``request``), the declared member names, checked on ``root.name`` and
  ``root['name']``;
- ``params``: the policy's params values, so ``settings[params.settingX]`` is resolved and the
  setting name it holds checked against ``settings``;
- functions: cel-python's standard functions and macros plus the custom table
  (:data:`runtime.rules.cel.library.strings.FUNCTIONS`), as calls or as receiver-style methods.

Comprehension variables (``x`` in ``items.map(x, ...)``) are bound inside their macro only.
Source of the rule: docs/rule-authoring.md "What lint checks" (``accelpolicy lint``); the loader runs the same
checks.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Optional

import celpy
import lark
from celpy.evaluation import celstr

from runtime.rules.cel.library.strings import FUNCTIONS

MACROS = frozenset({"map", "filter", "all", "exists", "exists_one"})
STANDARD_FUNCTIONS = frozenset({
    "has", "size", "string", "int", "uint", "double", "bool", "bytes", "list", "map", "type", "dyn",
    "duration", "timestamp", "matches", "contains", "startsWith", "endsWith", "getDate",
    "getDayOfMonth", "getDayOfWeek", "getDayOfYear", "getFullYear", "getHours", "getMilliseconds",
    "getMinutes", "getMonth", "getSeconds", "null_type",
})
# The deepest nesting of sub-expressions (parentheses, ternaries, arguments, macro bodies) an expression
# may have: every walk of the tree (these checks, the types, the transpiler) recurses once per level,
# so a deeper one is a finding, never a RecursionError. cel-go's parser refuses at 250 parser levels;
# the deepest expression of the shipped rules nests 12.
MAX_NESTING = 32
_PARSER_LOCK = threading.Lock()
# built on the first parse: a start from the compiled-rules cache parses nothing
_PARSER: Optional[celpy.Environment] = None


def _parser() -> celpy.Environment:
    """cel-python's parser (shared class-wide, the tree class of runtime.rules.cel.evaluate's transpiler)."""
    global _PARSER
    if _PARSER is None:
        _PARSER = celpy.Environment(runner_class=celpy.CompiledRunner)
    return _PARSER


@dataclass(frozen=True)
class CelSyntaxError:
    """A parse failure: 1-based ``line``/``column`` within the expression and the parser's message."""

    line: int
    column: int
    message: str


@dataclass(frozen=True)
class NameProblem:
    """An undeclared name: 1-based ``line``/``column`` within the expression, and what is wrong."""

    line: int
    column: int
    message: str


@dataclass
class Names:
    """What one expression may name (see the module docstring)."""

    roots: frozenset[str]
    members: dict[str, frozenset[str]] = field(default_factory=dict)
    params: Optional[dict] = None
    functions: frozenset[str] = frozenset(FUNCTIONS) | STANDARD_FUNCTIONS


def _describe(exc: BaseException | None) -> str:
    """lark's exception -> one line: ``unexpected '+' (expected one of: IDENT, LPAR, ...)``."""
    if isinstance(exc, lark.exceptions.UnexpectedToken):
        token = exc.token
        seen = "end of expression" if token.type == "$END" else repr(str(token))
        expected = ", ".join(sorted(exc.expected or ()))
        return f"unexpected {seen}" + (f" (expected one of: {expected})" if expected else "")
    if isinstance(exc, lark.exceptions.UnexpectedCharacters):
        expected = ", ".join(sorted(exc.allowed or ()))
        return f"unexpected character {exc.char!r}" + (f" (expected one of: {expected})" if expected else "")
    if isinstance(exc, lark.exceptions.UnexpectedEOF):
        return "unexpected end of expression"
    return str(exc).splitlines()[0] if exc is not None and str(exc) else "syntax error"


def parse(source: str, memo: Optional[dict] = None) -> "lark.Tree | CelSyntaxError":
    """The parse tree of ``source``, or a :class:`CelSyntaxError` with the parser's line, column, message.

    ``memo`` (source -> result), when given, is read and filled: one load of a rules directory parses
    each distinct expression once for its syntax check, its transpilation and its name checks.
    """
    if memo is not None and source in memo:
        return memo[source]
    if not isinstance(source, str) or not source.strip():
        return CelSyntaxError(1, 1, "expression must be a non-empty string")
    with _PARSER_LOCK:
        try:
            found = _parser().compile(source)
        except celpy.CELParseError as exc:
            line = getattr(exc, "line", None) or 1
            column = getattr(exc, "column", None) or 1
            found = CelSyntaxError(line, column, f"CEL syntax error: {_describe(exc.__context__)}")
        except RecursionError:
            found = CelSyntaxError(1, 1, f"expression nests deeper than {MAX_NESTING} levels")
    if not isinstance(found, CelSyntaxError):
        deep = _too_deep(found)
        if deep is not None:
            token = _first_token(deep)
            found = CelSyntaxError(getattr(token, "line", 1) or 1, getattr(token, "column", 1) or 1,
                                   f"expression nests deeper than {MAX_NESTING} levels (parentheses, "
                                   f"ternaries, arguments): split it into variables")
    if memo is not None:
        memo[source] = found
    return found


def _too_deep(tree: lark.Tree) -> Optional[Any]:
    """The first sub-expression nested deeper than :data:`MAX_NESTING`, walked
    without recursion; None when the tree is shallow enough."""
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if node.data == "expr":
            depth += 1
            if depth > MAX_NESTING:
                return node
        stack.extend((child, depth) for child in node.children if isinstance(child, lark.Tree))
    return None


def _child_trees(node: lark.Tree) -> list[lark.Tree]:
    return [c for c in node.children if isinstance(c, lark.Tree)]


def _bare(node: Any, kind: str) -> Optional[lark.Tree]:
    """The single ``kind`` node at the bottom of a chain of one-child nodes (``expr -> ... -> ident``)."""
    while isinstance(node, lark.Tree):
        if node.data == kind:
            return node
        trees = _child_trees(node)
        if len(node.children) != 1 or len(trees) != 1:
            return None
        node = trees[0]
    return None


def _ident_name(node: Any) -> Optional[lark.Token]:
    found = _bare(node, "ident")
    return found.children[0] if found is not None else None


def _string_literal(node: Any) -> Optional[str]:
    found = _bare(node, "literal")
    if found is None:
        return None
    token = found.children[0]
    if getattr(token, "type", "") not in ("STRING_LIT", "MLSTRING_LIT"):
        return None
    return string_value(token)


def string_value(token: Any) -> Optional[str]:
    """The text a CEL string literal token stands for (escapes expanded, as CEL evaluates it), or None
    when its escapes are malformed.

    CEL's own decoder, not Python's ``ast``: ``ast.literal_eval`` shares the interpreter's AST recursion
    counter between threads, and two threads checking rules at once (the reload thread beside a CLI)
    fail with ``SystemError: AST constructor recursion depth mismatch``."""
    try:
        return str(celstr(token))
    except (ValueError, OverflowError):
        return None


def _listing(names) -> str:
    return ", ".join(sorted(names)) or "none"


class _Walker:
    def __init__(self, names: Names):
        self.names = names
        self.problems: list[NameProblem] = []

    def _problem(self, token: Any, message: str) -> None:
        self.problems.append(NameProblem(getattr(token, "line", 1) or 1, getattr(token, "column", 1) or 1,
                                         message))

    def _member(self, root_tree: Any, token: Any, member: str, bound: frozenset) -> None:
        root = _ident_name(root_tree)
        if root is None or str(root) in bound or str(root) not in self.names.members:
            return
        declared = self.names.members[str(root)]
        if member not in declared:
            self._problem(token, f"{root}.{member} is not declared here (declared: {_listing(declared)})")

    def visit(self, node: Any, bound: frozenset) -> None:
        if not isinstance(node, lark.Tree):
            return
        kind = node.data
        if kind == "ident":
            token = node.children[0]
            if str(token) not in bound and str(token) not in self.names.roots:
                self._problem(token, f"undeclared name {str(token)!r} (names here: "
                                     f"{_listing(self.names.roots | bound)})")
            return
        if kind == "ident_arg":
            token = node.children[0]
            if str(token) not in self.names.functions:
                self._problem(token, f"unknown function {str(token)!r}")
            for child in _child_trees(node):
                self.visit(child, bound)
            return
        if kind == "member_dot_arg":
            receiver, token = node.children[0], node.children[1]
            args = node.children[2].children if len(node.children) > 2 and isinstance(
                node.children[2], lark.Tree) else []
            self.visit(receiver, bound)
            method = str(token)
            if method in MACROS and args and _ident_name(args[0]) is not None:
                inner = bound | {str(_ident_name(args[0]))}
                for arg in args[1:]:
                    self.visit(arg, inner)
                return
            if method not in self.names.functions:
                self._problem(token, f"unknown function {method!r}")
            for arg in args:
                self.visit(arg, bound)
            return
        if kind == "member_dot":
            receiver, token = node.children[0], node.children[1]
            self._member(receiver, token, str(token), bound)
            self.visit(receiver, bound)
            return
        if kind == "member_index":
            receiver, index = node.children[0], node.children[1]
            literal = _string_literal(index)
            root = _ident_name(receiver)
            if literal is not None:
                self._member(receiver, _first_token(index), literal, bound)
            elif root is not None and str(root) == "settings" and "settings" not in bound:
                self._settings_param(index, bound)
            self.visit(receiver, bound)
            self.visit(index, bound)
            return
        for child in _child_trees(node):
            self.visit(child, bound)

    def _settings_param(self, index: Any, bound: frozenset) -> None:
        """``settings[params.X]``: the setting named by params value X must be declared."""
        dot = _bare(index, "member_dot")
        if dot is None or self.names.params is None or "settings" not in self.names.members:
            return
        root = _ident_name(dot.children[0])
        if root is None or str(root) != "params" or "params" in bound:
            return
        key = str(dot.children[1])
        value = self.names.params.get(key)
        declared = self.names.members["settings"]
        if isinstance(value, str) and value not in declared:
            self._problem(dot.children[1], f"params.{key} names setting {value!r}, which is not in the "
                                           f"setting catalog (settings: {_listing(declared)})")


def _first_token(node: Any) -> Any:
    if isinstance(node, lark.Token):
        return node
    if isinstance(node, lark.Tree):
        for child in node.children:
            found = _first_token(child)
            if found is not None:
                return found
    return None


def check_names(tree: lark.Tree, names: Names) -> list[NameProblem]:
    """Every undeclared identifier, member, function and setting of ``tree``, in source order."""
    walker = _Walker(names)
    walker.visit(tree, frozenset())
    return sorted(walker.problems, key=lambda p: (p.line, p.column))


def check(source: str, names: Optional[Names], memo: Optional[dict] = None) -> list[
        "CelSyntaxError | NameProblem"]:
    """Parse ``source`` (through ``memo``, see :func:`parse`) and check its names (``names`` None: syntax
    only)."""
    tree = parse(source, memo)
    if isinstance(tree, CelSyntaxError):
        return [tree]
    return [] if names is None else list(check_names(tree, names))
