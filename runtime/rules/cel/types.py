"""The CEL type model of the static checks (:mod:`runtime.rules.cel.check`): :class:`T`, the sizes that
bound values (:class:`Bounds`), the types of rule-file values and of declared signatures, and the
standard functions' types and costs (docs/rule-authoring.md "What lint checks")."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional

INF = math.inf
NUMERIC = frozenset({"int", "uint", "double"})
SIZED = frozenset({"string", "bytes", "list", "map", "object"})


@dataclass(eq=False)
class T:
    """A CEL type: ``kind`` (``dyn``, ``int``, ``uint``, ``double``, ``string``, ``bool``, ``bytes``,
    ``null``, ``list``, ``map``, ``object``, ``type``); ``elem``: a list's element or a map's value;
    ``fields``: an object's fields (reading another is a finding); ``size``: the most characters,
    elements or entries it can hold; ``name``: how findings name the value (``params.labels.keys``);
    ``value``: a string's text when known before any review (a literal, a rule file's value)."""

    kind: str
    elem: Optional["T"] = None
    fields: Optional[Mapping[str, "T"]] = None
    size: float = INF
    name: str = ""
    value: Optional[str] = None

    def describe(self) -> str:
        """The CEL spelling: ``string``, ``list(int)``, ``map(string, dyn)``."""
        if self.kind == "list":
            return f"list({(self.elem or DYN).describe()})"
        if self.kind in ("map", "object"):
            return f"map(string, {(self.elem or DYN).describe()})" if self.kind == "map" else "map"
        return self.kind


DYN = T("dyn")
BOOL = T("bool", size=1)
INT = T("int", size=1)
DOUBLE = T("double", size=1)
NULL = T("null", size=0)


def sized(kind: str, size: float, elem: Optional[T] = None) -> T:
    """A string, list or map type of at most ``size`` characters, elements or entries."""
    return T(kind, elem=elem, size=size)


def dyn(size: float = INF) -> T:
    """A value of unknown type that holds at most ``size`` elements or characters."""
    return T("dyn", size=size)


@dataclass(frozen=True)
class Bounds:
    """Sizes where nothing else bounds a value (no literal, rule-file value or schema bound): ``string``
    characters for a string, ``elements`` elements or entries for a list or map (rules/cel.yaml
    ``static.unboundedStringSize``, ``static.unboundedListSize``)."""

    string: float = 4096.0
    elements: float = 256.0

    def of(self, t: "T") -> float:
        """``t``'s size, this bound where it has none."""
        if t.size != INF:
            return t.size
        return self.string if t.kind in ("string", "bytes", "dyn") else self.elements


@dataclass(frozen=True)
class TypeProblem:
    """One finding: 1-based ``line``/``column`` within the expression, the message (naming the
    sub-expression's text)."""

    line: int
    column: int
    message: str


def join(types: list[T]) -> T:
    """One type for values of any of ``types`` (a ternary's branches, a table's values): the common
    kind with the largest size, else dyn."""
    known = [t for t in types if t.kind not in ("null",)]
    if not known:
        return NULL if types else DYN
    first = known[0]
    size = max((t.size for t in known), default=INF)
    if any(t.kind != first.kind for t in known):
        return dyn(size)
    if first.kind == "object":
        return sized("map", size,
                     join([v for t in known for v in (t.fields or {}).values()]) if size else DYN)
    if first.kind in ("list", "map"):
        return sized(first.kind, size, join([t.elem or DYN for t in known]))
    return T(first.kind, size=size) if first.kind in SIZED else first


def of_value(value: Any, name: str = "") -> T:
    """The type of a rule file's value (params, constants): a mapping is an object whose keys are its
    fields (another key is a finding), a list a list of the join of its elements' types."""
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, int):
        return INT
    if isinstance(value, float):
        return DOUBLE
    if isinstance(value, str):
        return T("string", size=len(value), value=value)
    if isinstance(value, Mapping):
        fields = {str(k): of_value(v, f"{name}.{k}") for k, v in value.items()}
        return T("object", fields=fields, size=len(fields), name=name)
    if isinstance(value, (list, tuple)):
        return sized("list", len(value), join([of_value(v, name) for v in value]) if value else DYN)
    return DYN


def parse_type(text: str, bounds: Bounds) -> T:
    """A signature's type spelling: ``dyn``, ``bool``, ``int``, ``double``, ``string``, ``list``,
    ``map``, ``list<string>`` (a list of strings)."""
    if text.startswith("list<") and text.endswith(">"):
        return sized("list", bounds.elements, parse_type(text[5:-1], bounds))
    if text in ("list", "map"):
        return sized(text, bounds.elements, DYN)
    if text == "string":
        return sized("string", bounds.string)
    return {"dyn": DYN, "bool": BOOL, "int": INT, "double": DOUBLE}[text]


SYMBOLS = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "add": "+", "sub": "-", "mul": "*", "div": "/",
           "mod": "%"}
_CONVERSIONS = {"string": "string", "int": "int", "uint": "uint", "double": "double", "bool": "bool",
                "bytes": "bytes", "type": "type", "duration": "duration", "timestamp": "timestamp"}
_STRING_TESTS = frozenset({"contains", "startsWith", "endsWith"})


def tenth(size: float) -> float:
    """A tenth of ``size``, rounded up (a string or list operation's cost per element)."""
    return math.ceil(size / 10) if size != INF else INF


def standard(checker: Any, node: Any, name: str, args: list[T]) -> Optional[tuple[T, float]]:
    """``(type, own cost)`` of a standard CEL function, or None when ``name`` is not one."""
    bounds = checker.scope.bounds
    if name == "size":
        if args and args[0].kind not in SIZED | {"dyn"}:
            checker.problem(node, f"type mismatch: size() of {args[0].describe()} in {checker.text(node)!r}")
        return INT, 1
    if name in _CONVERSIONS:
        if name == "string":
            source = args[0] if args else DYN
            size = bounds.of(source) if source.kind in ("string", "bytes", "dyn") else 32
            return sized("string", size), 1 if source.kind == "string" else 1 + tenth(size)
        return T(_CONVERSIONS[name], size=1), 1
    if name == "dyn":
        return (args[0] if args else DYN), 1
    if name in _STRING_TESTS:
        for arg in args:
            if arg.kind not in ("string", "dyn"):
                checker.problem(node,
                                f"type mismatch: {name}() of {arg.describe()} in {checker.text(node)!r}")
        return BOOL, 1 + tenth(sum(bounds.of(a) for a in args))
    if name.startswith("get") and name[3:4].isupper():
        return INT, 1
    return None


