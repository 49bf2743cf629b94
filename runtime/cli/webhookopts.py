"""The controller's webhook options (`accelpolicy controller --webhook-*`): their checks, the TLS they
give, the shared serving certificate, the webhook server in the controller's process, and registration
alone for the `accelpolicy admission` replicas (--webhook-registration-only; docs/availability.md).
Bad input exits 2 naming the option (:func:`runtime.cli.common.fail`)."""
from __future__ import annotations

import ssl
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import click
from loguru import logger

from runtime.cli.common import fail
from runtime.controller.cabundle import CaPublisher
from runtime.controller.reconciler import Controller
from runtime.controller.servingcert import ServingCertificate, reload_server_tls, service_names
from runtime.controller.registrar import WebhookRegistrar
from runtime.controller.webhooks import ControllerWebhooks, WebhookTls
from runtime.engine.admission.registration import ClientConfig
from runtime.kube.session import KubeApiError
from runtime.reload.replicas import ReplicaReports, service_endpoints, url_endpoints
from runtime.webhook.server import check_tls, self_signed


#: the webhook options' short names (the keys :func:`webhook_options` reads) -> the command's parameters
WEBHOOK_PARAMS = {
    "port": "webhook_port", "host": "webhook_host", "cert": "webhook_cert", "key": "webhook_key",
    "ca": "webhook_ca", "self_signed": "webhook_self_signed", "url_base": "webhook_url_base",
    "service": "webhook_service", "cert_secret": "webhook_cert_secret", "cert_dir": "webhook_cert_dir",
    "cert_issuer": "webhook_cert_issuer", "cert_days": "webhook_cert_days",
    "cert_renew_days": "webhook_cert_renew_days", "cert_check_seconds": "webhook_cert_check_seconds",
    "registration_only": "registration_only", "owner": "webhook_owner_clusterrole"}


def webhook_values(params: dict) -> dict:
    """The webhook options by their short names from the command's parameters (click's ``params``);
    ``register`` is the opposite of --no-webhook-registration."""
    return {**{short: params.get(name) for short, name in WEBHOOK_PARAMS.items()},
            "register": not params.get("no_registration")}


def webhook_options(once: bool, opts: dict) -> dict | None:
    """The webhook options, or None without --webhook-port (or --webhook-registration-only); a webhook
    option without either, or either with --once, exits 2."""
    if opts["registration_only"]:
        registration_only_options(once, opts)
        return opts
    if opts["port"] is None:
        given = [name for name, key in (("--webhook-cert", "cert"), ("--webhook-key", "key"),
                                        ("--webhook-cert-secret", "cert_secret"),
                                        ("--webhook-cert-dir", "cert_dir"), ("--webhook-ca", "ca"),
                                        ("--webhook-self-signed", "self_signed"),
                                        ("--webhook-url-base", "url_base"), ("--webhook-service", "service"),
                                        ("--webhook-owner-clusterrole", "owner"))
                 if opts[key]]
        if given:
            fail(f"{', '.join(given)} need --webhook-port")
        return None
    if once:
        fail("--once reconciles and exits: it serves no webhooks (drop --webhook-port)")
    return opts


def registration_only_options(once: bool, opts: dict) -> None:
    """--webhook-registration-only: exits 2 on an option that serves here or cannot be registered."""
    if once:
        fail("--once reconciles and exits: it registers no webhooks (drop --webhook-registration-only)")
    if opts["port"] is not None:
        fail("--webhook-registration-only serves no webhook here: drop --webhook-port")
    if not opts["register"]:
        fail("--webhook-registration-only and --no-webhook-registration leave nothing to do: give one")
    if not (opts["service"] or opts["url_base"]):
        fail("--webhook-registration-only needs --webhook-service NS/NAME[:PORT] or --webhook-url-base URL "
             "(where the admission replicas answer)")
    serving = [name for name, key in (("--webhook-cert", "cert"), ("--webhook-key", "key"),
                                      ("--webhook-self-signed", "self_signed")) if opts[key]]
    if serving:
        fail(f"--webhook-registration-only serves no webhook here: drop {', '.join(serving)} (give the CA "
             f"with "
             "--webhook-ca FILE or --webhook-cert-secret NAME)")
    if not (opts["cert_secret"] or opts["ca"]):
        fail(
            "--webhook-registration-only needs the CA to register: --webhook-cert-secret NAME or "
            "--webhook-ca FILE")


