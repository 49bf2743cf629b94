"""The RFC 3339 timestamps of runtime/model/rfc3339.py: ``metav1.Time`` to the second, ``metav1.MicroTime``
to the microsecond, both in UTC with a ``Z``."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from runtime.model.rfc3339 import MICRO_TIME_FORMAT, TIME_FORMAT, format_micro_time, format_time

AT = datetime(2026, 12, 1, 9, 5, 7, 250000, tzinfo=timezone.utc)


def test_time_is_to_the_second():
    assert format_time(AT) == "2026-12-01T09:05:07Z"
    assert format_time(AT.replace(microsecond=0)) == "2026-12-01T09:05:07Z"


def test_micro_time_has_six_fraction_digits():
    assert format_micro_time(AT) == "2026-12-01T09:05:07.250000Z"
    assert format_micro_time(AT.replace(microsecond=0)) == "2026-12-01T09:05:07.000000Z"
    assert format_micro_time(AT.replace(microsecond=7)) == "2026-12-01T09:05:07.000007Z"


def test_another_zone_is_written_in_utc():
    berlin = AT.astimezone(timezone(timedelta(hours=1)))
    assert (format_time(berlin), format_micro_time(berlin)) == ("2026-12-01T09:05:07Z", "2026-12-01T09:05:07.250000Z")


def test_the_formats_read_back():
    assert datetime.strptime("2026-12-01T09:05:07Z", TIME_FORMAT) == datetime(2026, 12, 1, 9, 5, 7)
    assert datetime.strptime("2026-12-01T09:05:07.250000Z", MICRO_TIME_FORMAT) == datetime(2026, 12, 1, 9, 5, 7, 250000)
