"""One option group for the three webhook hosts (runtime/cli/webhookopts.py): `accelpolicy webhook`, `admission`
and `controller` take the same --webhook-* options under the same names, and every name a command had before
still works for one release, with a warning naming the new one (runtime/cli/common.py ``former_names``)."""
from __future__ import annotations

import os
import signal

import click
import pytest
from click.testing import CliRunner

from runtime.cli import main
from runtime.cli.common import FORMER_NAMES_UNTIL, former_names, stop_on_signals
from runtime.cli.webhookopts import FORMER

SERVING = ["--webhook-host", "--webhook-port", "--webhook-cert", "--webhook-key", "--webhook-self-signed",
           "--webhook-max-body-bytes", "--webhook-read-timeout", "--webhook-max-connections", "--webhook-deadline",
           "--webhook-workers", "--webhook-drain-seconds", "--watch-rules-seconds"]
CLUSTER = ["--webhook-cert-secret", "--webhook-cert-dir", "--webhook-cert-check-seconds", "--namespace"]


def _command(name: str) -> click.Command:
    return main.get_command(click.Context(main), name)


def _options(name: str) -> dict[str, click.Option]:
    return {opt: param for param in _command(name).params if not param.hidden for opt in param.opts}


def test_the_three_commands_take_the_same_webhook_options_under_the_same_names():
    for name, expected in (("webhook", SERVING), ("admission", SERVING + CLUSTER), ("controller", SERVING + CLUSTER)):
        options = _options(name)
        assert [opt for opt in SERVING + CLUSTER if opt in options] == expected, name
    webhook, admission, controller = (_options(name) for name in ("webhook", "admission", "controller"))
    for opt in SERVING:   # one option each: the same type everywhere, the same default where the commands agree
        assert type(webhook[opt].type) is type(admission[opt].type) is type(controller[opt].type), opt
    assert [admission[opt].default for opt in ("--webhook-port", "--webhook-drain-seconds", "--namespace")] == [
        9443, 5.0, "gpustack-system"]
    assert [controller[opt].default for opt in ("--webhook-port", "--webhook-drain-seconds", "--namespace")] == [
        None, 0.0, "gpustack-system"]
    assert not {"--lease-namespace", "--cert-secret", "--port", "--self-signed"} & (set(admission) | set(controller))


def test_every_former_name_is_hidden_and_stands_for_its_new_one():
    for name, renamed in FORMER.items():
        hidden = {param.opts[0]: param for param in _command(name).params if param.hidden}
        assert set(hidden) == set(renamed), name
        for former, current in renamed.items():
            assert hidden[former].current == current and current in _options(name), (name, former)


def test_a_former_name_still_works_with_a_warning_naming_the_new_one():
    result = CliRunner().invoke(main, ["admission", "--cert-secret", "tls"])
    assert result.exit_code == 2
    assert result.stderr == (
        f"warning: --cert-secret is deprecated, use --webhook-cert-secret (the former name is accepted until "
        f"accelpolicy {FORMER_NAMES_UNTIL})\n"
        "error: --webhook-cert-secret needs --webhook-cert-dir DIR (where its files are written)\n")


@pytest.mark.parametrize("args, error", [
    (["webhook", "--cert", "/nonexistent/tls.crt"], "error: give --webhook-cert and --webhook-key together"),
    (["controller", "--lease-namespace", "ops", "--webhook-cert-secret", "tls"],
     "error: --webhook-cert-secret need --webhook-port"),
])
def test_each_command_takes_its_own_former_names(args, error):
    result = CliRunner().invoke(main, args)
    former, current = args[1], FORMER[args[0]][args[1]]
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"warning: {former} is deprecated, use {current} (the former name is accepted until accelpolicy "
        f"{FORMER_NAMES_UNTIL})", error]


def test_a_former_name_beside_its_new_name_is_refused():
    result = CliRunner().invoke(main, ["admission", "--port", "1", "--webhook-port", "2"])
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1] == "error: --port and --webhook-port are one option: give --webhook-port alone"


def test_former_names_give_their_value_and_beat_the_environment(monkeypatch):
    @click.command()
    @former_names({"--lease-namespace": "--namespace"})
    @click.option("--namespace", default="gpustack-system", envvar="KUBERNETES_POD_NAMESPACE")
    def command(namespace):
        click.echo(f"namespace={namespace}")

    runner = CliRunner()
    assert runner.invoke(command, []).output == "namespace=gpustack-system\n"
    given = runner.invoke(command, ["--lease-namespace", "ops"])
    assert given.stdout == "namespace=ops\n" and given.stderr.startswith(
        "warning: --lease-namespace is deprecated, use --namespace")
    monkeypatch.setenv("KUBERNETES_POD_NAMESPACE", "from-env")
    assert runner.invoke(command, []).stdout == "namespace=from-env\n"
    assert runner.invoke(command, ["--lease-namespace", "ops"]).stdout == "namespace=ops\n"
    assert "--lease-namespace" not in runner.invoke(command, ["--help"]).output


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_sigint_set_the_event_a_serving_command_stops_on(sig):
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        stop = stop_on_signals()
        assert not stop.is_set()
        os.kill(os.getpid(), sig)
        assert stop.wait(5)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
