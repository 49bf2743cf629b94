"""Custom CEL functions used by the admission rules (rules/admission/*.yaml), declared as data.

Pure functions on CEL values: the tables they need (resource-key patterns, manufacturers) are
passed in by the rule file, never read here. Merged into :data:`runtime.rules.cel.library.strings.FUNCTIONS`.
Spec: docs/reference/controller.md "Pod accelerator requests" (family classifier),
docs/reference/controller.md "Pod accelerator requests" (containers and values), docs/reference/controller.md
"Pod admission" (affinity placement), docs/reference/controller.md "Pod admission" (quantities);
docs/concepts/instances.md "Additional volumes and host access" (path cleaning, DNS-1123 names).
"""
from __future__ import annotations

import math
import posixpath
from decimal import Decimal
from typing import Any

from celpy import celtypes
from celpy.evaluation import CELEvalError

from runtime.model import normalize, regex
from runtime.model.nodepin import pin_requirements, queue_flavors, with_node_requirements
from runtime.model.poddemand import pod_containers, pod_demand
from runtime.model.resourcefamily import resource_family
from runtime.rules.cel.values import json_of, to_cel


def _py(value: Any) -> Any:
    """``value`` as JSON for reading (:func:`runtime.rules.cel.values.json_of`): never mutate it."""
    return json_of(value)


def _cel(value: Any) -> Any:
    return to_cel(value)


# --- quantities ---------------------------------------------------------------------------------------
def _quantity(value: Any) -> Decimal | None:
    try:
        return normalize.parse_quantity(_py(value))
    except normalize.QuantityError:
        return None


def qValid(value) -> celtypes.BoolType:  # noqa: N802 - CEL naming
    """True when ``value`` (string or number) is a Kubernetes quantity."""
    return celtypes.BoolType(_quantity(value) is not None)


def qValue(value) -> celtypes.IntType:  # noqa: N802
    """Quantity ``Value()``: rounded up to an integer (`0.5` -> 1, `1m` -> 1); 0 when unparsable."""
    q = _quantity(value)
    return celtypes.IntType(0 if q is None else math.ceil(q))


def qFloor(value) -> celtypes.IntType:  # noqa: N802
    """Quantity rounded down to an integer (`24Gi` -> 25769803776); 0 when unparsable."""
    q = _quantity(value)
    return celtypes.IntType(0 if q is None else math.floor(q))


def qIsOne(value) -> celtypes.BoolType:  # noqa: N802
    """True when the quantity itself equals 1 (`1m` is not 1) (docs/reference/controller.md "Pod accelerator
    requests")."""
    return celtypes.BoolType(_quantity(value) == 1)


def qIsInt(value) -> celtypes.BoolType:  # noqa: N802
    """True when the quantity is a whole number (`1m` is not)."""
    q = _quantity(value)
    return celtypes.BoolType(q is not None and q == q.to_integral_value())


def qIsZero(value) -> celtypes.BoolType:  # noqa: N802
    """True when the quantity is 0 (an absent field reads as 0 in the rules: pass `'0'`)."""
    return celtypes.BoolType(_quantity(value) == 0)


def qCompare(a, b) -> celtypes.IntType:  # noqa: N802
    """-1, 0 or 1 comparing two quantities exactly (`1500m` < `2`); unparsable reads as 0."""
    x, y = _quantity(a) or Decimal(0), _quantity(b) or Decimal(0)
    return celtypes.IntType((x > y) - (x < y))


def qError(value) -> celtypes.StringType:  # noqa: N802
    """'' for a valid quantity, else the parser's message (docs/reference/controller.md "Pod admission" `parse
    memory`)."""
    try:
        normalize.parse_quantity(_py(value))
        return celtypes.StringType("")
    except normalize.QuantityError as exc:
        return celtypes.StringType(str(exc))


def binaryQuantity(value) -> celtypes.StringType:  # noqa: N802
    """Bytes -> canonical binary quantity (`24Gi`, `1536Mi`) (docs/reference/controller.md "Pod
    admission")."""
    return celtypes.StringType(normalize.format_binary_quantity(int(value)))


# --- lists and strings --------------------------------------------------------------------------------
def sortedUnique(items) -> celtypes.ListType:  # noqa: N802
    """Sorted, de-duplicated list of strings (families, profiles in messages)."""
    return _cel(normalize.sorted_unique(str(i) for i in items))


def join(items, sep) -> celtypes.StringType:
    """Items joined by ``sep`` (`[a b]` spellings in messages)."""
    return celtypes.StringType(str(sep).join(str(_py(i)) for i in items))


def flatten(items) -> celtypes.ListType:
    """A list of lists -> one list, in order."""
    return celtypes.ListType([x for sub in items for x in sub])


def minOf(items, default) -> Any:  # noqa: N802
    """The smallest element of ``items``, or ``default`` when empty."""
    return min(items) if len(items) else default


def indexed(items) -> celtypes.ListType:
    """``[{'i': 0, 'v': x0}, ...]``: a list with its indexes (field paths need them)."""
    return celtypes.ListType([celtypes.MapType({celtypes.StringType("i"): celtypes.IntType(i),
                                                celtypes.StringType("v"): v}) for i, v in enumerate(items)])


