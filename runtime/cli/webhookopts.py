"""The webhook options: one group, one name per option, shared by `accelpolicy webhook`, `accelpolicy
admission` and `accelpolicy controller` (docs/reference/cli.md), all three serving through the one
webhook host (:class:`runtime.webhook.host.WebhookServer`).

:func:`webhook_options` adds the group to a command (``webhook``: no cluster; ``admission`` and
``controller`` also ``--namespace`` and the Secret-held certificate) with the names each command had
before accepted, with a warning, until :data:`runtime.cli.common.FORMER_NAMES_UNTIL` (:data:`FORMER`).
:func:`values_of` reads the group's values (short names: ``port``, ``cert_secret``, ...),
:func:`serving_of` turns them into the server's :class:`~runtime.webhook.host.ServingOptions`,
:func:`tls_choice` checks that exactly one TLS source is given, and :func:`self_signed_files` and
:func:`shared_certificate` make or fetch the files. Bad input exits 2 naming the option
(:func:`runtime.cli.common.fail`), a Secret that cannot be read 1.
"""
from __future__ import annotations

import ssl
import sys
import threading
from pathlib import Path
from typing import Callable

import click
from loguru import logger

from runtime.cli.common import fail, former_names
from runtime.webhook.app import DEFAULT_DEADLINE_SECONDS, DEFAULT_MAX_BODY, INLINE_SECONDS
from runtime.webhook.host import ServingOptions
from runtime.webhook.server import DEFAULT_MAX_CONNECTIONS, DEFAULT_READ_TIMEOUT, check_tls, self_signed

_WEBHOOK_FORMER = {"--host": "--webhook-host", "--port": "--webhook-port", "--cert": "--webhook-cert",
                   "--key": "--webhook-key", "--self-signed": "--webhook-self-signed",
                   "--max-body-bytes": "--webhook-max-body-bytes", "--read-timeout": "--webhook-read-timeout",
                   "--max-connections": "--webhook-max-connections", "--deadline": "--webhook-deadline",
                   "--workers": "--webhook-workers"}
#: per command, each former option name -> its name now (docs/reference/cli.md "Renamed options")
FORMER: dict[str, dict[str, str]] = {
    "webhook": _WEBHOOK_FORMER,
    "admission": {**_WEBHOOK_FORMER, "--cert-secret": "--webhook-cert-secret",
                  "--cert-dir": "--webhook-cert-dir", "--cert-check-seconds": "--webhook-cert-check-seconds",
                  "--drain-seconds": "--webhook-drain-seconds"},
    "controller": {"--lease-namespace": "--namespace"},
}
#: the group's parameters (click's names) -> the short names :func:`values_of` gives
PARAMS = {"webhook_host": "host", "webhook_port": "port", "webhook_cert": "cert", "webhook_key": "key",
          "webhook_self_signed": "self_signed", "webhook_cert_secret": "cert_secret",
          "webhook_cert_dir": "cert_dir", "webhook_cert_check_seconds": "cert_check_seconds",
          "webhook_max_body_bytes": "max_body_bytes", "webhook_read_timeout": "read_timeout",
          "webhook_max_connections": "max_connections", "webhook_deadline": "deadline",
          "webhook_workers": "workers", "webhook_drain_seconds": "drain_seconds"}
_FILE = click.Path(dir_okay=False, path_type=Path)
_DIR = click.Path(file_okay=False, path_type=Path)


def prose(text: str) -> str:
    """``text`` as one paragraph (its line breaks and indents collapsed): a help text written over lines."""
    return " ".join(text.split())


_HELP = {key: prose(text) for key, text in {
    "host": "Address the webhook server binds (0.0.0.0 in a Pod behind a Service).",
    "port": """Port of the HTTPS server (0: any free port): every webhook path, /healthz, /readyz,
        /metrics, /generation.""",
    "controller-port": """Serve the admission webhooks over HTTPS on port N (0: any free port) from the
        watch caches, and register them (leader only). Without it no webhook is served or registered.""",
    "cert": "Serving certificate (PEM), with --webhook-key{ca}.",
    "key": "Private key of --webhook-cert (PEM).",
    "self-signed": """Development: make a CA (DIR/ca.crt, for the registration's caBundle) and a serving
        certificate for 127.0.0.1, localhost{service} in DIR.""",
    "cert-secret": """Serve the certificate of Secret NAME in --namespace (keys tls.crt, tls.key, ca.crt),
        copied into --webhook-cert-dir and reloaded whenever it changes. The controller creates it when
        missing and its leader rotates it (--webhook-cert-issuer accelpolicy) or only reads it (external,
        e.g. cert-manager); an admission replica only reads it, waiting for it to appear. Its ca.crt is the
        registered caBundle.""",
    "cert-dir": "Where --webhook-cert-secret's files are written (a writable emptyDir in a Pod).",
    "cert-check-seconds": """How often --webhook-cert-secret is read again (and rotated by the
        controller's leader when due).""",
    "namespace": "The namespace accelpolicy runs in: of --webhook-cert-secret and --rules-configmap{more}.",
    "max-body-bytes": """Largest review body judged; a larger one gets a BadRequest denial (3 MiB:
        kube-apiserver's own request limit).""",
    "read-timeout": """Seconds a request may take to arrive whole (headers and body) before the
        connection is closed.""",
    "max-connections": "Connections and requests served at once; more are answered 503.",
    "deadline": """Seconds to judge one review; a miss is answered with a Timeout denial. Default: 2 s
        under the webhooks' timeoutSeconds of rules/admission/registration.yaml (8 for its 10).""",
    "workers": f"""Threads judging the reviews that need their cluster view built first or take longer
        than {INLINE_SECONDS * 1000:g} ms (the others are judged as they arrive, without a hand-off);
        default: the CPU count.""",
    "drain-seconds": """On SIGTERM, keep serving this long with `Connection: close` on every answer before
        the server stops, so kube-apiserver drops its keep-alive connections to this replica between
        reviews instead of racing a closing one ("failed to call webhook: ... EOF"). Comes after the Pod's
        preStop sleep; keep both within terminationGracePeriodSeconds.""",
    "watch-rules-seconds": """Poll the rules directory this often and swap in a changed set once it lints
        and compiles (a broken set is refused, the working one keeps serving); 0: never.""",
}.items()}


