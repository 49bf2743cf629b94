"""The controller's own webhook options (`accelpolicy controller`): registering the webhook configurations
(--webhook-ca, --webhook-url-base, --webhook-service, --no-webhook-registration), the shared certificate it
issues (--webhook-cert-issuer, --webhook-cert-days, ...), their checks beside the webhook options every
webhook host takes (:mod:`runtime.cli.webhookopts`), the TLS they give, the webhook server in the
controller's process, and registration alone for the `accelpolicy admission` replicas
(--webhook-registration-only; docs/availability.md). Bad input exits 2 naming the option
(:func:`runtime.cli.common.fail`)."""
from __future__ import annotations

import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import click
from loguru import logger

from runtime.cli.common import fail
from runtime.cli.webhookopts import (prose, self_signed_files, serving_of, shared_certificate, tls_choice,
                                     values_of)
from runtime.controller.cabundle import CaPublisher
from runtime.controller.reconciler import Controller
from runtime.controller.servingcert import ServingCertificate, service_names
from runtime.controller.registrar import WebhookRegistrar
from runtime.controller.webhooks import ControllerWebhooks, WebhookTls
from runtime.engine.admission.registration import ClientConfig
from runtime.reload.replicas import ReplicaReports, service_endpoints, url_endpoints

#: the controller's own parameters (click's names) -> the short names :func:`controller_values` gives
PARAMS = {"webhook_ca": "ca", "webhook_url_base": "url_base", "webhook_service": "service",
          "webhook_cert_issuer": "cert_issuer", "webhook_cert_days": "cert_days",
          "webhook_cert_renew_days": "cert_renew_days", "webhook_ca_configmap": "ca_configmap",
          "webhook_owner_clusterrole": "owner", "registration_only": "registration_only"}
_FILE = click.Path(dir_okay=False, path_type=Path)
_OPTIONS = (
    click.option("--webhook-ca", type=_FILE, default=None, metavar="FILE",
                 help="CA bundle (PEM) that verifies --webhook-cert; registered as the caBundle."),
    click.option("--webhook-url-base", default=None, metavar="URL", help=prose("""clientConfig.url base the
        API server calls, each webhook's path appended (default https://127.0.0.1:<port>, for an API server
        on this machine).""")),
    click.option("--webhook-service", default=None, metavar="NS/NAME[:PORT]", help=prose("""Register
        clientConfig.service instead of a URL: the Service in front of the controller (port default
        443).""")),
    click.option("--no-webhook-registration", "no_registration", is_flag=True,
                 help="Serve the webhooks but leave the webhook configurations to someone else."),
    click.option("--webhook-registration-only", "registration_only", is_flag=True, help=prose("""Serve no
        webhook here: `accelpolicy admission` replicas behind --webhook-service (or at --webhook-url-base)
        serve them. The leader registers the webhook configurations for them with the caBundle of
        --webhook-cert-secret (created and rotated here as --webhook-cert-issuer says) or of --webhook-ca
        FILE.""")),
    click.option("--webhook-cert-issuer", type=click.Choice(["accelpolicy", "external"]),
                 default="accelpolicy", show_default=True, help=prose("""Who fills
                 --webhook-cert-secret: accelpolicy (create and rotate it) or external (e.g. cert-manager;
                 only read).""")),
    click.option("--webhook-cert-days", type=click.FloatRange(min=1), default=90.0, show_default=True,
                 help="Validity of a certificate issued for --webhook-cert-secret (the CA: 10 times "
                      "longer)."),
    click.option("--webhook-cert-renew-days", type=click.FloatRange(min=0), default=30.0, show_default=True,
                 help="The leader re-issues the certificate this many days before it ends."),
    click.option("--webhook-ca-configmap", default=None, metavar="NAME", help=prose("""The leader copies
        --webhook-cert-secret's ca.crt (the CA certificate only, never a key) into ConfigMap NAME (in
        --namespace) for clients that verify the server, e.g. a Prometheus scrape.""")),
    click.option("--webhook-owner-clusterrole", default=None, metavar="NAME", help=prose("""Register the
        webhook configurations as owned by ClusterRole NAME (an ownerReference): the garbage collector
        deletes them when it is deleted (the chart's, at `helm uninstall`), and while it is missing nothing
        is registered.""")),
)


def registration_options(func: Callable) -> Callable:
    """The controller's own webhook options (the module docstring), in --help order."""
    for option in reversed(_OPTIONS):
        func = option(func)
    return func


def controller_values(params: dict) -> dict:
    """The controller's webhook values by short name: the webhook options (:func:`runtime.cli.webhookopts.
    values_of`) and its own (:data:`PARAMS`; ``register``: not --no-webhook-registration), taken out of
    ``params`` (click's keyword arguments)."""
    return {**values_of(params), **values_of(params, PARAMS),
            "register": not params.pop("no_registration", False)}