def firstIndex(keys) -> celtypes.ListType:  # noqa: N802
    """For each element of ``keys``, the index of the first element equal to it (its own index when
    it is the first): duplicate detection in one linear pass (docs/concepts/instances.md "Additional volumes
    and host access" mount paths)."""
    first: dict = {}
    return celtypes.ListType([celtypes.IntType(first.setdefault(k, i)) for i, k in enumerate(keys)])


def groupBy(keys, values) -> celtypes.MapType:  # noqa: N802
    """``{key: [values whose key it is, in order]}`` for two lists of equal length: a lookup table
    built once, so a rule compares each item with its matches instead of with every item."""
    if len(keys) != len(values):
        raise ValueError(f"groupBy: {len(keys)} keys for {len(values)} values")
    groups: dict = {}
    for k, v in zip(keys, values):
        groups.setdefault(k, []).append(v)
    return celtypes.MapType({k: celtypes.ListType(v) for k, v in groups.items()})


def maxOf(items, default) -> Any:  # noqa: N802
    """The largest element of ``items``, or ``default`` when empty."""
    return max(items) if len(items) else default


def isEmpty(value) -> celtypes.BoolType:  # noqa: N802
    """True for null, '', 0, false, an empty list or an empty map (Go's zero values)."""
    if value is None:
        return celtypes.BoolType(True)
    if isinstance(value, (str, list, dict)):
        return celtypes.BoolType(len(value) == 0)
    return celtypes.BoolType(not value)


def dig(value, path, default) -> Any:
    """``value[p0][p1]...`` following map keys and list indexes; ``default`` where the path ends."""
    cur = value
    for seg in path:
        if isinstance(cur, celtypes.MapType) and seg in cur:
            cur = cur[seg]
        elif isinstance(cur, celtypes.ListType) and isinstance(seg, int) and 0 <= int(seg) < len(cur):
            cur = cur[int(seg)]
        else:
            return default
    return default if cur is None else cur


def cleanPath(path) -> celtypes.StringType:  # noqa: N802
    """Lexical cleaning of docs/concepts/instances.md "Additional volumes and host access" (Go path.Clean); ''
    stays ''."""
    text = str(path)
    return celtypes.StringType(posixpath.normpath(text).replace("//", "/") if text else "")


def pathElements(path) -> celtypes.ListType:  # noqa: N802
    """The `/`-separated elements of a path, empty ones dropped."""
    return _cel([p for p in str(path).split("/") if p])


def matches(text, pattern) -> celtypes.BoolType:
    """CEL ``matches``, ``matches(text, pattern)`` and ``text.matches(pattern)``: True when the RE2
    ``pattern`` matches some part of ``text``, as Kubernetes' CEL (anchor it, ``^...$``, for the whole
    text); linear in the text (:mod:`runtime.model.regex`). A pattern RE2 refuses is an error value
    naming it (as cel-python's own ``matches`` answers one; docs/rule-authoring.md "Regular expressions")."""
    try:
        return celtypes.BoolType(regex.search(str(pattern), str(text)))
    except regex.PatternError as exc:
        return CELEvalError(str(exc), ValueError, exc.args)


# --- resource keys and containers (docs/reference/controller.md "Pod accelerator requests") ------------
# The classifier itself is runtime.model.resourcefamily.resource_family (shared with the node agent).
def resourceFamily(name, table, manufacturers) -> celtypes.MapType:  # noqa: N802
    """``{family, base, profile}`` of a resource key (docs/reference/controller.md "Pod accelerator
    requests")."""
    return _cel(resource_family(str(name), _py(table), _py(manufacturers)))


def _quantity_text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


_PYTHON_ONLY = ("container", "bases_of")   # pod_containers fields the rules never read


def podContainers(pod, table, manufacturers) -> celtypes.ListType:  # noqa: N802
    """The Pod's containers in manifest order (init, then app) with their accelerator claims:
    :func:`runtime.model.poddemand.pod_containers` (``keys`` as quantity text), less the manifest entry."""
    spec = (_py(pod) or {}).get("spec") or {}
    out = []
    for c in pod_containers(spec, _py(table), _py(manufacturers)):
        item = {k: v for k, v in c.items() if k not in _PYTHON_ONLY}
        item["keys"] = {k: _quantity_text(v) for k, v in c["keys"].items()}
        out.append(item)
    return _cel(out)


def _cel_value(raw: Any, container: Any, key: str) -> int:
    q = _quantity(raw)   # qValue: rounded up, 0 when unparsable
    return 0 if q is None else math.ceil(q)


def podDemand(pod, table, manufacturers) -> celtypes.MapType:  # noqa: N802
    """The Pod's demand, family -> base -> count / units / profile: :func:`runtime.model.poddemand.pod_demand`
    (sidecars left out, requests over limits, the largest sliced and shared container); an unparsable
    quantity reads as 0, as ``qValue`` does."""
    table = _py(table)
    spec = (_py(pod) or {}).get("spec") or {}
    return _cel(pod_demand(pod_containers(spec, table, _py(manufacturers)), table, _cel_value))


