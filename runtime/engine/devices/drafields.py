"""One DRA device's fields, read as a ``DraDriver`` row (rules/dra.yaml ``facts``) names them: an
attribute (``int``, ``bool``, ``string``, ``version``), a capacity or the device name
(docs/reference/dra-rules.md). Pure; a field that does not parse raises :class:`Unreadable` naming it, which
costs only its device."""
from __future__ import annotations

import re
from typing import Any, Mapping

from runtime.model import regex
from runtime.model.dra import DeviceField, DraDriverSpec
from runtime.model.normalize import QuantityError, parse_quantity

_VERSION = re.compile(r"^v?([0-9]+)\.([0-9]+)(?:\.([0-9]+))?(?:[-+].*)?$")
_MIB = 2 ** 20


class Unreadable(ValueError):
    """One device field that does not parse; ``field`` as messages name it."""

    def __init__(self, where: DeviceField | str, error: str):
        super().__init__(error)
        self.field = where.describe() if isinstance(where, DeviceField) else where


def field_attribute(row: DraDriverSpec, device: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    """The attribute ``name`` (unqualified: the driver's; ``<driver>/<name>`` spelled out matches too)."""
    attrs = device.get("attributes") or {}
    if not isinstance(attrs, Mapping):
        raise Unreadable("attributes", "not a map")
    value = attrs.get(name)
    if value is None and "/" not in name:
        value = attrs.get(f"{row.driver}/{name}")
    if value is None and name.startswith(row.driver + "/"):
        value = attrs.get(name[len(row.driver) + 1:])
    if value is not None and not isinstance(value, Mapping):
        raise Unreadable(f"attribute {name}",
                         f"{value!r} is not a device attribute (int, bool, string, version)")
    return value


def raw_value(row: DraDriverSpec, device: Mapping[str, Any], where: DeviceField) -> Any:
    """The field's raw value: an attribute's mapping, a capacity's value, the device name; None: absent."""
    if where.deviceName:
        return device.get("name") or None
    if where.attribute:
        return field_attribute(row, device, where.attribute)
    capacity = device.get("capacity") or {}
    entry = capacity.get(where.capacity) if isinstance(capacity, Mapping) else None
    if entry is None:
        return None
    if not isinstance(entry, Mapping) or "value" not in entry:
        raise Unreadable(where, f"{entry!r} has no value")
    return entry["value"]


def text_value(attr: Mapping[str, Any]) -> str | None:
    for key in ("string", "version"):
        if isinstance(attr.get(key), str):
            return attr[key]
    if isinstance(attr.get("int"), int) and not isinstance(attr.get("int"), bool):
        return str(attr["int"])
    return None


def field_text(row: DraDriverSpec, device: Mapping[str, Any], where: DeviceField,
               required: bool = False) -> str:
    raw = raw_value(row, device, where)
    if raw is None:
        if required:
            raise Unreadable(where, "not published")
        return ""
    if where.deviceName:
        return str(raw)
    text = text_value(raw) if where.attribute else str(raw)
    if text is None or (required and not text.strip()):
        raise Unreadable(where, f"{dict(raw)!r} is not a string")
    return text


def rewritten(row: DraDriverSpec, fact: str, text: str) -> str:
    for rewrite in row.rewrites.get(fact, []):
        text = regex.sub(rewrite.pattern, rewrite.replacement, text)
    return text


def int_field(row: DraDriverSpec, device: Mapping[str, Any], where: DeviceField | None) -> int | None:
    if where is None:
        return None
    raw = raw_value(row, device, where)
    if raw is None:
        return None
    value = raw.get("int") if where.attribute else raw
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise Unreadable(where, f"{dict(raw) if where.attribute else raw!r} is not a non-negative int")
    return value


def mib_field(row: DraDriverSpec, device: Mapping[str, Any], where: DeviceField) -> int:
    """A quantity of bytes (a capacity, or an int/string attribute) -> MiB, rounded down."""
    raw = raw_value(row, device, where)
    if raw is None:
        raise Unreadable(where, "not published")
    value = (raw.get("int") if "int" in raw else raw.get("string")) if where.attribute else raw
    try:
        amount = parse_quantity(value)
    except (QuantityError, TypeError) as exc:
        raise Unreadable(where, f"{value!r} is not a quantity") from exc
    if amount < 0:
        raise Unreadable(where, f"{value!r} is negative")
    return int(amount // _MIB)


def version_field(row: DraDriverSpec, device: Mapping[str, Any],
                  where: DeviceField | None) -> tuple[int, int] | None:
    """A version (``8.6.0``) -> (major, minor); None when not published."""
    if where is None:
        return None
    text = field_text(row, device, where)
    if not text:
        return None
    match = _VERSION.match(text.strip())
    if match is None:
        raise Unreadable(where, f"{text!r} is not a version")
    return int(match.group(1)), int(match.group(2))
