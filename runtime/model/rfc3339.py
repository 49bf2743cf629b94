"""RFC 3339 timestamps as Kubernetes writes them, in UTC with a ``Z``: ``metav1.Time`` to the second
(``2026-12-01T09:00:00Z``: Event timestamps, condition ``lastTransitionTime``) and ``metav1.MicroTime``
to the microsecond (``2026-12-01T09:00:00.250000Z``: a Lease's ``acquireTime`` and ``renewTime``).

An aware datetime is converted to UTC first; a naive one is taken as UTC.
"""
from __future__ import annotations

from datetime import datetime, timezone

TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
MICRO_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def _utc(t: datetime) -> datetime:
    return t.astimezone(timezone.utc) if t.tzinfo is not None else t


def format_time(t: datetime) -> str:
    """``t`` as ``metav1.Time`` serializes it: RFC 3339 to the second, UTC (``2026-12-01T09:00:00Z``)."""
    return _utc(t).strftime(TIME_FORMAT)


def format_micro_time(t: datetime) -> str:
    """``t`` as ``metav1.MicroTime`` serializes it: RFC 3339 with six fraction digits, UTC
    (``2026-12-01T09:00:00.250000Z``)."""
    return _utc(t).strftime(MICRO_TIME_FORMAT)


def parse_time(text: object) -> datetime | None:
    """An RFC 3339 timestamp (``2026-12-01T09:00:00Z``, an offset, or fraction digits) as an aware
    datetime; None when ``text`` is not a string of that form, or has no zone (a time with no zone is not
    an instant)."""
    if not isinstance(text, str) or "T" not in text.upper():
        return None
    try:
        found = datetime.fromisoformat(text.strip().replace("z", "Z").replace("Z", "+00:00"))
    except ValueError:
        return None
    return found if found.tzinfo is not None else None


def as_instant(value: object) -> datetime | None:
    """``value`` as an aware datetime: a datetime (naive: taken as UTC, as YAML reads an unquoted time) or
    RFC 3339 text (:func:`parse_time`); None otherwise."""
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
    return parse_time(value)
