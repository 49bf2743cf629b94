"""The compile stage: a parse tree to a program, once at rule load, evaluated many times after.

An expression is compiled in two steps: its parse tree (:func:`runtime.rules.cel.parse.parse`) is
transpiled to a Python code object (:func:`transpile`), and :func:`program_from_code` binds that code
object to the process's runtime as a :class:`~runtime.rules.cel.evaluate.CelExpression`. The loader keeps
the code objects of a rules directory in its compiled-rules cache (:mod:`runtime.rules.compiledcache`),
so a warm start evaluates the very same code without parsing anything (docs/performance.md "Fast to
start, light to hold"); :func:`compile_expression` does both steps for one expression a caller holds (a
PolicyException's condition).
"""
from __future__ import annotations

from typing import Any

from runtime.model.cellimits import CelRuntimeLimits
from runtime.rules.cel.activation import Runner
from runtime.rules.cel.budget import DEFAULT_LIMITS
from runtime.rules.cel.errors import CelCompileError, Finding
from runtime.rules.cel.evaluate import CelExpression, Program
from runtime.rules.cel.library.table import FUNCTIONS
from runtime.rules.cel.parse import parse
from runtime.rules.cel.runtime import cel_runtime


def transpile(tree: Any) -> Any:
    """The Python code object cel-python's transpiler makes of the parse tree ``tree`` (from
    :func:`runtime.rules.cel.parse.parse`); :func:`program_from_code` makes it a program.

    Raises :class:`CelCompileError` when the transpiler rejects a construct.
    """
    runtime = cel_runtime()
    with runtime.lock:
        try:
            return Runner(runtime.environment(), tree, FUNCTIONS).tp.executable_code
        except Exception as exc:  # transpiler rejects some constructs
            raise CelCompileError(f"CEL program error: {exc}") from exc


def program_from_code(source: str, where: str, code: Any,
                      limits: CelRuntimeLimits = DEFAULT_LIMITS) -> CelExpression:
    """The :class:`CelExpression` of ``source`` whose program runs ``code`` (from :func:`transpile`, or
    the compiled-rules cache); ``where`` names its origin for error messages; ``limits``: its run-time
    budget (rules/cel.yaml ``runtime``; the loader sets its generation's)."""
    return CelExpression(source=source, where=where, program=Program(code), limits=limits)


def compile_expression(source: str, where: str = "<expr>") -> CelExpression:
    """Parse and transpile ``source`` once, bound to the custom-function table.

    Raises :class:`CelCompileError` with the parser's line and column (the parse stage's finding: a
    syntax error, an empty source, a nesting over the limit), or when the transpiler refuses it.
    """
    tree = parse(source)
    if isinstance(tree, Finding):
        raise CelCompileError(tree.message, tree.line, tree.column)
    return program_from_code(source, where, transpile(tree))
