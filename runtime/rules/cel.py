"""CEL backend: compile once at rule load, evaluate many times, convert JSON <-> CEL only at the edge.

Pipeline (cel-python): ``Environment`` -> ``compile`` (parse errors carry line/column) -> ``program``
(bound to the custom-function table) -> ``evaluate(activation)``.

Programs use cel-python's ``CompiledRunner`` (the expression is transpiled to Python once; ~10x faster
than the interpreter). That runner resolves custom functions by their dotted module path inside
``celpy.evaluation``'s globals, so the function table (:mod:`runtime.rules.celfunctions`) is made
reachable there once at import time. The transpiled code also stores the activation in those module
globals while it runs, so evaluation is serialised with a lock: cel-python is not thread-safe.
Its activation resolves every name the program reads through ``typing.cast(Union[...], ...)``, whose
``Union`` subscription costs ~14 us a call (about 15 % of a slice Pod review, issue 16): programs here run
with :class:`_Activation`, the same resolution without it.

An expression is compiled in two steps: its lark tree is transpiled to a Python code object
(:func:`transpile`), and :func:`program_from_code` binds that code object to a fresh activation. The
loader keeps the code objects of a rules directory in its compiled-rules cache
(:mod:`runtime.rules.compiledcache`), so a warm start evaluates the very same code without building
cel-python's lark parser or parsing anything; the parser is built on the first parse, not at import.

Pure expressions are memoised per activation (`CelExpression.evaluate` with ``memo=True``): rule
evaluation has no clock, no I/O and no environment, so equal inputs give equal outputs. The memo is
keyed by type-tagged digests and bounded by entries and bytes (:mod:`runtime.rules.memo`).
"""
from __future__ import annotations

import logging
import re
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping

import celpy
import celpy.evaluation as _celeval

import runtime as _runtime_pkg
from runtime.rules import celfast, celfunctions
from runtime.rules.celvalues import from_cel, to_cel
from runtime.rules.memo import BoundedMemo, fingerprint

_celeval.__dict__.setdefault("runtime", _runtime_pkg)
# Where programs run: celpy.evaluation's globals, with cel-python 0.5.0's hot helpers in faster,
# equal form (runtime.rules.celfast; the stock globals for any other version).
_EVAL_GLOBALS = celfast.program_globals(_celeval.__dict__)
# cel-python logs every evaluation failure at ERROR before raising it; CelEvalError reports it, once.
logging.getLogger("celpy").setLevel(logging.CRITICAL)
_LOCK = threading.RLock()
_MISSING = object()


class _Activation(_celeval.Activation):
    """cel-python's Activation with the name resolution of its ``__getattr__`` (value, else container,
    else annotation; a name not found is a function) minus its per-call ``typing.cast(Union[...])``
    and debug logging; ``clone()`` (one per evaluation) and ``nested_activation()`` (one per macro
    body) keep the class.

    Without a package (the only case here: the environment has none) a name resolves to the innermost
    container of the chain that holds it, which is what cel-python's ``NameContainer.resolve_name``
    finds with package ``None``; it is looked up directly, without building the lists of candidate
    paths and keys (and the debug line formatting them) that ``resolve_name`` makes on every call."""

    def clone(self) -> "_Activation":
        """A copy with its own identifiers (cel-python's ``Activation.clone``)."""
        clone = _Activation.__new__(_Activation)
        clone.identifiers = self.identifiers.clone()
        clone.functions = self.functions.copy()
        clone.package = self.package
        return clone

    def nested_activation(self, annotations: Any = None, vars: Any = None) -> "_Activation":  # noqa: A002
        """cel-python's ``nested_activation`` (a macro's bound variable over this activation), keeping
        the class: without it, every name a ``map``/``filter``/``all``/``exists`` body reads went
        through cel-python's own ``__getattr__`` again. Built directly: a container chained to this
        activation's, holding the bound variable, and this activation's functions (cel-python wraps
        them in one more ``ChainMap`` over the same built-ins, which finds the same functions)."""
        if annotations is not None:
            return _Activation(annotations=annotations, vars=vars, functions=self.functions,
                               package=self.package, based_on=self)
        nested = _Activation.__new__(_Activation)
        nested.identifiers = _container(self.identifiers, vars) if vars else _celeval.NameContainer(
            parent=self.identifiers)
        nested.functions = self.functions
        nested.package = self.package
        return nested

    def __getattr__(self, name: str) -> Any:
        if self.package:
            try:
                referent = self.identifiers.resolve_name(self.package, name)
            except KeyError:
                return self.functions[name]
        else:
            container = self.identifiers
            while container is not None:
                referent = _dict_get(container, name)
                if referent is not None:
                    break
                container = container.parent
            else:
                return self.functions[name]
        if referent._value_set:
            return referent.value
        if referent.container:
            return referent.container
        if referent.annotation:
            return referent.annotation
        raise RuntimeError(f"Corrupt {self!r}")

    get = __getattr__


