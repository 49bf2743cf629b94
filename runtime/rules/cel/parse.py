"""The parse stage: a CEL source to its parse tree, or a :class:`~runtime.rules.cel.errors.Finding` with
the parser's line, column and message (docs/rule-authoring.md "What lint checks").

One parser serves the whole process: the runtime's (:meth:`runtime.rules.cel.runtime.CelRuntime.parse`,
cel-python's lark grammar), whose trees the transpiler takes. A tree this stage returns nests no deeper
than :data:`MAX_NESTING`: every later walk (the checker, the transpiler) recurses once per level, so a
deeper expression is a finding here, never a RecursionError there.

The readers below (:func:`bare`, :func:`ident_name`, :func:`string_literal`, :func:`first_token`,
:func:`text`) are how the later stages read a tree.
"""
from __future__ import annotations

from typing import Any, Iterator, Optional

import celpy
import lark
from celpy.evaluation import celstr

from runtime.rules.cel.errors import Finding
from runtime.rules.cel.runtime import cel_runtime

# The deepest nesting of sub-expressions (parentheses, ternaries, arguments, macro bodies) an expression
# may have. cel-go's parser refuses at 250 parser levels; the deepest expression of the shipped rules
# nests 12.
MAX_NESTING = 32


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


def parse(source: str, memo: Optional[dict] = None) -> "lark.Tree | Finding":
    """The parse tree of ``source``, or a :class:`Finding` with the parser's line, column and message.

    ``memo`` (source -> result), when given, is read and filled: one load of a rules directory parses
    each distinct expression once for its transpilation and its checks.
    """
    if memo is not None and source in memo:
        return memo[source]
    if not isinstance(source, str) or not source.strip():
        return Finding(1, 1, "expression must be a non-empty string")
    try:
        found = cel_runtime().parse(source)
    except celpy.CELParseError as exc:
        line = getattr(exc, "line", None) or 1
        column = getattr(exc, "column", None) or 1
        found = Finding(line, column, f"CEL syntax error: {_describe(exc.__context__)}")
    except RecursionError:
        found = Finding(1, 1, f"expression nests deeper than {MAX_NESTING} levels")
    if not isinstance(found, Finding):
        deep = _too_deep(found)
        if deep is not None:
            line, column = position(deep)
            found = Finding(line, column, f"expression nests deeper than {MAX_NESTING} levels (parentheses, "
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


def child_trees(node: lark.Tree) -> list[lark.Tree]:
    """The children of ``node`` that are trees (not tokens)."""
    return [c for c in node.children if isinstance(c, lark.Tree)]


def bare(node: Any, kind: str) -> Optional[lark.Tree]:
    """The single ``kind`` node at the bottom of a chain of one-child nodes (``expr -> ... -> ident``)."""
    while isinstance(node, lark.Tree):
        if node.data == kind:
            return node
        trees = child_trees(node)
        if len(node.children) != 1 or len(trees) != 1:
            return None
        node = trees[0]
    return None


def ident_name(node: Any) -> Optional[lark.Token]:
    """The identifier ``node`` is, bare (``x``, not ``x.y`` or ``f(x)``); None otherwise."""
    found = bare(node, "ident")
    return found.children[0] if found is not None else None


def string_literal(node: Any) -> Optional[str]:
    """The text of the string literal ``node`` is, bare; None otherwise."""
    found = bare(node, "literal")
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


def tokens(node: Any) -> Iterator[lark.Token]:
    """The tokens of ``node``, in source order."""
    if isinstance(node, lark.Token):
        yield node
    elif isinstance(node, lark.Tree):
        for child in node.children:
            yield from tokens(child)


def first_token(node: Any) -> Optional[lark.Token]:
    """The first token of ``node`` (``node`` itself when it is one); None for an empty tree."""
    return next(tokens(node), None)


def position(node: Any) -> tuple[int, int]:
    """1-based ``(line, column)`` of ``node``'s first character within its expression."""
    token = first_token(node)
    return (getattr(token, "line", 1) or 1), (getattr(token, "column", 1) or 1)


def text(source: str, node: Any) -> str:
    """The text of ``node`` in ``source``."""
    meta = getattr(node, "meta", None)
    if meta is not None and not getattr(meta, "empty", True):
        return source[meta.start_pos:meta.end_pos]
    found = list(tokens(node))
    return source[found[0].start_pos:found[-1].end_pos] if found else ""
