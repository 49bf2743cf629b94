"""`accelpolicy controller`: run the live controller against an API server (docs/reference/controller.md).

``--once`` syncs the caches, seeds the settings Secret, reconciles once, prints what it wrote and
exits 0 (1 when an action failed). Without it the controller first takes the leader Lease
(``coordination.k8s.io/v1`` ``gpustack-operator-worker`` in ``gpustack-system``), then reconciles
after every burst of watch events until SIGINT/SIGTERM. A leader that cannot renew the Lease (an API
server down or frozen for 10 s) stops reconciling and leader-only work and campaigns again in the same
process: its watch caches stay, and it leads again at once while the Lease still names it.

``--webhook-port N`` also serves every admission webhook over HTTPS from the watch caches (every
replica, leader or not: ``/readyz`` 200 once the caches synced) and, on the leader, keeps the
webhook configurations registered (:mod:`runtime.controller.webhooks`).

``--webhook-registration-only`` (the chart's layout, docs/reference/controller.md "The admission process"):
the webhooks are served by ``accelpolicy admission`` replicas behind ``--webhook-service``; the controller
serves none, holds no cache before it leads, and its leader registers the configurations for that Service and
keeps the serving certificate of ``--webhook-cert-secret`` (the admission replicas read it).
"""
from __future__ import annotations

import os
import socket
import sys
import threading
from pathlib import Path
from typing import Callable

import click
from loguru import logger
from prometheus_client import CollectorRegistry

from runtime.cli.common import (bad_input_exits, connect_or_exit, fail, policy_and_session, rules_option,
                                stop_on_signals)
from runtime.cli.observability import configure_logging, log_options, metrics_bind_option, serve_metrics
from runtime.controller.leader import LEASE_NAME, LeaderElector
from runtime.controller.metrics import ControllerMetrics
from runtime.controller.backgroundaudit import BackgroundAudit
from runtime.controller.exceptions import ExceptionStatus
from runtime.controller.reconciler import Controller
from runtime.reload.board import Board
from runtime.reload.holder import RulesHolder
from runtime.reload.hosts import ControllerHost
from runtime.controller.cabundle import CaPublisher
from runtime.controller.servingcert import ServingCertificate
from runtime.controller.webhooks import ControllerWebhooks
from runtime.engine.admission import view_kinds
from runtime.kube.session import KubeApiError
from runtime.cli.registration import (Registration, checked_options, controller_values, follow_certificate,
                                      registration_options, serve_webhooks, serving_certificate, webhook_tls)
from runtime.cli.webhookopts import webhook_options


@click.command("controller")
@click.option("--kubeconfig", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or the in-cluster "
                   "ServiceAccount).")
@rules_option(log=True)
@click.option("--once", is_flag=True, help="Reconcile once and exit (no leader election).")
@click.option("--coalesce-seconds", type=click.FloatRange(min=0), default=0.2, show_default=True,
              help="How long watch events are gathered before a reconcile.")
@click.option("--identity", default=None, help="Leader identity (default: hostname_pid).")
@webhook_options("controller")
@registration_options
@click.option("--rules-configmap", default=None, metavar="NAME", envvar="ACCELPOLICY_RULES_CONFIGMAP",
              help="The ConfigMap (in --namespace) the rules directory is mounted from: the leader "
                   "records the reload gate's Events on it and its verdict in its annotation, which "
                   "admission replicas follow (docs/rule-authoring.md).")
@click.option("--audit-interval", default="1h", show_default=True, metavar="DURATION",
              help="Run the audit (`accelpolicy audit`) on the watch caches this often (e.g. 30m, 1h, 90s) "
                   "and write its openreports.io Report/ClusterReport objects (changed ones only) and an "
                   "AuditFailed Event on each newly failing object; 0 turns it off.")
@click.option("--usage-by-node", is_flag=True,
              help="Label the accelerator-seconds counters with the node too (one series per node and view: "
                   "docs/tasks/report-usage.md \"The counters\").")
