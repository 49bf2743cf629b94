"""`accelpolicy webhook`: serve the admission webhooks over HTTPS."""
from __future__ import annotations

import tempfile

import click
from loguru import logger

from runtime.cli.common import engine_from, fail, policy_from, rules_cache_options, snapshot_from
from runtime.cli.observability import configure_logging, log_options
from runtime.engine.admission import admission_view

_OPTIONS = (
    click.option("--rules", default=None, envvar="ACCELPOLICY_RULES",
                 help="rules directory (default: the installed rules/, or env "
                      "ACCELPOLICY_RULES)"),
    rules_cache_options(log=True),
    click.option("--cert", default=None, help="serving certificate (PEM)"),
    click.option("--key", default=None, help="serving private key (PEM)"),
    click.option("--self-signed", "self_signed_dir", default=None, metavar="DIR",
                 help="development mode: make a CA and a certificate for 127.0.0.1 in DIR (ca.crt for "
                      "clients)"),
    click.option("--host", default="127.0.0.1", show_default=True),
    click.option("--port", default=9443, show_default=True, type=int),
    click.option("--snapshot", multiple=True, help="cluster snapshot files/directories the webhooks read"),
    click.option("--max-body-bytes", default=3 * 1024 * 1024, show_default=True, type=int),
    click.option("--read-timeout", default=10.0, show_default=True, type=click.FloatRange(min=0.1),
                 help="seconds a request may take to arrive whole (headers and body) before the connection "
                      "is closed"),
    click.option("--max-connections", default=512, show_default=True, type=click.IntRange(min=1),
                 help="connections and requests served at once; more are answered 503"),
    click.option("--deadline", "deadline_seconds", default=8.0, show_default=True,
                 type=click.FloatRange(min=0.1),
                 help="seconds to judge one review; a miss is answered with a Timeout denial "
                      "(keep it below the webhook's timeoutSeconds, 10 by default)"),
    click.option("--workers", default=None, type=click.IntRange(min=1),
                 help="reviews judged at once (threads; default: the CPU count)"),
    click.option("--watch-rules-seconds", type=click.FloatRange(min=0), default=2.0, show_default=True,
                 help="Poll the rules directory this often and swap in a changed set once it lints and "
                      "compiles (a broken set is refused, the working one keeps serving); 0: never. "
                      "As the controller's option of the same name."),
    log_options,
)
"""The options of `accelpolicy webhook`, top to bottom as --help lists them."""


def webhook_command(state_class: type | None = None) -> click.Command:
    """The `accelpolicy webhook` command serving with ``state_class`` (default
    :class:`runtime.webhook.app.WebhookState`; a subclass changes how a review is answered)."""

    def command(rules, cert, key, self_signed_dir, host, port, snapshot, max_body_bytes, read_timeout,
                max_connections, deadline_seconds, workers, watch_rules_seconds=2.0, log_level="INFO",
                log_format="text"):
        """Serve every AdmissionPolicy of the rules at its own path, plus /healthz, /readyz, /metrics.

        Either --cert and --key, or --self-signed DIR. Binds 127.0.0.1 unless --host says otherwise.
        The rules directory is watched (--watch-rules-seconds) and a changed set that loads is served
        from the next review on; a mounted ConfigMap's symlink swap counts as one change.
        """
        configure_logging(log_level, log_format)
        from runtime.reload.holder import RulesHolder
        from runtime.reload.hosts import WebhookHost
        from runtime.webhook.app import WebhookState, build_app
        from runtime.webhook.server import bind, serve

        cert, key = _tls_files(cert, key, self_signed_dir)
        policy = policy_from(rules)
        engine = engine_from(policy)
        state = (state_class or WebhookState)(max_body_bytes=max_body_bytes,
                                              deadline_seconds=deadline_seconds)
        if workers:
            state.workers = workers
        paths = {spec.path: name for name, spec in engine.policies.items()}
        app = build_app(state, paths)
        cluster = snapshot_from(snapshot)
        state.set_ready(engine, admission_view(policy, cluster))
        try:
            sock = bind(host, port)
        except OSError as exc:
            fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
        port = sock.getsockname()[1]
        for name, spec in sorted(engine.policies.items()):
            logger.info(f"serving {spec.webhook} at https://{host}:{port}{spec.path}")
        # no cluster: it decides alone, on its --snapshot objects and its recent reviews
        reload = RulesHolder(WebhookHost(state, cluster, lambda p: admission_view(p, cluster)),
                             policy.ruleset.root, policy.ruleset, registry=state.metrics.registry,
                             interval=watch_rules_seconds).start()
        state.report = reload.report
        if watch_rules_seconds > 0:
            logger.info(f"watching {policy.ruleset.root} for rule changes every {watch_rules_seconds:g}s")
        try:
            serve(app, sock, cert, key, read_timeout=read_timeout, max_connections=max_connections)
        finally:
            reload.stop()

    for option in reversed(_OPTIONS):
        command = option(command)
    return click.command("webhook")(command)


def _tls_files(cert: str | None, key: str | None, self_signed_dir: str | None) -> tuple[str, str]:
    """The serving certificate and key: given, or made in ``self_signed_dir`` (development mode);
    bad input exits 2 naming the files."""
    import ssl

    from runtime.webhook.server import check_tls, self_signed

    try:
        if self_signed_dir is not None:
            paths = self_signed(self_signed_dir or tempfile.mkdtemp(prefix="accelpolicy-webhook-"))
            cert, key = str(paths["cert"]), str(paths["key"])
            logger.info(f"self-signed: CA {paths['ca']}, certificate {cert}")
        elif not (cert and key):
            fail("give --cert and --key, or --self-signed DIR")
        check_tls(cert, key)
    except ssl.SSLError as exc:
        fail(
            f"--cert {cert} / --key {key}: not a PEM certificate and matching private key "
            f"({exc.reason or exc})")
    except OSError as exc:
        fail(f"{exc.filename or self_signed_dir}: {exc.strerror or exc}")
    return cert, key


command = webhook_command()
