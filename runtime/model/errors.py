"""pydantic's validation errors in Kubernetes' words.

pydantic prefixes the message of an error a validator raised with ``Value error, `` and joins a field
path with dots (``accelerators.0.uuid``); Kubernetes writes ``accelerators[0].uuid`` and the message
alone. :func:`error_text` and :func:`field_path` render one error of ``ValidationError.errors()``.
"""
from __future__ import annotations

from typing import Any, Iterable


def error_text(error: dict[str, Any]) -> str:
    """The message of one pydantic error; for a ``value_error`` (a validator's ``ValueError``) the
    validator's own words, without pydantic's ``Value error, `` prefix."""
    if error.get("type") == "value_error":
        cause = (error.get("ctx") or {}).get("error")
        if cause is not None and str(cause):
            return str(cause)
    return str(error.get("msg", ""))


def field_path(loc: Iterable[Any]) -> str:
    """``("accelerators", 0, "uuid")`` -> ``accelerators[0].uuid``; ``<document>`` for the root."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out or "<document>"