@metrics_bind_option
@log_options
@bad_input_exits
def command(kubeconfig: Path | None, rules_dir: Path, once: bool, coalesce_seconds: float,
            identity: str | None, namespace: str, watch_rules_seconds: float = 2.0,
            rules_configmap: str | None = None, audit_interval: str = "1h", usage_by_node: bool = False,
            metrics_bind_address: str = "0", log_level: str = "INFO", log_format: str = "text",
            **webhook) -> None:
    """Keep the cluster's pools equal to what the rule files derive from its node facts.

    With --webhook-port, also serve every admission webhook of rules/admission/ and keep the
    MutatingWebhookConfiguration gpustack-worker-mutation and the ValidatingWebhookConfiguration
    gpustack-worker-validation registered (names in rules/admission/registration.yaml). TLS: either
    --webhook-cert, --webhook-key and --webhook-ca, --webhook-cert-secret NAME with --webhook-cert-dir
    DIR, or --webhook-self-signed DIR. The API server reaches the server at --webhook-url-base (default
    https://127.0.0.1:<port>) or through --webhook-service. Registrations stay when the controller stops.

    Metrics (docs/reference/metrics.md): /metrics on --metrics-bind-address and, with --webhook-port,
    on the webhook server too."""
    configure_logging(log_level, log_format)
    opts = checked_options(once, controller_values(webhook))
    serving = opts is not None and not opts["registration_only"]  # webhooks served in this process
    tls, service = webhook_tls(opts) if opts else (None, None)
    audit_seconds, stop = duration_seconds(audit_interval), stop_on_signals()
    policy, session = policy_and_session(rules_dir, lambda: connect_or_exit(kubeconfig), namespace,
                                         rules_configmap)
    serving_cert, tls = (serving_certificate(session, namespace, service, stop, opts)
                         if opts and opts["cert_secret"] else (None, tls))
    controller = Controller(session, policy, coalesce_seconds=coalesce_seconds,
                            fit_coalesce_seconds=0.0 if once else None,  # --once: fit labels in its pass
                            extra_kinds=view_kinds(policy) if serving else ())
    webhooks, stop_hooks = None, []
    registration = (Registration(session, tls, service, opts["url_base"], serving_cert, opts["owner"])
                    if opts and opts["registration_only"] else None)
    try:
        webhooks = serve_webhooks(controller, opts, tls, service) if serving else None
        follow_certificate(serving_cert, webhooks, stop, CaPublisher(session, policy, namespace,
                                                                      opts and opts["ca_configmap"]))
        registry, metrics = _controller_metrics(controller, webhooks, usage_by_node)
        if once:
            _reconcile_once(controller)
        _serve_metrics(metrics_bind_address, registry, stop_hooks)
        elector = LeaderElector(session, LEASE_NAME, namespace,
                                identity or f"{socket.gethostname()}_{os.getpid()}")
        workers: dict = {}   # the rules reload and the audit, started again in each term

        def start(term_hooks: list, term_stop: threading.Event) -> None:
            _start_leading(controller, webhooks, registry, term_hooks, rules_dir, watch_rules_seconds,
                           audit_seconds, audit_interval, registration, term_stop, workers,
                           rules_configmap and (namespace, rules_configmap))
        _lead_in_terms(elector, stop, controller, start, webhooks, serving_cert, metrics)
    except (KubeApiError, TimeoutError) as exc:
        logger.error("error: {}", exc)
        sys.exit(1)
    finally:
        drain = opts["drain_seconds"] if serving and stop.is_set() else 0.0   # SIGTERM: drain first
        _shut_down(stop_hooks, webhooks, controller, drain)


def _reconcile_once(controller: Controller) -> None:
    """--once: one reconcile, its writes on stdout; exits 0, or 1 when an action failed."""
    controller.start()
    result = controller.reconcile()
    for write in result.writes:
        click.echo(
            f"{write.verb} {write.kind} {write.namespace + '/' if write.namespace else ''}{write.name}")
    for error in result.errors:
        click.echo(f"error: {error}", err=True)
    click.echo(f"reconciled in {result.seconds:.3f}s: {len(result.writes)} writes, "
               f"{len(result.errors)} errors", err=True)
    sys.exit(1 if result.errors else 0)