_dict_get = dict.get
_IDENT = re.compile(_celeval.IDENT + r"\Z")


def _container(parent: Any, values: Mapping[str, Any]) -> Any:
    """A ``NameContainer`` chained to ``parent`` holding ``values`` (plain identifiers), each as a
    ``Referent`` with its value set: what ``NameContainer.load_values`` makes of them, without its
    per-name path regexes."""
    container = _celeval.NameContainer(parent=parent)
    for name, value in values.items():
        if type(name) is not str or not _IDENT.match(name):
            container.load_values({name: value})  # a dotted or odd name: cel-python's own nesting (or error)
            continue
        referent = _celeval.Referent()
        referent._value = value
        referent._value_set = True
        container[name] = referent
    return container


class _Runner(celpy.CompiledRunner):
    """cel-python's transpiling runner, evaluating with :class:`_Activation`."""

    def new_activation(self) -> _Activation:
        """The runner's base activation (the environment's package and annotations, its functions)."""
        return _Activation(package=self.environment.package, annotations=self.environment.annotations,
                           functions=self.functions)


_ENV: celpy.Environment | None = None
# cel-python's Environment raises the recursion limit for CEL's nesting minimums; a process that only
# runs cached programs never builds one, so the limit is raised here, as importing this module always did.
sys.setrecursionlimit(max(sys.getrecursionlimit(), 2500))


def environment() -> celpy.Environment:
    """The one cel-python Environment (transpiling runner), built on first use: building it builds
    cel-python's lark parser (~0.3 s), which a start from the compiled-rules cache never needs."""
    global _ENV
    with _LOCK:
        if _ENV is None:
            _ENV = celpy.Environment(runner_class=_Runner)
        return _ENV


class _Program:
    """A transpiled CEL expression ready to evaluate: cel-python's ``Transpiler`` around a code object,
    without the parse tree it came from. ``evaluate(context)`` is cel-python's own
    ``Transpiler.evaluate`` (the ``CompiledRunner`` interface), so a program built from a cached code
    object and one just transpiled run the same code the same way."""

    __slots__ = ("tp",)

    def __init__(self, code: Any):
        tp = _celeval.Transpiler.__new__(_celeval.Transpiler)
        tp.ast = None
        tp.base_activation = tp.activation = _base_activation()
        tp.executable_code = code
        self.tp = tp

    def evaluate(self, context: Any) -> Any:
        """cel-python's ``Transpiler.evaluate`` (the ``CompiledRunner`` interface): a CEL value, or a
        ``CELEvalError`` raised. The caller holds ``_LOCK`` (the code reads its activation from
        cel-python's module globals).

        The activation is a container of the context's values chained to the base activation's,
        where cel-python clones the base's container and loads the values into the copy: names
        resolve the same way (a value before the base's annotations), without copying the base or
        matching path regexes per name. A context that names something the base holds (``google``)
        goes through cel-python's own clone, where such a name is a container and a value at once.
        The code runs with :func:`runtime.rules.celfast.program_globals` (cel-python's globals, its
        hot helpers in faster equal form), not in cel-python's module."""
        if not context:
            return self.tp.evaluate(context)
        base = self.tp.base_activation
        base_ids = base.identifiers
        for name in context:
            if name in base_ids:
                return self.tp.evaluate(context)
        activation = _Activation.__new__(_Activation)
        activation.identifiers = _container(base_ids, context)
        activation.functions = base.functions
        activation.package = base.package
        evaluation_globals = _EVAL_GLOBALS
        evaluation_globals["base_activation"] = activation
        try:
            exec(self.tp.executable_code, evaluation_globals)
            value = evaluation_globals["CEL"]
            if isinstance(value, _celeval.CELEvalError):
                raise value
            return value
        except Exception as ex:  # cel-python's own wrapping of a Python problem during exec()
            raise _celeval.CELEvalError("evaluation error", type(ex), ex.args)


_BASE: _Activation | None = None


def _base_activation() -> _Activation:
    """The base activation every program starts from: the annotations celpy.Environment() folds in (the
    protobuf well-known type names) and the function table. One for all programs: an evaluation works
    on a clone (``Transpiler.evaluate``), so nothing writes to it once built."""
    global _BASE
    if _BASE is None:
        _BASE = _Activation(annotations=dict(celpy.googleapis), functions=celfunctions.FUNCTIONS)
    return _BASE