@dataclass
class Registration:
    """--webhook-registration-only: where the admission replicas answer and the CA that verifies them
    (``tls.ca_pem``; with a ``serving_cert``, its ca.crt, followed when it rotates)."""

    session: object
    tls: WebhookTls
    service: tuple[str, str, int] | None
    url_base: str | None
    serving_cert: ServingCertificate | None
    owner: str | None = None   # --webhook-owner-clusterrole
    registrar: WebhookRegistrar | None = None   # this term's, once registering

    def client(self) -> ClientConfig:
        ca = self.serving_cert.data["ca.crt"] if self.serving_cert is not None else self.tls.ca_pem
        if self.service is not None:
            return ClientConfig(ca_pem=ca, service=self.service)
        return ClientConfig(ca_pem=ca, url_base=self.url_base)

    def reports(self) -> ReplicaReports:
        """The admission replicas' own reports (``/generation``): at the URL base, or each endpoint of the
        Service."""
        if self.service is not None:
            namespace, name, port = self.service
            return ReplicaReports(lambda: service_endpoints(self.session, namespace, name, port),
                                  lambda: self.client().ca_pem)
        return ReplicaReports(lambda: url_endpoints(self.url_base), lambda: self.client().ca_pem)

    def readyz_url(self) -> str:
        """Where the admission replicas answer ``/readyz`` (through the Service, or at the URL base)."""
        if self.service is not None:
            namespace, name, port = self.service
            return f"https://{name}.{namespace}.svc:{port}/readyz"
        return f"{self.url_base.rstrip('/')}/readyz"

    def wait_ready(self, stop: threading.Event, timeout: float = 120.0) -> bool:
        """Poll :meth:`readyz_url` (verified with the CA) once a second until it answers 200, ``stop`` is
        set or ``timeout`` seconds passed; True when it answered. A webhook registered before any
        replica is ready would refuse every review meanwhile (``failurePolicy: Fail``)."""
        import urllib.request

        deadline, url, last = time.monotonic() + timeout, self.readyz_url(), ""
        while not stop.is_set():
            try:
                context = ssl.create_default_context(cadata=self.client().ca_pem.decode())
                with urllib.request.urlopen(url, context=context, timeout=5) as answer:
                    if answer.status == 200:
                        return True
            except (OSError, ValueError, ssl.SSLError) as exc:
                if str(exc) != last:
                    last = str(exc)
                    logger.info("waiting for the admission replicas at {} before registering: {}", url, exc)
            if time.monotonic() > deadline or stop.wait(1.0):
                return False
        return False

    def start(self, controller: Controller, stop: threading.Event) -> Callable[[], None]:
        """In a thread: wait until the admission replicas are ready (at most 120 s; then register anyway,
        with a warning), register (the leader's job) and keep the configurations, re-registered on a new
        CA. Returns the function that stops it."""
        holder: list[WebhookRegistrar] = []
        listeners: list = []   # this term's, taken off the certificate again by halt()

        def register() -> None:
            if not self.wait_ready(stop) and not stop.is_set():
                logger.warning("the admission replicas at {} are not ready: registering the webhooks anyway",
                               self.readyz_url())
            if stop.is_set():
                return
            registrar = WebhookRegistrar(self.session, controller.policy, self.client(), owner=self.owner,
                                         policy_of=lambda: controller.policy,
                                         served=self.reports().served_paths).start()
            holder.append(registrar)
            self.registrar = registrar
            if self.serving_cert is not None:
                listeners.append(lambda data: registrar.retarget(self.client()))
                self.serving_cert.listeners.append(listeners[-1])
            for desired in registrar.desired:
                logger.info(
                    f"registered {desired['kind']} {desired['metadata']['name']} for the admission replicas")
        thread = threading.Thread(target=register, name="webhook-registration", daemon=True)
        thread.start()

        def halt() -> None:
            thread.join(10.0)
            for registrar in holder:
                registrar.stop()
            self.registrar = None
            for listener in listeners:
                if self.serving_cert is not None and listener in self.serving_cert.listeners:
                    self.serving_cert.listeners.remove(listener)
        return halt