# --- node affinity (docs/reference/controller.md "Pod admission" placement; the node pin:
# runtime.model.nodepin) ---
def withNodeRequirement(affinity, requirement) -> celtypes.MapType:  # noqa: N802
    """``affinity`` with ``requirement`` added to the required node-affinity terms.

    No required terms -> one new term holding it; otherwise appended to every term with any
    ``matchExpressions`` or ``matchFields`` (empty terms left alone), never twice.
    """
    return _cel(with_node_requirements(_py(affinity), [_py(requirement)]))


def withNodeRequirements(affinity, requirements) -> celtypes.MapType:  # noqa: N802
    """``affinity`` with every requirement of the list ``requirements`` added as
    :func:`withNodeRequirement` adds one; an empty list leaves it as it is."""
    return _cel(with_node_requirements(_py(affinity), list(_py(requirements) or [])))


def nodePin(node, queue, flavors) -> celtypes.MapType:  # noqa: N802
    """The pin of Node ``node`` into the pool of ClusterQueue ``queue``: ``{'flavors': [names of the
    pool's flavors, queue order], 'requirements': [...]}`` with the requirements of
    :func:`runtime.model.nodepin.pin_requirements`; the pool's flavors are taken from the list
    ``flavors`` by name. Both lists empty when the node or the queue is empty (``{}``)."""
    node, queue = _py(node) or {}, _py(queue) or {}
    if not node or not queue:
        return _cel({"flavors": [], "requirements": []})
    pool = queue_flavors(queue, _py(flavors) or [])
    labels = (node.get("metadata") or {}).get("labels") or {}
    return _cel({"flavors": [(f.get("metadata") or {}).get("name", "") for f in pool],
                 "requirements": pin_requirements(labels, pool)})


FUNCTIONS = {
    "qValid": qValid, "qValue": qValue, "qFloor": qFloor, "qIsOne": qIsOne, "qIsInt": qIsInt,
    "qError": qError, "qIsZero": qIsZero, "qCompare": qCompare, "binaryQuantity": binaryQuantity,
    "sortedUnique": sortedUnique, "join": join, "flatten": flatten, "maxOf": maxOf, "minOf": minOf,
    "indexed": indexed, "dig": dig, "isEmpty": isEmpty, "firstIndex": firstIndex, "groupBy": groupBy,
    "cleanPath": cleanPath, "pathElements": pathElements, "matches": matches,
    "resourceFamily": resourceFamily, "podContainers": podContainers, "podDemand": podDemand,
    "withNodeRequirement": withNodeRequirement, "withNodeRequirements": withNodeRequirements,
    "nodePin": nodePin,
}

# Declared signatures (the CEL type checker and cost estimate, runtime.rules.cel.check): name ->
# (argument types, result type, result size, cost per element of the arguments). A type is ``dyn``,
# ``bool``, ``int``, ``double``, ``string``, ``list``, ``map`` or ``list<T>``; the result size is
# ``argN`` (at most argument N's size), a number, or None (sized by the request body cap). The cost per
# element ``"regex"`` is Kubernetes' price of a regex match: a tenth of the text's length times a quarter of
# the pattern's (docs/rule-authoring.md "Regular expressions").
SIGNATURES = {
    "qValid": (("dyn",), "bool", 1, 0), "qValue": (("dyn",), "int", 1, 0), "qFloor": (("dyn",), "int", 1, 0),
    "qIsOne": (("dyn",), "bool", 1, 0), "qIsInt": (("dyn",), "bool", 1, 0),
    "qIsZero": (("dyn",), "bool", 1, 0), "qError": (("dyn",), "string", 256, 0),
    "qCompare": (("dyn", "dyn"), "int", 1, 0), "binaryQuantity": (("dyn",), "string", 32, 0),
    "sortedUnique": (("list",), "list<string>", "arg0", "sort"),
    "join": (("list", "string"), "string", None, 1),
    "flatten": (("list",), "list", None, 1), "maxOf": (("list", "dyn"), "dyn", None, 1),
    "minOf": (("list", "dyn"), "dyn", None, 1), "indexed": (("list",), "list", "arg0", 1),
    "dig": (("dyn", "list", "dyn"), "dyn", None, 0), "isEmpty": (("dyn",), "bool", 1, 0),
    "firstIndex": (("list",), "list<int>", "arg0", 1), "groupBy": (("list", "list"), "map", "arg0", 1),
    "cleanPath": (("string",), "string", "arg0", 0.1),
    "pathElements": (("string",), "list<string>", "arg0", 0.1),
    "matches": (("string", "string"), "bool", 1, "regex"),
    "resourceFamily": (("string", "map", "list"), "map", 3, 1),
    "podContainers": (("dyn", "map", "list"), "list", None, 1),
    "podDemand": (("dyn", "map", "list"), "map", None, 1),
    "withNodeRequirement": (("dyn", "map"), "map", None, 1),
    "withNodeRequirements": (("dyn", "list"), "map", None, 1),
    "nodePin": (("dyn", "dyn", "list"), "map", 2, 1),
}