class CelCompileError(ValueError):
    """A CEL expression that does not parse; ``line``/``column`` are 1-based within the expression."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        super().__init__(message)
        self.line = line
        self.column = column


class CelEvalError(RuntimeError):
    """A CEL expression failed at evaluation time (missing key, type mismatch, division by zero)."""


_MEMO_ENTRIES = 65536
_MEMO_BYTES = 32 * 1024 * 1024
# One memo for every expression of the process (issue 13 item 2): the bound is the process's, not
# 32 MiB times the ~500 expressions of a rules generation. Keys: (the expression's token, the
# activation's fingerprint); an expression of an older generation ages out with its entries.
_SHARED_MEMO = BoundedMemo(_MEMO_ENTRIES, _MEMO_BYTES)


@dataclass
class CelExpression:
    """One compiled CEL expression.

    ``source`` is the CEL text; ``where`` names its origin (``file:line field.path``) for error
    messages. Build with :func:`compile_expression`; evaluate with :meth:`evaluate`.
    """

    source: str
    where: str
    _program: Any = field(repr=False, default=None)
    _token: object = field(repr=False, default_factory=object, compare=False)

    def evaluate(self, activation: Mapping[str, Any], memo: bool = True) -> Any:
        """Evaluate against JSON-shaped variables; returns a JSON-shaped result.

        Raises :class:`CelEvalError` naming ``where`` when evaluation fails.
        """
        key = fingerprint(activation) if memo else None  # type-tagged digest; None: not memoisable
        if key is not None:
            with _LOCK:
                hit = _SHARED_MEMO.get((self._token, key), _MISSING)
            if hit is not _MISSING:
                return hit
        value = self.evaluate_cel({name: to_cel(value) for name, value in activation.items()})
        if key is not None:
            with _LOCK:
                _SHARED_MEMO.put((self._token, key), value)
        return value

    def evaluate_cel(self, cel_activation: Mapping[str, Any]) -> Any:
        """Evaluate against variables already converted to CEL values (:func:`runtime.rules.celvalues.to_cel`),
        so a caller converts what does not change (params, a review's object) once, not per evaluation.

        Returns a JSON-shaped result; no memo. Raises :class:`CelEvalError` naming ``where``.
        """
        with _LOCK:
            try:
                result = self._program.evaluate(cel_activation)
            except Exception as exc:  # cel-python raises CELEvalError and wraps Python errors
                raise CelEvalError(f"{self.where}: evaluating {self.source!r}: {_describe(exc)}") from exc
        if isinstance(result, _celeval.CELEvalError):
            raise CelEvalError(f"{self.where}: evaluating {self.source!r}: {_describe(result)}")
        return from_cel(result)


def _describe(exc: BaseException) -> str:
    """The innermost cause of a cel-python error: ``('evaluation error', cls, ('unbound function',
    KeyError, ('fnv64',)))`` -> ``unbound function: fnv64``."""
    parts: list[str] = []
    args = getattr(exc, "args", ())
    while args:
        head = args[0]
        if isinstance(head, str) and head not in ("evaluation error",):
            parts.append(head)
        nested = args[-1] if len(args) > 1 else None
        if isinstance(nested, tuple):
            args = nested
        elif isinstance(nested, BaseException):
            args = getattr(nested, "args", ())
        else:
            if isinstance(head, str) and not parts:
                parts.append(head)
            break
    return ": ".join(dict.fromkeys(parts)) or str(exc)


def transpile(tree: Any) -> Any:
    """The Python code object cel-python's transpiler makes of the parse tree ``tree`` (from
    :func:`runtime.rules.celnames.parse`); :func:`program_from_code` makes it a program.

    Raises :class:`CelCompileError` when the transpiler rejects a construct.
    """
    with _LOCK:
        try:
            return _Runner(environment(), tree, celfunctions.FUNCTIONS).tp.executable_code
        except Exception as exc:  # transpiler rejects some constructs
            raise CelCompileError(f"CEL program error: {exc}") from exc


def program_from_code(source: str, where: str, code: Any) -> CelExpression:
    """The :class:`CelExpression` of ``source`` whose program runs ``code`` (from :func:`transpile`, or
    the compiled-rules cache); ``where`` names its origin for error messages."""
    return CelExpression(source=source, where=where, _program=_Program(code))


def compile_expression(source: str, where: str = "<expr>") -> CelExpression:
    """Compile ``source`` once, bound to the custom-function table.

    Raises :class:`CelCompileError` with the parser's line and column.
    """
    if not isinstance(source, str) or not source.strip():
        raise CelCompileError("expression must be a non-empty string")
    with _LOCK:
        try:
            ast = environment().compile(source)
        except celpy.CELParseError as exc:
            first = str(exc).splitlines()[0] if str(exc) else "syntax error"
            raise CelCompileError(f"CEL syntax error: {first}", getattr(exc, "line", None),
                                  getattr(exc, "column", None)) from exc
    return program_from_code(source, where, transpile(ast))