def _port(command: str):
    if command == "controller":
        return click.option("--webhook-port", type=click.IntRange(0, 65535), default=None, metavar="N",
                            help=_HELP["controller-port"])
    return click.option("--webhook-port", type=click.IntRange(0, 65535), default=9443, show_default=True,
                        help=_HELP["port"])


def _tls(command: str) -> list:
    controller = command == "controller"
    options = [
        click.option("--webhook-cert", type=_FILE, default=None, metavar="FILE",
                     help=_HELP["cert"].format(ca=" and --webhook-ca" if controller else "")),
        click.option("--webhook-key", type=_FILE, default=None, metavar="FILE", help=_HELP["key"]),
        click.option("--webhook-self-signed", type=_DIR, default=None, metavar="DIR",
                     help=_HELP["self-signed"].format(
                         service=" and the --webhook-service names" if controller else ""))]
    if command == "webhook":
        return options
    return options + [
        click.option("--webhook-cert-secret", default=None, metavar="NAME", help=_HELP["cert-secret"]),
        click.option("--webhook-cert-dir", type=_DIR, default=None, metavar="DIR", help=_HELP["cert-dir"]),
        click.option("--webhook-cert-check-seconds", type=click.FloatRange(min=0.1), default=60.0,
                     show_default=True, help=_HELP["cert-check-seconds"]),
        click.option("--namespace", default="gpustack-system", show_default=True,
                     envvar="KUBERNETES_POD_NAMESPACE", help=_HELP["namespace"].format(
                         more=", the leader Lease and --webhook-ca-configmap" if controller else ""))]


def _bounds(command: str) -> list:
    drain = 5.0 if command == "admission" else 0.0   # the replicas behind the chart's Service drain
    return [
        click.option("--webhook-max-body-bytes", default=DEFAULT_MAX_BODY, show_default=True,
                     type=click.IntRange(min=1), help=_HELP["max-body-bytes"]),
        click.option("--webhook-read-timeout", default=DEFAULT_READ_TIMEOUT, show_default=True,
                     type=click.FloatRange(min=0.1), help=_HELP["read-timeout"]),
        click.option("--webhook-max-connections", default=DEFAULT_MAX_CONNECTIONS, show_default=True,
                     type=click.IntRange(min=1), help=_HELP["max-connections"]),
        click.option("--webhook-deadline", type=click.FloatRange(min=0.1), default=None,
                     help=_HELP["deadline"]),
        click.option("--webhook-workers", type=click.IntRange(min=1), default=None, help=_HELP["workers"]),
        click.option("--webhook-drain-seconds", default=drain, show_default=True,
                     type=click.FloatRange(min=0), help=_HELP["drain-seconds"]),
        click.option("--watch-rules-seconds", type=click.FloatRange(min=0), default=2.0, show_default=True,
                     help=_HELP["watch-rules-seconds"])]


def webhook_options(command: str) -> Callable:
    """The group's options for ``command`` (``webhook``, ``admission`` or ``controller``), in --help order,
    each former name of :data:`FORMER` accepted with a warning. The command receives them as keyword
    arguments (their parameters are :data:`PARAMS`' keys, plus ``namespace`` and ``watch_rules_seconds``)."""
    options = [click.option("--webhook-host", default="127.0.0.1", show_default=True, help=_HELP["host"]),
               _port(command), *_tls(command), *_bounds(command)]

    def decorate(func: Callable) -> Callable:
        for option in reversed(options):
            func = option(func)
        return former_names(FORMER[command])(func)
    return decorate


def values_of(params: dict, names: dict[str, str] = PARAMS) -> dict:
    """The values of ``names`` (click's parameter names -> short names; the group's :data:`PARAMS` unless
    given) by short name, taken out of ``params`` (click's keyword arguments); the ones a command lacks are
    None."""
    return {short: params.pop(name, None) for name, short in names.items()}


