"""Options every long-running command shares (docs/observability.md): ``--log-level`` and ``--log-format``
(loguru's own serializer for ``json``), and ``--metrics-bind-address`` (prometheus_client's own
HTTP server).

``json`` writes one JSON object per line on stderr (loguru's ``serialize=True``: ``text`` and a
``record`` with ``level``, ``time``, ``name``, ``function``, ``line``, ``extra``...). Records of the
standard library's ``logging`` (uvicorn, the webhook app) are routed through loguru too, so every line
of a process has one format.
"""
from __future__ import annotations

import logging
import sys
from typing import Callable, Optional

import click
from loguru import logger
from prometheus_client import CollectorRegistry, start_http_server

LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "SUCCESS", "WARNING", "ERROR", "CRITICAL")
LOG_FORMATS = ("text", "json")
DEFAULT_METRICS_BIND = ":8080"  # controller-runtime's default


class _ToLoguru(logging.Handler):
    """A standard ``logging`` record re-emitted through loguru (loguru's documented recipe)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            level: str | int = logger.level(record.levelname).name
        except ValueError:
            level = record.levelno
        logger.opt(depth=6, exception=record.exc_info).log(level, record.getMessage())


def _stderr(message: str) -> None:
    sys.stderr.write(message)  # looked up per line: a test runner may swap sys.stderr


def configure_logging(level: str = "INFO", fmt: str = "text", sink=None) -> None:
    """One loguru sink on ``sink`` (default stderr) at ``level``: plain text, or JSON lines for
    ``fmt == "json"``; the standard ``logging`` records go the same way. ValueError on an unknown
    format."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"unknown log format {fmt!r} (known: {', '.join(LOG_FORMATS)})")
    logger.remove()
    logger.add(sink or _stderr, level=level.upper(), serialize=fmt == "json", backtrace=False, diagnose=False)
    std = logging.getLevelName(level.upper())  # TRACE and SUCCESS are loguru's own
    std = std if isinstance(std, int) else logging.DEBUG if level.upper() == "TRACE" else logging.INFO
    root = logging.getLogger()
    if not any(isinstance(h, _ToLoguru) for h in root.handlers):
        root.addHandler(_ToLoguru())
    root.setLevel(std)


def log_options(func: Callable) -> Callable:
    """``--log-level`` and ``--log-format`` (passed to the command as ``log_level``, ``log_format``)."""
    func = click.option("--log-format", type=click.Choice(LOG_FORMATS), default="text", show_default=True,
                        envvar="ACCELPOLICY_LOG_FORMAT",
                        help="text, or json: one JSON object per line (loguru's serializer).")(func)
    return click.option("--log-level", type=click.Choice(LOG_LEVELS, case_sensitive=False), default="INFO",
                        show_default=True, envvar="ACCELPOLICY_LOG_LEVEL",
                        help="Least severe level logged.")(func)


def metrics_bind_option(func: Callable) -> Callable:
    """``--metrics-bind-address`` (``metrics_bind_address``): ``[HOST]:PORT``; ``0`` turns it off."""
    return click.option("--metrics-bind-address", default=DEFAULT_METRICS_BIND, show_default=True,
                        metavar="[HOST]:PORT",
                        help="Serve /metrics (Prometheus text) over plain HTTP here (an empty HOST: every "
                             "address; PORT 0: any free port); 0 turns it off.")(func)


def parse_bind_address(text: str) -> Optional[tuple[str, int]]:
    """``":8080"`` -> ``("0.0.0.0", 8080)``, ``"127.0.0.1:0"`` -> ``("127.0.0.1", 0)``, ``"0"`` -> None.
    Bad input exits 2 naming the option."""
    if text.strip() == "0":
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        click.echo(f"error: --metrics-bind-address {text!r}: expected [HOST]:PORT (e.g. :8080) or 0",
                   err=True)
        sys.exit(2)
    return host.strip("[]") or "0.0.0.0", int(port)


def serve_metrics(address: str, registry: CollectorRegistry):
    """Serve ``registry`` at ``address`` (see :func:`parse_bind_address`) in a daemon thread; returns
    the server (``server_port``: the bound port; ``shutdown()``) or None when off. A port that cannot
    be bound is logged as an error and the process goes on without it (the webhook server's /metrics,
    when served, still answers)."""
    bind = parse_bind_address(address)
    if bind is None:
        return None
    try:
        server, _ = start_http_server(bind[1], addr=bind[0], registry=registry)
    except OSError as exc:
        logger.error("--metrics-bind-address {}: cannot listen: {}; /metrics not served there",
                     address, exc.strerror or exc)
        return None
    logger.info("serving /metrics on http://{}:{}/metrics", bind[0], server.server_port)
    return server
