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
