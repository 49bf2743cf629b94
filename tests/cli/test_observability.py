"""The shared options of long-running commands (runtime/cli/observability.py): JSON log lines that
parse, stdlib logging routed through loguru, and the plain-HTTP /metrics server."""
from __future__ import annotations

import json
import logging
import sys
import urllib.request

import pytest
from click.testing import CliRunner
from loguru import logger
from prometheus_client import CollectorRegistry, Gauge

from runtime.cli import main
from runtime.cli.observability import _ToLoguru, configure_logging, parse_bind_address, serve_metrics


@pytest.fixture
def restore_logging():
    yield
    logger.remove()
    logger.add(sys.stderr)
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _ToLoguru)]:
        root.removeHandler(handler)
    root.setLevel(logging.WARNING)


def test_json_lines_parse_and_carry_level_extra_and_stdlib_records(restore_logging):
    lines: list[str] = []
    configure_logging("debug", "json", sink=lines.append)
    logger.bind(writes=3).info("reconcile: {} writes", 3)
    logger.debug("a debug line")
    logging.getLogger("accelpolicy.stdlib").warning("from the standard library")
    records = [json.loads(line)["record"] for line in lines]
    assert [(r["level"]["name"], r["message"]) for r in records] == [
        ("INFO", "reconcile: 3 writes"), ("DEBUG", "a debug line"), ("WARNING", "from the standard library")]
    assert records[0]["extra"] == {"writes": 3}


def test_level_filters_and_text_is_not_json(restore_logging):
    lines: list[str] = []
    configure_logging("WARNING", "text", sink=lines.append)
    logger.info("hidden")
    logger.warning("shown")
    assert len(lines) == 1 and "WARNING" in lines[0] and lines[0].rstrip().endswith("shown")
    with pytest.raises(ValueError, match="unknown log format 'xml'"):
        configure_logging("INFO", "xml")


def test_every_long_running_command_has_the_log_options():
    for name in ("controller", "webhook", "agent"):
        result = CliRunner().invoke(main, [name, "--help"])
        assert "--log-level" in result.output and "--log-format [text|json]" in result.output, name
    assert "--metrics-bind-address" in CliRunner().invoke(main, ["controller", "--help"]).output


def test_bind_addresses():
    assert parse_bind_address(":8080") == ("0.0.0.0", 8080)
    assert parse_bind_address("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_bind_address("[::1]:9090") == ("::1", 9090)
    assert parse_bind_address("0") is None


def test_a_bad_bind_address_exits_2_naming_the_option(capsys):
    with pytest.raises(SystemExit) as exc:
        parse_bind_address("localhost")
    assert exc.value.code == 2
    assert capsys.readouterr().err == ("error: --metrics-bind-address 'localhost': expected [HOST]:PORT "
                                       "(e.g. :8080) or 0\n")


def test_served_registry_scrapes_and_a_taken_port_is_an_error_not_a_crash(restore_logging):
    registry = CollectorRegistry()
    Gauge("accelpolicy_leader", "leader", registry=registry).set(1)
    server = serve_metrics("127.0.0.1:0", registry)
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=5).read().decode()
        assert "accelpolicy_leader 1.0" in text.splitlines()
        lines: list[str] = []
        configure_logging("INFO", "json", sink=lines.append)
        assert serve_metrics(f"127.0.0.1:{server.server_port}", registry) is None
        message = json.loads(lines[-1])["record"]["message"]
        assert message.startswith(f"--metrics-bind-address 127.0.0.1:{server.server_port}: cannot listen: ")
    finally:
        server.shutdown()
        server.server_close()
    assert serve_metrics("0", registry) is None
