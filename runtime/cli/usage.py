"""`accelpolicy usage`: accelerator-hours per namespace, pool, product and view over a window, the idle
hours of each pool and the fairness of each ClusterQueue, read from the controller's counters in a
Prometheus or in a snapshot file (docs/tasks/report-usage.md "Report usage"; runtime.report.usage).

Exit 0 with a report, 1 when the source cannot be read or holds no counters in the window, 2 on bad
input (flags, times, an unreadable snapshot).
"""
from __future__ import annotations

import re
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import click

from runtime.cli.common import fail

DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
EXIT_UNREADABLE = 1


def parse_duration(flag: str, text: str) -> timedelta:
    """``90s``, ``30m``, ``12h``, ``30d``, ``2w`` -> a positive timedelta; bad input exits 2."""
    match = DURATION.match(text.strip())
    if not match or float(match.group(1)) <= 0:
        fail(f"{flag} {text!r}: expected a positive duration such as 90s, 30m, 12h, 30d or 2w")
    return timedelta(seconds=float(match.group(1)) * UNITS[match.group(2)])


def parse_time(flag: str, text: str) -> datetime:
    """An RFC 3339 time (``2026-05-01T00:00:00Z``; a time without an offset is UTC); bad input exits 2."""
    try:
        t = datetime.fromisoformat(text.strip())
    except ValueError:
        fail(f"{flag} {text!r}: expected an RFC 3339 time such as 2026-05-01T00:00:00Z")
    return t if t.tzinfo is not None else t.replace(tzinfo=timezone.utc)


def window_of(since: str | None, start: str | None, end: str | None, now: datetime):
    """The report's :class:`runtime.report.usagesource.Window`: ``--from``/``--to`` (``--to`` default
    now), else ``--since`` back from ``--to`` (default 30d)."""
    from runtime.report.usagesource import Window

    if since and start:
        fail("--since and --from are exclusive: give a duration back from --to, or a start time")
    stop = parse_time("--to", end) if end else now
    begin = parse_time("--from", start) if start else stop - parse_duration("--since", since or "30d")
    if begin >= stop:
        fail(f"the window is empty: --from {begin.isoformat()} is not before --to {stop.isoformat()}")
    return Window(begin, stop)


@click.command("usage")
@click.option("--prometheus", "prometheus", metavar="URL", envvar="ACCELPOLICY_PROMETHEUS",
              help="The Prometheus that scrapes the controller (http://HOST:9090), asked over its HTTP API.")
@click.option("--snapshot", "snapshot", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Read the counters' samples from an OpenMetrics file with timestamps instead (see "
                   "--save).")
@click.option("--since", default=None, metavar="DURATION",
              help="The window: this long back from --to (s, m, h, d, w; default 30d).")
@click.option("--from", "start", default=None, metavar="TIME", help="The window's start (RFC 3339).")
@click.option("--to", "end", default=None, metavar="TIME", help="The window's end (RFC 3339; default now).")
@click.option("-o", "--output", type=click.Choice(["table", "json", "csv", "html"]), default="table",
              show_default=True)
@click.option("--save", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="With --prometheus: also write the counters' samples of the window to FILE, for "
                   "--snapshot.")
@click.option("--request-timeout", default="60s", show_default=True, metavar="DURATION",
              help="How long one query to Prometheus may take.")
def command(prometheus: str | None, snapshot: Path | None, since: str | None, start: str | None,
            end: str | None, output: str, save: Path | None, request_timeout: str) -> None:
    """Print accelerator-hours by namespace, pool, product and view, idle hours per pool, and quota held
    vs used per ClusterQueue.

    Reads the controller's accelerator-seconds counters from --prometheus URL or a --snapshot FILE.
    The pools section reconciles: installed = charged + idle, per pool and for the fleet. Exit 0 with a
    report, 1 when the source cannot be read or has no counters in the window, 2 on bad input.
    """
    from runtime.report import usage
    from runtime.report.usagesource import BadSnapshot, PrometheusSource, SnapshotSource, UsageSourceError

    if (prometheus is None) == (snapshot is None):
        fail("give exactly one of --prometheus URL and --snapshot FILE")
    if save is not None and prometheus is None:
        fail("--save needs --prometheus")
    window = window_of(since, start, end, datetime.now(timezone.utc))
    timeout = parse_duration("--request-timeout", request_timeout).total_seconds()
    try:
        if snapshot is not None:
            source = SnapshotSource(snapshot)
        else:
            source = PrometheusSource(prometheus, timeout)
        report = usage.build_report(source, window)
        if save is not None:
            count = source.save(usage.FAMILIES.values(), window, save)
            click.echo(f"wrote {count} samples to {save}", err=True)
    except BadSnapshot as exc:
        fail(str(exc))
    except UsageSourceError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_UNREADABLE)
    if output == "html":
        from runtime.report.usagehtml import render_page

        click.echo(render_page(report))
    else:
        render = {"table": usage.render_table, "json": usage.render_json, "csv": usage.render_csv}[output]
        click.echo(render(report))
