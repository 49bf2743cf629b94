"""The types stage: the CEL type model of the checker (:mod:`runtime.rules.cel.check`) and the typing
rules it applies, with the cost of each construct in the units of Kubernetes' CEL cost model
(docs/rule-authoring.md "What lint checks").

A :class:`CelType` is a CEL type and the most elements or characters a value of it can hold; sizes come
from literals, the rule files' values (:func:`of_value`), the schema bounds and, where nothing bounds a
value, :class:`Bounds`. Where a type is not known (``dyn``: a ``dig`` result, a map's value of no
declared type, a JSON number) the rules are permissive: anything may be done with it.

The rules answer what the checker asks of one construct given the types of its parts: an operator
(:func:`operator`), a standard function (:func:`standard`), a custom function by its declaration
(:func:`custom`), a comprehension's range (:func:`element_of`) and result (:func:`comprehension`). An
answer that has no overload says so; the checker words the finding, at the construct's text.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from runtime.rules.cel.library.declare import Function

INF = math.inf
NUMERIC = frozenset({"int", "uint", "double"})
SIZED = frozenset({"string", "bytes", "list", "map", "object"})


@dataclass(eq=False)
class CelType:
    """A CEL type: ``kind`` (``dyn``, ``int``, ``uint``, ``double``, ``string``, ``bool``, ``bytes``,
    ``null``, ``list``, ``map``, ``object``, ``type``); ``elem``: a list's element or a map's value;
    ``fields``: an object's fields (reading another is a finding); ``size``: the most characters,
    elements or entries it can hold; ``name``: how findings name the value (``params.labels.keys``);
    ``value``: a string's text when known before any review (a literal, a rule file's value)."""

    kind: str
    elem: Optional["CelType"] = None
    fields: Optional[Mapping[str, "CelType"]] = None
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


DYN = CelType("dyn")
BOOL = CelType("bool", size=1)
INT = CelType("int", size=1)
DOUBLE = CelType("double", size=1)
NULL = CelType("null", size=0)


def sized(kind: str, size: float, elem: Optional[CelType] = None) -> CelType:
    """A string, list or map type of at most ``size`` characters, elements or entries."""
    return CelType(kind, elem=elem, size=size)


def dyn(size: float = INF) -> CelType:
    """A value of unknown type that holds at most ``size`` elements or characters."""
    return CelType("dyn", size=size)


@dataclass(frozen=True)
class Bounds:
    """Sizes where nothing else bounds a value (no literal, rule-file value or schema bound): ``string``
    characters for a string, ``elements`` elements or entries for a list or map (rules/cel.yaml
    ``static.unboundedStringSize``, ``static.unboundedListSize``)."""

    string: float = 4096.0
    elements: float = 256.0

    def of(self, t: "CelType") -> float:
        """``t``'s size, this bound where it has none."""
        if t.size != INF:
            return t.size
        return self.string if t.kind in ("string", "bytes", "dyn") else self.elements


@dataclass
class Scope:
    """The types of what one expression reads: ``roots`` name -> type (``object``, ``params``,
    ``variables``...), ``functions`` name -> declaration (the custom functions), ``bounds``."""

    roots: dict[str, CelType]
    functions: Mapping[str, Function] = field(default_factory=dict)
    bounds: Bounds = field(default_factory=Bounds)


def join(types: list[CelType]) -> CelType:
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
    return CelType(first.kind, size=size) if first.kind in SIZED else first


def of_value(value: Any, name: str = "") -> CelType:
    """The type of a rule file's value (params, constants): a mapping is an object whose keys are its
    fields (another key is a finding), a list a list of the join of its elements' types."""
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, int):
        return INT
    if isinstance(value, float):
        return DOUBLE
    if isinstance(value, str):
        return CelType("string", size=len(value), value=value)
    if isinstance(value, Mapping):
        fields = {str(k): of_value(v, f"{name}.{k}") for k, v in value.items()}
        return CelType("object", fields=fields, size=len(fields), name=name)
    if isinstance(value, (list, tuple)):
        return sized("list", len(value), join([of_value(v, name) for v in value]) if value else DYN)
    return DYN