def checked_options(once: bool, opts: dict) -> dict | None:
    """The webhook values, or None without --webhook-port (or --webhook-registration-only); a webhook
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
             "with --webhook-ca FILE or --webhook-cert-secret NAME)")
    if not (opts["cert_secret"] or opts["ca"]):
        fail("--webhook-registration-only needs the CA to register: --webhook-cert-secret NAME or "
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
    """--webhook-cert-secret: the shared serving certificate (created and rotated, or only read, in
    ``namespace``) and the TLS it gives now; exits 1 when it cannot be had."""
    certificate = shared_certificate(
        session, namespace, opts, stop,
        service_names(service[0], service[1]) if service else ("127.0.0.1", "localhost"),
        manage=opts["cert_issuer"] == "accelpolicy", days=opts["cert_days"],
        renew_days=opts["cert_renew_days"])
    return certificate, WebhookTls(certificate.paths["tls.crt"], certificate.paths["tls.key"],
                                   certificate.data["ca.crt"])


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
        webhooks.server.follow(serving_cert)
        serving_cert.listeners.append(lambda data: webhooks.use_ca(data["ca.crt"]))
    if ca_publisher is not None:
        serving_cert.listeners.append(
            lambda data: ca_publisher.publish(data["ca.crt"]) if serving_cert.leading.is_set() else None)
        serving_cert.on_leading.append(lambda: ca_publisher.publish(serving_cert.data["ca.crt"]))
    serving_cert.start(stop)


def webhook_tls(opts: dict) -> tuple[WebhookTls | None, tuple[str, str, int] | None]:
    """The serving TLS files and CA (None with --webhook-cert-secret: read once connected), and the parsed
    --webhook-service; bad input exits 2."""
    service = _service(opts)
    if opts["cert_secret"] and opts["ca"]:
        fail("--webhook-ca comes with --webhook-cert and --webhook-key: --webhook-cert-secret gives its own "
             "ca.crt")
    if opts["registration_only"] and not opts["cert_secret"]:   # nothing served here: the CA alone
        return WebhookTls(None, None, read_ca(opts["ca"])), service
    tls_choice(opts, "controller")
    if opts["cert_secret"]:
        return None, service
    if opts["self_signed"] is not None:
        if opts["ca"]:
            fail("--webhook-ca comes with --webhook-cert and --webhook-key: --webhook-self-signed makes its "
                 "own CA")
        names = ("127.0.0.1", "localhost")
        if service:
            names += (f"{service[1]}.{service[0]}.svc", f"{service[1]}.{service[0]}.svc.cluster.local")
        paths = self_signed_files(opts["self_signed"], names)
        return WebhookTls(paths["cert"], paths["key"], paths["ca"].read_bytes()), service
    if not opts["ca"]:
        fail("--webhook-cert and --webhook-key need --webhook-ca FILE (the CA registered as the caBundle)")
    return WebhookTls(opts["cert"], opts["key"], read_ca(opts["ca"])), service


def _service(opts: dict) -> tuple[str, str, int] | None:
    """--webhook-service NAMESPACE/NAME[:PORT] parsed (port default 443), and --webhook-url-base checked;
    exits 2 on a malformed one or both given."""
    if opts["url_base"] and not opts["url_base"].startswith("https://"):
        fail(f"--webhook-url-base {opts['url_base']!r}: the API server calls webhooks over https://")
    if not opts["service"]:
        return None
    if opts["url_base"]:
        fail("give --webhook-url-base or --webhook-service, not both")
    ref, _, port = opts["service"].partition(":")
    namespace, _, name = ref.partition("/")
    if not namespace or not name or (port and not port.isdigit()):
        fail(f"--webhook-service {opts['service']!r}: expected NAMESPACE/NAME[:PORT]")
    return namespace, name, int(port or 443)


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
        webhooks = ControllerWebhooks(controller, tls, serving_of(opts, controller.policy),
                                      url_base=opts["url_base"], service=service,
                                      register_configurations=opts["register"],
                                      owner_clusterrole=opts["owner"])
    except KeyError as exc:
        fail(str(exc.args[0]) if exc.args else str(exc))
    try:
        webhooks.serve()
    except OSError as exc:
        fail(f"cannot listen on {opts['host']}:{opts['port']}: {exc.strerror or exc}")
    webhooks.server.log_served()
    controller.start_caches(until_pass=False)  # a standby serves from them for as long as it waits
    webhooks.ready()
    logger.info("webhooks ready (watch caches synced)")
    return webhooks
