"""Where `accelpolicy usage` reads the counters (docs/tasks/report-usage.md "Report usage"): a Prometheus
over its HTTP API, or a snapshot file of their samples.

Both answer one question, :meth:`increases`: the increase of a counter family over a window, summed by
some labels, as Prometheus' ``increase()`` computes it. :class:`PrometheusSource` asks the server
(``sum by (...) (increase(<family>_total[<seconds>s]))`` at the window's end); :class:`SnapshotSource`
runs the same arithmetic (:func:`extrapolated_increase`) on the samples of an OpenMetrics file with
timestamps, the format ``promtool tsdb create-blocks-from openmetrics`` reads and
:meth:`PrometheusSource.save` writes. A counter that restarted from 0 inside the window is a reset:
what it held before counts (Prometheus' rule).
"""
from __future__ import annotations

import json
import math
import socket
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Iterable

from prometheus_client.openmetrics.parser import text_string_to_metric_families

TIMEOUT_SECONDS = 60.0


class UsageSourceError(Exception):
    """The counters cannot be read: the message names the source and what went wrong."""


class BadSnapshot(UsageSourceError):
    """A snapshot file that cannot be read or is not OpenMetrics with timestamps (bad input)."""


@dataclass(frozen=True)
class Window:
    """``[start, end]``, aware datetimes; ``seconds`` its length."""

    start: datetime
    end: datetime

    @property
    def seconds(self) -> int:
        return int(round((self.end - self.start).total_seconds()))


def extrapolated_increase(points: list[tuple[float, float]], start: float, end: float) -> float | None:
    """Prometheus 2's ``increase()`` of one counter series over ``[start, end]`` (seconds since the epoch;
    ``points``: ``(timestamp, value)`` ascending): the samples in the window, a drop in value read as a
    reset (the value before it is added), then extrapolated to the window's edges, to at most half a
    sample interval beyond the first and last sample and never below the counter's zero point. None
    with fewer than two samples in the window (Prometheus drops the series)."""
    inside = [(t, v) for t, v in points if start <= t <= end]
    if len(inside) < 2:
        return None
    result = inside[-1][1] - inside[0][1]
    for (_, before), (_, after) in zip(inside, inside[1:]):
        if after < before:
            result += before
    sampled = inside[-1][0] - inside[0][0]
    average = sampled / (len(inside) - 1)
    to_start, to_end = inside[0][0] - start, end - inside[-1][0]
    if result > 0 and inside[0][1] >= 0:
        to_start = min(to_start, sampled * inside[0][1] / result)
    threshold = average * 1.1
    interval = sampled + (to_start if to_start < threshold else average / 2)
    interval += to_end if to_end < threshold else average / 2
    return result * interval / sampled if sampled else 0.0


def _sum_by(series: Iterable[tuple[dict[str, str], float]], by: tuple[str, ...]) -> dict[tuple, float]:
    out: dict[tuple, float] = {}
    for labels, value in series:
        key = tuple(labels.get(name, "") for name in by)
        out[key] = out.get(key, 0.0) + value
    return out


class SnapshotSource:
    """The samples of an OpenMetrics file (``# EOF`` at the end, every sample with a timestamp)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            text = self.path.read_text()
        except OSError as exc:
            raise BadSnapshot(f"snapshot {self.path}: {exc.strerror or exc}") from None
        self.series: dict[str, dict[tuple, list[tuple[float, float]]]] = {}
        try:
            families = list(text_string_to_metric_families(text))
        except ValueError as exc:
            raise BadSnapshot(f"snapshot {self.path}: not OpenMetrics text: {exc}") from None
        for family in families:
            for sample in family.samples:
                if sample.timestamp is None:
                    raise BadSnapshot(
                        f"snapshot {self.path}: sample {sample.name} has no timestamp (write one with "
                        f"`accelpolicy usage --prometheus URL --save FILE`)")
                key = tuple(sorted(sample.labels.items()))
                self.series.setdefault(sample.name, {}).setdefault(key, []).append(
                    (float(sample.timestamp), float(sample.value)))

    def increases(self, family: str, by: tuple[str, ...], window: Window) -> dict[tuple, float]:
        """``family``'s increase over ``window``, summed by the labels ``by`` (module docstring)."""
        start, end = window.start.timestamp(), window.end.timestamp()
        found = []
        for key, points in self.series.get(f"{family}_total", {}).items():
            value = extrapolated_increase(sorted(points), start, end)
            if value is not None:
                found.append((dict(key), value))
        return _sum_by(found, by)


class PrometheusSource:
    """A Prometheus HTTP API at ``url`` (``http://127.0.0.1:9090``; a path prefix is kept)."""

    def __init__(self, url: str, timeout: float = TIMEOUT_SECONDS):
        self.url, self.timeout = url.rstrip("/"), timeout

    def query(self, promql: str, at: datetime) -> dict:
        """One instant query's ``data`` (``/api/v1/query``); UsageSourceError when it cannot be answered."""
        params = urllib.parse.urlencode({"query": promql, "time": f"{at.timestamp():.3f}"})
        request = urllib.request.Request(f"{self.url}/api/v1/query?{params}",
                                         headers={"Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                body = answer.read()
        except urllib.error.HTTPError as exc:
            body = exc.read()
            if not body:
                raise UsageSourceError(f"Prometheus at {self.url}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, socket.timeout, ConnectionError) as exc:
            reason = getattr(exc, "reason", exc)
            raise UsageSourceError(f"cannot reach Prometheus at {self.url}: {reason}") from None
        try:
            doc = json.loads(body)
        except ValueError:
            raise UsageSourceError(f"{self.url} answered something other than the Prometheus API's "
                                   f"JSON: {body[:80]!r}") from None
        if doc.get("status") != "success":
            raise UsageSourceError(f"Prometheus at {self.url} refused the query {promql!r}: "
                                   f"{doc.get('errorType', '')}: {doc.get('error', doc)}")
        return doc.get("data") or {}

    def increases(self, family: str, by: tuple[str, ...], window: Window) -> dict[tuple, float]:
        """``family``'s increase over ``window``, summed by the labels ``by``, asked of the server."""
        promql = f"sum by ({', '.join(by)}) (increase({family}_total[{window.seconds}s]))"
        out = {}
        for item in self.query(promql, window.end).get("result") or []:
            value = float(item["value"][1])
            if not math.isnan(value):
                out[tuple(item["metric"].get(name, "") for name in by)] = value
        return out

    def save(self, families: Iterable[str], window: Window, path: Path) -> int:
        """Write the raw samples of ``families`` over ``window`` to ``path`` as OpenMetrics (what
        :class:`SnapshotSource` reads); returns the number of samples."""
        lines, count = [], 0
        for family in families:
            lines.append(f"# TYPE {family} counter")
            data = self.query(f"{family}_total[{window.seconds}s]", window.end)
            for item in data.get("result") or []:
                labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(item["metric"].items())
                                  if k != "__name__")
                name = f"{family}_total{{{labels}}}" if labels else f"{family}_total"
                for t, v in item.get("values") or []:
                    lines.append(f"{name} {v} {t}")
                    count += 1
        lines.append("# EOF")
        Path(path).write_text("\n".join(lines) + "\n")
        return count


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