def serving_certificate(session, namespace: str, service: tuple[str, str, int] | None,
                         stop: threading.Event, opts: dict) -> tuple[ServingCertificate, WebhookTls]:
    """--webhook-cert-secret: the shared serving certificate (created, or read, in ``namespace``) and
    the TLS it gives now; exits 1 when it cannot be had."""
    secret = opts["cert_secret"]
    serving_cert = ServingCertificate(
        session, namespace, secret,
        service_names(service[0], service[1]) if service else ("127.0.0.1", "localhost"), opts["cert_dir"],
        manage=opts["cert_issuer"] == "accelpolicy", days=opts["cert_days"],
        renew_days=opts["cert_renew_days"], check_seconds=opts["cert_check_seconds"])
    try:
        data = serving_cert.ensure(stop=stop)
    except (KubeApiError, TimeoutError) as exc:
        click.echo(f"error: serving certificate: {exc}", err=True)
        sys.exit(1)
    tls = WebhookTls(serving_cert.paths["tls.crt"], serving_cert.paths["tls.key"], data["ca.crt"])
    logger.info(
        f"serving certificate from Secret {namespace}/{secret} ({opts['cert_issuer']}) in {opts['cert_dir']}")
    return serving_cert, tls


def follow_certificate(serving_cert: ServingCertificate | None, webhooks: ControllerWebhooks | None,
                        stop: threading.Event, ca_publisher: CaPublisher | None = None) -> None:
    """Reload the server's TLS and the registered caBundle whenever the shared certificate changes
    (``webhooks``: None when this process serves none, --webhook-registration-only); the leader also
    publishes its CA certificate (``ca_publisher``, --webhook-ca-configmap; nothing without a ConfigMap
    name). Nothing to do without a shared certificate (``serving_cert`` None)."""
    if serving_cert is None:
        return
    if ca_publisher is not None and not ca_publisher.name:
        ca_publisher = None
    if webhooks is not None:
        serving_cert.listeners.append(lambda data: (
            reload_server_tls(webhooks.server, serving_cert.paths["tls.crt"], serving_cert.paths["tls.key"]),
            webhooks.use_ca(data["ca.crt"])))
    if ca_publisher is not None:
        serving_cert.listeners.append(
            lambda data: ca_publisher.publish(data["ca.crt"]) if serving_cert.leading.is_set() else None)
        serving_cert.on_leading.append(lambda: ca_publisher.publish(serving_cert.data["ca.crt"]))
    serving_cert.start(stop)


