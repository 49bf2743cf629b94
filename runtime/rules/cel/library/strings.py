"""Custom CEL functions, declared as data: name -> pure function on CEL values.

Every function here is pure (no I/O, no clock, no environment). Rule files call them by name, e.g.
``"gpustack-fnv64-" + fnv64a(name)``. Add a function by adding it to :data:`FUNCTIONS`.
"""
from __future__ import annotations

import string

from celpy import celtypes

from runtime.model import normalize
from runtime.rules.cel.library.objects import FUNCTIONS as ADMISSION_FUNCTIONS
from runtime.rules.cel.library.objects import SIGNATURES as ADMISSION_SIGNATURES


def fnv64a(text: celtypes.StringType) -> celtypes.StringType:
    """16 lowercase hex digits of FNV-1a 64-bit over the UTF-8 bytes of ``text``
    (docs/concepts/pools-and-flavors.md "Queues and the entrance")."""
    return celtypes.StringType(normalize.fnv64a_hex(str(text)))


def objectName(text: celtypes.StringType) -> celtypes.StringType:  # noqa: N802 - CEL naming
    """A key made safe for an object name: each `_` becomes `-` (docs/agent.md "Normalization")."""
    return celtypes.StringType(normalize.object_name_safe(str(text)))


def quantity(value: celtypes.IntType) -> celtypes.StringType:
    """Canonical decimal-SI quantity string of an integer: 1600000 -> "1600k" (docs/reference/controller.md
    "Pod admission")."""
    return celtypes.StringType(normalize.format_decimal_quantity(int(value)))


def beforeDash(text: celtypes.StringType) -> celtypes.StringType:  # noqa: N802 - CEL naming
    """The text before the first `-` (manufacturer of an aKey, CPU manufacturer of a gKey)."""
    return celtypes.StringType(str(text).split("-", 1)[0])


_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)   # one C pass, not a loop


def lowerAscii(text: celtypes.StringType) -> celtypes.StringType:  # noqa: N802 - CEL strings extension name
    """ASCII lower-casing (the CEL strings extension's ``lowerAscii``, absent from cel-python)."""
    return celtypes.StringType(str(text).translate(_ASCII_LOWER))


# The one table every expression sees: these plus the admission helpers (rules/admission/*.yaml,
# :mod:`runtime.rules.cel.library.objects`). The evaluator (:mod:`runtime.rules.cel.evaluate`) imports this
# table; nothing here imports the evaluator.
FUNCTIONS = {
    "lowerAscii": lowerAscii,
    "fnv64a": fnv64a,
    "objectName": objectName,
    "quantity": quantity,
    "beforeDash": beforeDash,
    **ADMISSION_FUNCTIONS,
}

# The declared signatures of :data:`FUNCTIONS` (the form of
# :data:`runtime.rules.cel.library.objects.SIGNATURES`): what the CEL type checker and cost estimate
# (runtime.rules.cel.check) know of each function.
SIGNATURES = {
    "lowerAscii": (("string",), "string", "arg0", 0.1),
    "fnv64a": (("string",), "string", 16, 0.1),
    "objectName": (("string",), "string", "arg0", 0.1),
    "quantity": (("int",), "string", 32, 0),
    "beforeDash": (("string",), "string", "arg0", 0.1),
    **ADMISSION_SIGNATURES,
}
