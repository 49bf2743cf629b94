"""Shape checks: an object against an ``ObjectShape`` (OpenAPI v3 structural schema), before the rules.

:func:`shape_errors` walks the object along the schema and returns field errors in the API server's
words (apiextensions-apiserver's structural validation;
docs/webhook-hardening.md "Malformed objects never pass: shape checks"):

- wrong type: ``spec.containers: Invalid value: "string": spec.containers in body must be of type
  array: "string"``
  (the value is the JSON type found: ``string``, ``integer``, ``number``, ``boolean``, ``array``,
  ``object``, ``null``; int-or-string fields say ``integer,string``);
- ``maxItems``: ``spec.additionalVolumes: Too many: 1000: must have at most 100 items``;
- ``maxLength``: ``spec.image: Too long: may not be more than 4096 bytes``;
- ``maxProperties``: ``spec.nodeSelector: Too many: 300: must have at most 256 items``;
- ``format: quantity`` (a string that is not a Kubernetes quantity, as the API server's
  ParseQuantity reads it): ``spec.resources.cpu: Invalid value: "abc": quantities must match the
  regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'``.

Map keys are rendered ``[key]`` (``resources.limits[nvidia.com/gpu]``), list items ``[i]``. At most
``limit`` errors are returned (the first ones in document order). Pure.
"""
from __future__ import annotations

from typing import Any

from runtime.engine.admission.verdict import SHAPE, FieldError
from runtime.model.admission import Schema
from runtime.model.normalize import QUANTITY_FORMAT, is_quantity

_JSON_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (list, "array"),
               (dict, "object"))


_INT64 = (-(2 ** 63), 2 ** 63 - 1)


def json_type(value: Any) -> str:
    """The JSON type name of a decoded value (``null`` for None). An integer outside int64 is a
    ``number``: the API server's JSON decoder reads it as a float64."""
    if value is None:
        return "null"
    if type(value) is int and not _INT64[0] <= value <= _INT64[1]:
        return "number"
    for py, name in _JSON_TYPES:
        if isinstance(value, py):
            return name
    return type(value).__name__


def _type_ok(schema: Schema, found: str) -> bool:
    if schema.intOrString:
        return found in ("integer", "string")
    if schema.type is None:
        return True
    return found == schema.type or (schema.type == "number" and found == "integer")


def shape_errors(schema: Schema, value: Any, path: str = "", limit: int = 20) -> list[FieldError]:
    """Field errors of ``value`` against ``schema`` (empty when it has the declared shape)."""
    errors: list[FieldError] = []
    _walk(schema, value, path, errors, limit)
    return errors


def _walk(schema: Schema, value: Any, path: str, errors: list[FieldError], limit: int) -> None:
    if len(errors) >= limit:
        return
    found = json_type(value)
    if value is None and (schema.nullable or schema.type is None and not schema.intOrString):
        return
    if not _type_ok(schema, found):
        want = "integer,string" if schema.intOrString else schema.type
        where = path or "<root>"
        errors.append(FieldError(reason="Invalid", field=path, value=found,
                                 detail=f'{where} in body must be of type {want}: "{found}"', rule=SHAPE))
        return
    if found == "string" and schema.maxLength is not None and len(value) > schema.maxLength:
        errors.append(FieldError(reason="TooLong", field=path, rule=SHAPE,
                                 detail=f"may not be more than {schema.maxLength} bytes"))
    elif found == "string" and schema.format == "quantity" and not is_quantity(value):
        errors.append(FieldError(reason="Invalid", field=path, value=value, rule=SHAPE,
                                 detail=QUANTITY_FORMAT))
    elif found == "array":
        if schema.maxItems is not None and len(value) > schema.maxItems:
            errors.append(FieldError(reason="TooMany", field=path, value=len(value), rule=SHAPE,
                                     detail=f"must have at most {schema.maxItems} items"))
            return
        if schema.items is not None:
            for i, item in enumerate(value):
                _walk(schema.items, item, f"{path}[{i}]", errors, limit)
    elif found == "object":
        if schema.maxProperties is not None and len(value) > schema.maxProperties:
            errors.append(FieldError(reason="TooMany", field=path, value=len(value), rule=SHAPE,
                                     detail=f"must have at most {schema.maxProperties} items"))
            return
        for key, sub in value.items():
            child = schema.properties.get(key)
            if child is not None:
                _walk(child, sub, f"{path}.{key}" if path else key, errors, limit)
            elif schema.additionalProperties is not None:
                _walk(schema.additionalProperties, sub, f"{path}[{key}]", errors, limit)