def parse_type(text: str, bounds: Bounds) -> CelType:
    """A signature's type spelling: ``dyn``, ``bool``, ``int``, ``double``, ``string``, ``list``,
    ``map``, ``list<string>`` (a list of strings)."""
    if text.startswith("list<") and text.endswith(">"):
        return sized("list", bounds.elements, parse_type(text[5:-1], bounds))
    if text in ("list", "map"):
        return sized(text, bounds.elements, DYN)
    if text == "string":
        return sized("string", bounds.string)
    return {"dyn": DYN, "bool": BOOL, "int": INT, "double": DOUBLE}[text]


# the operators' spellings in findings
SYMBOLS = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "add": "+", "sub": "-", "mul": "*", "div": "/",
           "mod": "%", "eq": "==", "ne": "!=", "in": "in"}
_CONVERSIONS = {"string": "string", "int": "int", "uint": "uint", "double": "double", "bool": "bool",
                "bytes": "bytes", "type": "type", "duration": "duration", "timestamp": "timestamp"}
_STRING_TESTS = frozenset({"contains", "startsWith", "endsWith"})
_ORDERED = frozenset({"string", "bytes", "bool", "timestamp", "duration"})
_TIME_ARITHMETIC = {  # CEL's overloads of + and - on timestamps and durations: (left, right, op) -> result
    ("timestamp", "duration", "add"): "timestamp", ("duration", "timestamp", "add"): "timestamp",
    ("timestamp", "duration", "sub"): "timestamp", ("timestamp", "timestamp", "sub"): "duration",
    ("duration", "duration", "add"): "duration", ("duration", "duration", "sub"): "duration"}


def tenth(size: float) -> float:
    """A tenth of ``size``, rounded up (a string or list operation's cost per element)."""
    return math.ceil(size / 10) if size != INF else INF


def operator(op: str, a: CelType, b: CelType, bounds: Bounds) -> tuple[CelType, float, bool]:
    """``(type, own cost, has an overload)`` of ``a op b`` (``op``: ``in``, ``eq``, ``lt``, ``add``...,
    spelled in :data:`SYMBOLS`): a comparison is a bool whatever its operands; any other operator
    without an overload for these types is dyn."""
    if op == "in":
        if b.kind not in ("list", "map", "object", "dyn"):
            return DYN, 1, False
        return BOOL, 1 + (bounds.of(b) if b.kind == "list" else 1), True
    if op in ("eq", "ne"):
        ok = a.kind == b.kind or "dyn" in (a.kind, b.kind) or "null" in (a.kind, b.kind) \
            or (a.kind in NUMERIC and b.kind in NUMERIC) or {a.kind, b.kind} <= {"map", "object"}
        return BOOL, 1 + tenth(min(bounds.of(a), bounds.of(b)) if a.kind == "string" else 0), ok
    if op in ("lt", "le", "gt", "ge"):
        ok = "dyn" in (a.kind, b.kind) or (a.kind in NUMERIC and b.kind in NUMERIC) or \
            (a.kind == b.kind and a.kind in _ORDERED)
        return (BOOL if ok else DYN), 1, ok
    return _arithmetic(op, a, b, bounds)


def _arithmetic(op: str, a: CelType, b: CelType, bounds: Bounds) -> tuple[CelType, float, bool]:
    """``+ - * / %`` of two numbers of one kind, ``+`` of two strings or two lists, time arithmetic."""
    if "dyn" in (a.kind, b.kind):
        other = b if a.kind == "dyn" else a
        if op == "add" and other.kind in ("string", "list"):
            size = bounds.of(a) + bounds.of(b)
            return CelType(other.kind, elem=other.elem, size=size), 1 + tenth(size), True
        return (dyn(bounds.of(a) + bounds.of(b)) if op == "add" else DYN), 1, True
    if a.kind == b.kind and a.kind in NUMERIC:
        return CelType(a.kind, size=1), 1, True
    if (a.kind, b.kind, op) in _TIME_ARITHMETIC:
        return CelType(_TIME_ARITHMETIC[(a.kind, b.kind, op)], size=1), 1, True
    if op == "add" and a.kind == b.kind and a.kind in ("string", "bytes", "list"):
        size = bounds.of(a) + bounds.of(b)
        elem = join([a.elem or DYN, b.elem or DYN]) if a.kind == "list" else None
        return CelType(a.kind, elem=elem, size=size), 1 + tenth(size), True
    return DYN, 1, False