def _controller_metrics(controller: Controller, webhooks: ControllerWebhooks | None,
                        usage_by_node: bool = False) -> tuple[CollectorRegistry, ControllerMetrics]:
    """The one registry (the webhook server's when it serves ``/metrics``, else a new one) and the
    controller's metrics bound to ``controller`` (``usage_by_node``: the usage counters' node label)."""
    registry = webhooks.state.metrics.registry if webhooks else CollectorRegistry()
    return registry, ControllerMetrics(registry, usage_by_node=usage_by_node).bind(controller)


def _serve_metrics(bind_address: str, registry: CollectorRegistry, stop_hooks: list) -> None:
    """/metrics on --metrics-bind-address (none at "0"); its shutdown is appended to ``stop_hooks``."""
    metrics_server = serve_metrics(bind_address, registry)
    if metrics_server is not None:
        stop_hooks.append(lambda: (metrics_server.shutdown(), metrics_server.server_close()))


class _Term:
    """One term of leadership: ``event`` is set when the Lease is lost (``lost()``) or the process is
    asked to stop (``stop``, the signals' Event), whichever comes first."""

    def __init__(self, stop: threading.Event):
        self.event = threading.Event()
        threading.Thread(target=lambda: (stop.wait(), self.event.set()), name="term-stop",
                         daemon=True).start()

    def lost(self) -> None:
        self.event.set()


def _lead_in_terms(elector: LeaderElector, stop: threading.Event, controller: Controller,
                   start: Callable[[list, threading.Event], None], webhooks: ControllerWebhooks | None,
                   serving_cert: ServingCertificate | None, metrics: ControllerMetrics) -> None:
    """Campaign, lead (``start(term_hooks, term_stop)``, then reconcile) until the term ends, stop the
    leader-only work, and campaign again, until ``stop`` (the signals) is set: then the Lease is released.
    A lost Lease ends a term, never the process (docs/availability.md "Losing the leader Lease")."""
    while not stop.is_set():
        term = _Term(stop)
        if not _lead(elector, stop, term, serving_cert, metrics):
            return
        term_hooks: list = []
        try:
            start(term_hooks, term.event)
            controller.run(term.event)
        finally:
            _end_term(term_hooks, webhooks, serving_cert, metrics)
        if stop.is_set():
            elector.release()
        else:
            logger.warning("leader Lease {}/{} lost: reconciling stopped; campaigning again as {}",
                           elector.namespace, elector.name, elector.identity)


def _lead(elector: LeaderElector, stop: threading.Event, term: _Term, serving_cert: ServingCertificate | None,
          metrics: ControllerMetrics) -> bool:
    """Take the leader Lease (False when ``stop`` came first) and keep renewing it; losing it ends
    ``term`` (the process stays: :func:`command` campaigns again). The leader gauge follows. The leader
    rotates the shared serving certificate when due."""
    logger.info(f"waiting for the leader Lease {elector.namespace}/{elector.name} as {elector.identity}")
    if not elector.acquire(stop):
        return False
    metrics.leader.set(1)
    # a replica counts usage only while it leads (docs/tasks/report-usage.md "The counters")
    elector.keep_renewing(on_lost=lambda: (metrics.leader.set(0), metrics.usage.pause(), term.lost()))
    logger.info("leading; reconciling")
    if serving_cert is not None:
        serving_cert.leading.set()
        serving_cert.check()  # rotate now when due, before registering its caBundle
        for hook in serving_cert.on_leading:
            hook()
    return True


def _end_term(term_hooks: list, webhooks: ControllerWebhooks | None, serving_cert: ServingCertificate | None,
              metrics: ControllerMetrics) -> None:
    """Stop what only the leader runs (registration, rules reload, audit, certificate rotation); the
    watch caches and the webhook server keep running for the next term."""
    for hook in term_hooks:
        hook()
    if webhooks is not None and webhooks.registrar is not None:
        webhooks.registrar.stop()
        webhooks.registrar = None
    if serving_cert is not None:
        serving_cert.leading.clear()
    metrics.leader.set(0)
    metrics.usage.pause()


