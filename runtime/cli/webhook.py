"""`accelpolicy webhook`: serve the admission webhooks over HTTPS from snapshot files, no cluster (the
webhook options: :mod:`runtime.cli.webhookopts`; the server: :class:`runtime.webhook.host.WebhookServer`)."""
from __future__ import annotations

import click
from loguru import logger

from runtime.cli.common import (engine_from, fail, policy_from, rules_cache_options, snapshot_from,
                                stop_on_signals)
from runtime.cli.observability import configure_logging, log_options
from runtime.cli.webhookopts import self_signed_files, serving_of, tls_choice, values_of, webhook_options
from runtime.engine.admission import admission_view


def webhook_command(state_class: type | None = None) -> click.Command:
    """The `accelpolicy webhook` command serving with ``state_class`` (default
    :class:`runtime.webhook.app.WebhookState`; a subclass changes how a review is answered)."""

    @click.command("webhook")
    @click.option("--rules", default=None, envvar="ACCELPOLICY_RULES",
                  help="rules directory (default: the installed rules/, or env ACCELPOLICY_RULES)")
    @rules_cache_options(log=True)
    @click.option("--snapshot", multiple=True, help="cluster snapshot files/directories the webhooks read")
    @webhook_options("webhook")
    @log_options
    def command(rules, snapshot, watch_rules_seconds=2.0, log_level="INFO", log_format="text", **webhook):
        """Serve every AdmissionPolicy of the rules at its own path, plus /healthz, /readyz, /metrics.

        Either --webhook-cert and --webhook-key, or --webhook-self-signed DIR. Binds 127.0.0.1 unless
        --webhook-host says otherwise. The rules directory is watched (--watch-rules-seconds) and a
        changed set that loads is served from the next review on; a mounted ConfigMap's symlink swap
        counts as one change. Stops on SIGINT or SIGTERM (after --webhook-drain-seconds).
        """
        configure_logging(log_level, log_format)
        values = values_of(webhook)
        cert, key = _tls_files(values)
        policy = policy_from(rules)
        cluster = snapshot_from(snapshot)
        _serve(policy, engine_from(policy), cluster, values, cert, key, watch_rules_seconds, state_class)

    return command


def _serve(policy, engine, cluster, values: dict, cert, key, watch_rules_seconds: float,
           state_class: type | None) -> None:
    """Serve until SIGINT/SIGTERM; the rules holder (no cluster: it decides alone, on the ``--snapshot``
    objects and its recent reviews) installs each accepted generation. A port in use exits 2."""
    from runtime.reload.holder import RulesHolder
    from runtime.reload.hosts import WebhookHost
    from runtime.webhook.app import WebhookState
    from runtime.webhook.host import WebhookServer

    server = WebhookServer(engine, serving_of(values, policy), cert, key,
                           state_class=state_class or WebhookState)
    server.install(engine, admission_view(policy, cluster))
    stop = stop_on_signals()
    try:
        server.serve()
    except OSError as exc:
        fail(f"cannot listen on {values['host']}:{values['port']}: {exc.strerror or exc}")
    server.log_served()
    reload = RulesHolder(WebhookHost(server, cluster, lambda p: admission_view(p, cluster)),
                         policy.ruleset.root, policy.ruleset, registry=server.state.metrics.registry,
                         interval=watch_rules_seconds).start()
    server.state.report = reload.report
    if watch_rules_seconds > 0:
        logger.info(f"watching {policy.ruleset.root} for rule changes every {watch_rules_seconds:g}s")
    try:
        stop.wait()
    finally:
        reload.stop()
        server.stop()


def _tls_files(values: dict) -> tuple[str, str]:
    """The serving certificate and key: given, or made in --webhook-self-signed's directory (development
    mode); bad input exits 2 naming the files."""
    tls_choice(values, "webhook")
    if values["self_signed"] is None:
        return str(values["cert"]), str(values["key"])
    paths = self_signed_files(values["self_signed"])
    return str(paths["cert"]), str(paths["key"])


command = webhook_command()
