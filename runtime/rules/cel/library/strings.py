"""Custom CEL functions on strings: names, paths and patterns.

Pure functions on CEL values (no I/O, no clock, no environment); rule files call them by name, e.g.
``"gpustack-fnv64-" + fnv64a(name)``. The names they make are those of docs/concepts/pools-and-flavors.md
"Queues and the entrance" and docs/agent.md "Normalization"; the paths those of
docs/concepts/instances.md "Additional volumes and host access"; patterns are RE2, as Kubernetes' CEL
(docs/rule-authoring.md "Regular expressions").
"""
from __future__ import annotations

import posixpath
import string

from celpy import celtypes
from celpy.evaluation import CELEvalError

from runtime.model import normalize, regex
from runtime.rules.cel.library.declare import cel_function
from runtime.rules.cel.values import to_cel

_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)   # one C pass, not a loop


@cel_function(("string",), "string", "arg0", 0.1)
def lowerAscii(text: celtypes.StringType) -> celtypes.StringType:  # noqa: N802 - CEL strings extension name
    """ASCII lower-casing (the CEL strings extension's ``lowerAscii``, absent from cel-python)."""
    return celtypes.StringType(str(text).translate(_ASCII_LOWER))


@cel_function(("string",), "string", 16, 0.1)
def fnv64a(text: celtypes.StringType) -> celtypes.StringType:
    """16 lowercase hex digits of FNV-1a 64-bit over the UTF-8 bytes of ``text``."""
    return celtypes.StringType(normalize.fnv64a_hex(str(text)))


@cel_function(("string",), "string", "arg0", 0.1)
def objectName(text: celtypes.StringType) -> celtypes.StringType:  # noqa: N802 - CEL naming
    """A key made safe for an object name: each `_` becomes `-`."""
    return celtypes.StringType(normalize.object_name_safe(str(text)))


@cel_function(("string",), "string", "arg0", 0.1)
def beforeDash(text: celtypes.StringType) -> celtypes.StringType:  # noqa: N802 - CEL naming
    """The text before the first `-` (manufacturer of an aKey, CPU manufacturer of a gKey)."""
    return celtypes.StringType(str(text).split("-", 1)[0])


@cel_function(("string",), "string", "arg0", 0.1)
def cleanPath(path) -> celtypes.StringType:  # noqa: N802
    """Lexical cleaning of a path (Go's ``path.Clean``); '' stays ''."""
    text = str(path)
    return celtypes.StringType(posixpath.normpath(text).replace("//", "/") if text else "")


@cel_function(("string",), "list<string>", "arg0", 0.1)
def pathElements(path) -> celtypes.ListType:  # noqa: N802
    """The `/`-separated elements of a path, empty ones dropped."""
    return to_cel([p for p in str(path).split("/") if p])


@cel_function(("string", "string"), "bool", 1, "regex", pattern=1)
def matches(text, pattern) -> celtypes.BoolType:
    """CEL ``matches``, ``matches(text, pattern)`` and ``text.matches(pattern)``: True when the RE2
    ``pattern`` matches some part of ``text``, as Kubernetes' CEL (anchor it, ``^...$``, for the whole
    text); linear in the text (:mod:`runtime.model.regex`). A pattern RE2 refuses is an error value
    naming it (as cel-python's own ``matches`` answers one)."""
    try:
        return celtypes.BoolType(regex.search(str(pattern), str(text)))
    except regex.PatternError as exc:
        return CELEvalError(str(exc), ValueError, exc.args)
