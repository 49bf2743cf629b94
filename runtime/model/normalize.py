"""Normalization and formatting primitives shared by the agent, derivation and admission.

Mechanism only: the parameters that are policy (cruft patterns, prefixes, budgets) come from rule
files and are passed in. Sources: docs/agent.md "Normalization" (NormalizeName, SanitizeLabelValue, memory),
docs/concepts/pools-and-flavors.md "Queues and the entrance" (FNV-1a entrance), docs/reference/controller.md
"Pod admission" (quantity serialization).
"""
from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Iterable, Sequence

from runtime.model import regex

_SEPARATORS = "-_."


def strip_cruft(name: str, cruft: "CruftRules") -> str:
    """Apply the stripCruft steps of NormalizeName."""
    text = name
    if cruft.cut_at and cruft.cut_at in text:
        text = text.split(cruft.cut_at, 1)[0]
    for token in cruft.delete_tokens:
        text = text.replace(token, "")
    if cruft.leading_pattern:
        text = regex.sub(cruft.leading_pattern, "", text)
    text = text.strip()
    for suffix in cruft.trailing_suffixes:
        if text.endswith(suffix):
            text = text[: -len(suffix)]
    if cruft.trailing_pattern:
        text = regex.sub(cruft.trailing_pattern, "", text)
    return text


class CruftRules:
    """Parameters of NormalizeName's stripCruft (from rules/node-facts.yaml ``spec.cruft``).

    ``trailing_suffixes`` are dropped in order, once each (`" CPU"` then `" Processor"`).
    """

    def __init__(self, cut_at: str = "", delete_tokens: Sequence[str] = (), leading_pattern: str = "",
                 trailing_suffixes: Sequence[str] = (), trailing_pattern: str = ""):
        self.cut_at = cut_at
        self.delete_tokens = tuple(delete_tokens)
        self.leading_pattern = leading_pattern
        self.trailing_suffixes = tuple(trailing_suffixes)
        self.trailing_pattern = trailing_pattern


def normalize_name(name: str, prefix: str, max_length: int, cruft: CruftRules | None = None) -> str:
    """NormalizeName(name, prefix, maxLength, stripCruft).

    ``cruft`` None means stripCruft=false. ``max_length <= 0`` means the name's length. Returns a
    lower-case slug without a trailing separator, or "" when nothing survives.
    """
    if cruft is not None:
        name = strip_cruft(name, cruft)
    if max_length <= 0:
        max_length = len(name)
    buf: list[str] = []
    lower_prefix = prefix.lower()
    for ch in name:
        if len(buf) >= max_length:
            break
        if "A" <= ch <= "Z":
            buf.append(ch.lower())
        elif "a" <= ch <= "z" or "0" <= ch <= "9":
            buf.append(ch)
        else:
            if ch == " ":
                ch = "-"
            if ch in _SEPARATORS:
                if buf and buf[-1] not in _SEPARATORS:
                    buf.append(ch)
                else:
                    continue
            else:
                continue
        if lower_prefix and len(buf) == len(lower_prefix) and "".join(buf).lower() == lower_prefix:
            buf.clear()
    out = "".join(buf)
    if out and out[-1] in _SEPARATORS:
        out = out[:-1]
    return out


def sanitize_label_value(value: str, limit: int = 63) -> str:
    """SanitizeLabelValue: `NVIDIA A10G` -> `NVIDIA-A10G`."""
    buf: list[str] = []
    for ch in value:
        if len(buf) >= limit:
            break
        if ch.isascii() and ch.isalnum():
            buf.append(ch)
            continue
        if ch == " ":
            ch = "-"
        if ch in _SEPARATORS and buf and buf[-1] not in _SEPARATORS:
            buf.append(ch)
    out = "".join(buf)
    if out and out[-1] in _SEPARATORS:
        out = out[:-1]
    return out


def fnv64a_hex(text: str) -> str:
    """FNV-1a 64-bit of the UTF-8 bytes, 16 lowercase hex digits."""
    h = 0xCBF29CE484222325
    for byte in text.encode("utf-8"):
        h ^= byte
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def object_name_safe(key: str) -> str:
    """Our choice: `_` becomes `-` when a key is used inside an object name."""
    return key.replace("_", "-")


_BINARY_UNITS = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


def format_memory_mib(mib: int) -> str:
    """MiB -> the largest binary unit whose scale <= value, rounded half up."""
    value = mib * 2**20
    for unit, scale in _BINARY_UNITS:
        if scale <= value:
            return f"{(value + scale // 2) // scale}{unit}"
    return f"{value}"


_DEC_SUFFIX = ((18, "E"), (15, "P"), (12, "T"), (9, "G"), (6, "M"), (3, "k"))


def format_decimal_quantity(value: int) -> str:
    """Canonical decimal-SI quantity: 1600000 -> `1600k`, 8000000 -> `8M`."""
    if value == 0:
        return "0"
    for exp, suffix in _DEC_SUFFIX:
        scale = 10**exp
        if value % scale == 0:
            return f"{value // scale}{suffix}"
    return str(value)


def format_binary_quantity(value_bytes: int) -> str:
    """Canonical binary quantity: the largest power of 1024 dividing exactly (`24Gi`, `1536Mi`)."""
    if value_bytes == 0:
        return "0"
    for unit, scale in _BINARY_UNITS:
        if value_bytes % scale == 0:
            return f"{value_bytes // scale}{unit}"
    return str(value_bytes)


_QUANTITY_RE = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")
_SUFFIX_SCALE = {
    None: Decimal(1), "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12),
    "P": Decimal(10**15), "E": Decimal(10**18),
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
    "Pi": Decimal(2**50), "Ei": Decimal(2**60),
}


QUANTITY_FORMAT = ("quantities must match the regular expression "
                   "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def is_quantity(text: str) -> bool:
    """Whether ``text`` is a Kubernetes quantity exactly as written (the API server's ParseQuantity:
    no surrounding spaces, one number, an optional suffix). A failure reads :data:`QUANTITY_FORMAT`."""
    if text != text.strip():
        return False
    try:
        parse_quantity(text)
    except QuantityError:
        return False
    return True


def parse_quantity(text: str | int | float) -> Decimal:
    """Kubernetes quantity string -> exact Decimal (`24Gi` -> 25769803776, `800m` -> 0.8).

    Raises :class:`QuantityError` for anything else.
    """
    if isinstance(text, bool):
        raise QuantityError(f"quantities must be strings or numbers, not {text!r}")
    if isinstance(text, (int, float)):
        return Decimal(str(text))
    match = _QUANTITY_RE.match(str(text).strip())
    if not match:
        raise QuantityError(f"{QUANTITY_FORMAT}: {text!r}")
    try:
        number = Decimal(match.group(1))
    except InvalidOperation as exc:
        raise QuantityError(f"{QUANTITY_FORMAT}: {text!r}") from exc
    return number * _SUFFIX_SCALE[match.group(2)]


def sorted_unique(items: Iterable[str]) -> list[str]:
    """Sorted, de-duplicated strings (bases, families, profiles in messages)."""
    return sorted(set(items))