def _start_leading(controller: Controller, webhooks: ControllerWebhooks | None, registry: CollectorRegistry,
                   term_hooks: list, rules_dir: Path, watch_rules_seconds: float, audit_seconds: float,
                   audit_interval: str, registration: Registration | None = None,
                   stop: threading.Event | None = None, workers: dict | None = None,
                   rules_configmap: tuple[str, str] | None = None) -> None:
    """What the leader starts before reconciling: the controller's caches, the webhook registration
    (unless --no-webhook-registration; for the admission replicas with --webhook-registration-only),
    the rules hot reload and the background audit (each off at 0; their metrics in ``registry``, their
    stop functions appended to ``term_hooks``; ``rules_configmap``: ``(namespace, name)`` of the rules
    ConfigMap, where the reload records its Events and verdict). ``workers`` keeps the reload and the audit
    (and with them their metrics) from one term of leadership to the next: each term starts them again."""
    workers = {} if workers is None else workers
    controller.start()
    if registration is not None:
        term_hooks.append(registration.start(controller, stop))
    if webhooks is not None and webhooks.register() is not None:
        for desired in webhooks.registrar.desired:
            logger.info(f"registered {desired['kind']} {desired['metadata']['name']}")
    if watch_rules_seconds > 0:
        if "reload" not in workers:
            workers["reload"] = rules_holder(controller, rules_dir, webhooks, registry, watch_rules_seconds,
                                             rules_configmap, registration)
        term_hooks.append(workers["reload"].start().stop)
        logger.info(f"watching {rules_dir} for rule changes every {watch_rules_seconds:g}s")
    if audit_seconds > 0:
        if "audit" not in workers:
            workers["audit"] = BackgroundAudit(controller, audit_seconds, registry=registry)
        term_hooks.append(workers["audit"].start().stop)
        logger.info(f"auditing every {audit_interval}")
    # PolicyExceptions' status and Events (docs/concepts/exceptions.md "Status and Events")
    if "exceptions" not in workers:
        workers["exceptions"] = ExceptionStatus(controller)
    term_hooks.append(workers["exceptions"].start().stop)


def rules_holder(controller: Controller, rules_dir: Path, webhooks: ControllerWebhooks | None,
                 registry: CollectorRegistry | None, interval: float,
                 rules_configmap: tuple[str, str] | None = None,
                 registration: Registration | None = None) -> RulesHolder:
    """The leader's rules holder (docs/rule-authoring.md "How a rules change goes live"): it decides each
    generation, records the verdict on the rules ConfigMap (``rules_configmap``: ``(namespace, name)``;
    None: it decides alone, its Events on the settings Namespace), asks the admission replicas
    (``registration``, --webhook-registration-only) for their own trials, and nudges the registrar after
    each install. Its report is served at ``/generation`` by this process's webhooks, when served."""
    host = ControllerHost(controller, webhooks, rules_configmap)
    board = Board(controller.session, *rules_configmap,
                  keys=lambda: controller.policy.ruleset.get("ReloadGate").annotations,
                  applier=controller.applier) if rules_configmap else None
    holder = RulesHolder(host, rules_dir, controller.policy.ruleset, board=board,
                         replicas=registration.reports() if registration is not None else None,
                         events=host.events, registry=registry, interval=interval)
    if webhooks is not None:
        webhooks.state.report = holder.report
        host.on_install.append(lambda: webhooks.registrar.poke() if webhooks.registrar is not None else None)
    if registration is not None:
        host.on_install.append(lambda: registration.registrar.poke() if registration.registrar else None)
    return holder


def _shut_down(stop_hooks: list, webhooks: ControllerWebhooks | None, controller: Controller,
               drain_seconds: float = 0.0) -> None:
    """Stop the background work, the webhook server (after ``drain_seconds`` of ``Connection: close``
    answers: --webhook-drain-seconds, on SIGTERM) and the controller, in that order."""
    for hook in stop_hooks:
        hook()
    if webhooks is not None:
        webhooks.stop(drain_seconds)
    controller.stop()


def duration_seconds(text: str) -> float:
    """``90``, ``90s``, ``30m``, ``1h`` -> seconds; bad input exits 2."""
    units = {"s": 1, "m": 60, "h": 3600}
    value, unit = (text[:-1], units[text[-1]]) if text and text[-1] in units else (text, 1)
    try:
        seconds = float(value) * unit
    except ValueError:
        fail(f"--audit-interval {text!r}: expected a duration such as 90s, 30m or 1h (0: off)")
    if seconds < 0:
        fail(f"--audit-interval {text!r}: must not be negative")
    return seconds
