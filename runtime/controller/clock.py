"""The controller's wall clock: one callable returning an aware UTC ``datetime``.

:class:`runtime.controller.reconciler.Controller` takes it as ``clock`` (default :func:`utc_now`) and
reads every timestamp from it (Events, the plan's ``now``, Workload check answers), so a test can fix
the time. Durations and requeue moments are ``time.monotonic``, never this clock.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Callable

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    """Now, as an aware UTC datetime (the default clock)."""
    return datetime.now(timezone.utc)