def standard(name: str, args: list[CelType],
             bounds: Bounds) -> Optional[tuple[CelType, float, list[CelType]]]:
    """``(type, own cost, the arguments of a type it has no overload for)`` of a call of the standard
    function ``name`` (a method's receiver is its first argument), or None when ``name`` is not one."""
    if name == "size":
        wrong = [args[0]] if args and args[0].kind not in SIZED | {"dyn"} else []
        return INT, 1, wrong
    if name in _CONVERSIONS:
        if name == "string":
            source = args[0] if args else DYN
            size = bounds.of(source) if source.kind in ("string", "bytes", "dyn") else 32
            return sized("string", size), 1 if source.kind == "string" else 1 + tenth(size), []
        return CelType(_CONVERSIONS[name], size=1), 1, []
    if name == "dyn":
        return (args[0] if args else DYN), 1, []
    if name in _STRING_TESTS:
        wrong = [arg for arg in args if arg.kind not in ("string", "dyn")]
        return BOOL, 1 + tenth(sum(bounds.of(a) for a in args)), wrong
    if name.startswith("get") and name[3:4].isupper():
        return INT, 1, []
    return None


def custom(function: Function, args: list[CelType],
           bounds: Bounds) -> Optional[tuple[CelType, float, list[tuple[int, str, CelType]]]]:
    """``(type, own cost, the arguments of the wrong type: (index, the type declared, the type given))``
    of a call of the custom ``function`` by its declaration (a method's receiver is its first argument);
    None when it is given another number of arguments than it takes. Its cost is its price of its
    arguments' worst-case sizes (:meth:`~runtime.rules.cel.library.declare.Function.price`)."""
    if len(function.params) != len(args):
        return None
    wrong = []
    for i, (want, got) in enumerate(zip(function.params, args)):
        wanted = parse_type(want, bounds)
        if wanted.kind != "dyn" and got.kind not in ("dyn", wanted.kind) \
                and not (wanted.kind == "map" and got.kind == "object"):
            wrong.append((i, want, got))
    out = parse_type(function.result, bounds)
    sizes = [bounds.of(a) if a.kind in SIZED or a.kind == "dyn" else 1 for a in args]
    if isinstance(function.size, str) and function.size.startswith("arg"):
        out = CelType(out.kind, elem=out.elem, size=min(sizes[int(function.size[3:])], out.size))
    elif isinstance(function.size, (int, float)):
        out = CelType(out.kind, elem=out.elem, size=function.size)
    return out, function.price(sizes), wrong


def element_of(range_type: CelType) -> Optional[CelType]:
    """The type of a comprehension's variable over ``range_type`` (a list's elements, a map's keys);
    None when it is neither a list nor a map."""
    if range_type.kind == "list":
        return range_type.elem or DYN
    if range_type.kind in ("map", "object"):
        return sized("string", INF)
    return DYN if range_type.kind == "dyn" else None


def comprehension(macro: str, range_type: CelType, element: CelType, body: CelType,
                  bounds: Bounds) -> tuple[CelType, float]:
    """``(type, iterations)`` of the comprehension ``macro`` (``map``, ``filter``, ``all``, ``exists``,
    ``exists_one``) over ``range_type`` whose variable is ``element`` and whose (last) body is ``body``:
    as many iterations as the range can hold elements."""
    size = range_type.size if range_type.size != INF else bounds.elements
    if macro == "map":
        return sized("list", size, body), size
    if macro == "filter":
        return sized("list", size, element), size
    return BOOL, size


def dig_type(value: CelType, keys: list[Optional[str]], default: CelType) -> Optional[CelType]:
    """The type of ``dig(x, [k0, k1...], d)`` for an object ``value`` and a path of literal ``keys`` (None:
    not a string literal): the type at that path joined with ``default``'s; None where the path leaves
    what the type knows (a key the schema does not have is left to the default: no finding)."""
    current = value
    for key in keys:
        if current.kind == "object" and key in (current.fields or {}):
            current = (current.fields or {})[key]
        elif current.kind in ("map", "list"):
            current = current.elem or DYN
        else:
            return None
    containers = {"list", "map", "object"}
    if default.kind in (current.kind, "null", "dyn") or {current.kind, default.kind} <= containers:
        return current
    return dyn(current.size)