def webhook_tls(opts: dict) -> tuple[WebhookTls, tuple[str, str, int] | None]:
    """The serving TLS files and CA, and the parsed --webhook-service; bad input exits 2."""
    service = None
    if opts["service"]:
        if opts["url_base"]:
            fail("give --webhook-url-base or --webhook-service, not both")
        ref, _, port = opts["service"].partition(":")
        namespace, _, name = ref.partition("/")
        if not namespace or not name or (port and not port.isdigit()):
            fail(f"--webhook-service {opts['service']!r}: expected NAMESPACE/NAME[:PORT]")
        service = (namespace, name, int(port or 443))
    if opts["url_base"] and not opts["url_base"].startswith("https://"):
        fail(f"--webhook-url-base {opts['url_base']!r}: the API server calls webhooks over https://")
    files = (opts["cert"], opts["key"], opts["ca"])
    if opts.get("registration_only") and not opts["cert_secret"]:  # the CA alone: nothing served here
        ca_pem = read_ca(opts["ca"])
        return WebhookTls(None, None, ca_pem), service
    if opts["cert_secret"]:
        if any(files) or opts["self_signed"] is not None:
            fail("give --webhook-cert-secret or --webhook-cert/--webhook-key/--webhook-ca or "
                 "--webhook-self-signed, not two of them")
        if opts["cert_dir"] is None:
            fail("--webhook-cert-secret needs --webhook-cert-dir DIR (where its files are written)")
        return None, service  # read from the Secret once connected
    if opts["cert_dir"] is not None:
        fail("--webhook-cert-dir needs --webhook-cert-secret")
    try:
        if opts["self_signed"] is not None:
            if any(files):
                fail("give --webhook-self-signed DIR or --webhook-cert/--webhook-key/--webhook-ca, not both")
            names = ("127.0.0.1", "localhost")
            if service:
                names += (f"{service[1]}.{service[0]}.svc", f"{service[1]}.{service[0]}.svc.cluster.local")
            paths = self_signed(opts["self_signed"], names)
            logger.info(f"self-signed: CA {paths['ca']}, certificate {paths['cert']}")
            tls = WebhookTls(paths["cert"], paths["key"], paths["ca"].read_bytes())
        elif not all(files):
            fail(
                "--webhook-port needs TLS: --webhook-cert, --webhook-key and --webhook-ca, or "
                "--webhook-self-signed DIR")
        else:
            check_tls(str(opts["cert"]), str(opts["key"]))
            tls = WebhookTls(opts["cert"], opts["key"], read_ca(opts["ca"]))
    except ssl.SSLError as exc:
        fail(f"--webhook-cert {opts['cert']} / --webhook-key {opts['key']}: not a PEM certificate and "
             f"matching private key ({exc.reason or exc})")
    except OSError as exc:
        fail(f"{exc.filename or opts['self_signed']}: {exc.strerror or exc}")
    return tls, service


def read_ca(path: Path) -> bytes:
    """The PEM bundle of --webhook-ca; exits 2 when it holds no certificate or cannot be read."""
    try:
        ca_pem = path.read_bytes()
    except OSError as exc:
        fail(f"--webhook-ca {path}: {exc.strerror or exc}")
    if b"-----BEGIN CERTIFICATE-----" not in ca_pem:
        fail(f"--webhook-ca {path}: no PEM certificate in it")
    return ca_pem


def serve_webhooks(controller: Controller, opts: dict, tls: WebhookTls,
                    service: tuple[str, str, int] | None) -> ControllerWebhooks:
    """Start the HTTPS server, sync the caches (every replica), then serve from them."""
    try:
        webhooks = ControllerWebhooks(controller, tls, host=opts["host"], port=opts["port"],
                                      url_base=opts["url_base"], service=service,
                                      register_configurations=opts["register"],
                                      owner_clusterrole=opts["owner"])
    except KeyError as exc:
        fail(str(exc.args[0]) if exc.args else str(exc))
    try:
        webhooks.serve()
    except OSError as exc:
        fail(f"cannot listen on {opts['host']}:{opts['port']}: {exc.strerror or exc}")
    for spec in sorted(webhooks.engine.policies.values(), key=lambda s: s.path):
        logger.info(f"serving {spec.webhook} at https://{opts['host']}:{webhooks.port}{spec.path}")
    controller.start_caches(until_pass=False)  # a standby serves from them for as long as it waits
    webhooks.ready()
    logger.info("webhooks ready (watch caches synced)")
    return webhooks