def deadline_of(value: float | None, policy) -> float:
    """--webhook-deadline, or 2 s under the timeoutSeconds of the rules' WebhookRegistration (at least
    1 s; :data:`runtime.webhook.app.DEFAULT_DEADLINE_SECONDS` without one)."""
    if value is not None:
        return value
    from runtime.engine.admission.registration import registration_of
    try:
        timeout = registration_of(policy).timeoutSeconds
    except KeyError:
        return DEFAULT_DEADLINE_SECONDS
    return max(1.0, timeout - 2.0)


def serving_of(values: dict, policy) -> ServingOptions:
    """The server's options from the group's values (:func:`values_of`); ``policy``: the rules served
    (the default deadline, :func:`deadline_of`)."""
    return ServingOptions(host=values["host"], port=values["port"], max_body_bytes=values["max_body_bytes"],
                          read_timeout=values["read_timeout"], max_connections=values["max_connections"],
                          deadline_seconds=deadline_of(values["deadline"], policy), workers=values["workers"],
                          drain_seconds=values["drain_seconds"] or 0.0)


def tls_choice(values: dict, command: str) -> None:
    """Exactly one TLS source among --webhook-cert and --webhook-key, --webhook-cert-secret (with
    --webhook-cert-dir; not for ``webhook``) and --webhook-self-signed; the files given are a readable,
    matching PEM pair. Exits 2 naming the options otherwise."""
    cluster = command != "webhook"
    if values["cert_secret"] and values["cert_dir"] is None:
        fail("--webhook-cert-secret needs --webhook-cert-dir DIR (where its files are written)")
    if values["cert_dir"] is not None and not values["cert_secret"]:
        fail("--webhook-cert-dir needs --webhook-cert-secret")
    given = [name for name, value in (("--webhook-cert/--webhook-key", values["cert"] or values["key"]),
                                      ("--webhook-self-signed", values["self_signed"] is not None),
                                      ("--webhook-cert-secret", values["cert_secret"])) if value]
    if len(given) != 1:
        files = "--webhook-cert and --webhook-key" + (" and --webhook-ca" if command == "controller" else "")
        secret = "--webhook-cert-secret NAME with --webhook-cert-dir DIR, " if cluster else ""
        fail(f"give one of {files}, {secret}or --webhook-self-signed DIR"
             + (f" (got {', '.join(given)})" if given else ""))
    if values["cert"] or values["key"]:
        check_files(values["cert"], values["key"])


def check_files(cert: Path | None, key: Path | None) -> None:
    """--webhook-cert and --webhook-key both given, readable and a matching PEM pair; exits 2 naming them
    otherwise."""
    if not (cert and key):
        fail("give --webhook-cert and --webhook-key together")
    for option, path in (("--webhook-cert", cert), ("--webhook-key", key)):
        if not Path(path).is_file():
            fail(f"{option} {path}: No such file")
    try:
        check_tls(str(cert), str(key))
    except ssl.SSLError as exc:
        fail(f"--webhook-cert {cert} / --webhook-key {key}: not a PEM certificate and matching private key "
             f"({exc.reason or exc})")
    except OSError as exc:
        fail(f"{exc.filename}: {exc.strerror or exc}")


def self_signed_files(directory: Path,
                      names: tuple[str, ...] = ("127.0.0.1", "localhost")) -> dict[str, Path]:
    """--webhook-self-signed: a new CA and a certificate for ``names`` in ``directory`` (``ca``, ``cert``,
    ``key`` paths, :func:`runtime.webhook.server.self_signed`), logged; exits 2 when it cannot be written."""
    try:
        paths = self_signed(directory, names)
    except OSError as exc:
        fail(f"--webhook-self-signed {directory}: {exc.strerror or exc}")
    logger.info(f"self-signed: CA {paths['ca']}, certificate {paths['cert']}")
    return paths


def shared_certificate(session, namespace: str, values: dict, stop: threading.Event,
                       names: tuple[str, ...] = (), manage: bool = False, days: float = 90.0,
                       renew_days: float = 30.0):
    """--webhook-cert-secret: the :class:`runtime.controller.servingcert.ServingCertificate` of the Secret
    in ``namespace``, its files written into --webhook-cert-dir (``manage``: created when missing and
    rotated by the leader, for ``names``, valid ``days`` and renewed ``renew_days`` before the end; else
    only read, waited for). Exits 1 when it cannot be had."""
    from runtime.controller.servingcert import ServingCertificate
    from runtime.kube.session import KubeApiError

    certificate = ServingCertificate(session, namespace, values["cert_secret"], names, values["cert_dir"],
                                     manage=manage, days=days, renew_days=renew_days,
                                     check_seconds=values["cert_check_seconds"])
    try:
        certificate.ensure(stop=stop)
    except (KubeApiError, TimeoutError) as exc:
        click.echo(f"error: serving certificate: {exc}", err=True)
        sys.exit(1)
    logger.info(f"serving certificate from Secret {namespace}/{values['cert_secret']} "
                f"({'created and rotated here' if manage else 'read'}) in {values['cert_dir']}")
    return certificate
