"""`accelpolicy admission`: serve the admission webhooks from the live cluster, apart from the
controller (docs/availability.md "Admission apart from reconciling"; :mod:`runtime.controller.admission`;
the webhook options: :mod:`runtime.cli.webhookopts`)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import click
from loguru import logger

from runtime.cli.common import (bad_input_exits, connect_or_exit, fail, policy_and_session, rules_option,
                                rules_read, stop_on_signals)
from runtime.cli.observability import configure_logging, log_options
from runtime.cli.webhookopts import (self_signed_files, serving_of, shared_certificate, tls_choice, values_of,
                                     webhook_options)
from runtime.controller.admission import DEFAULT_REFRESH_SECONDS, AdmissionServer
from runtime.controller.settings_seed import secret_namespace
from runtime.kube.session import KubeApiError


@click.command("admission")
@click.option("--kubeconfig", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or the in-cluster "
                   "ServiceAccount).")
@rules_option
@webhook_options("admission")
@click.option("--view-refresh-seconds", type=click.FloatRange(min=0), default=DEFAULT_REFRESH_SECONDS,
              show_default=True,
              help="The cluster view reviews judge against is rebuilt off the review path as soon as a watch "
                   "event of a kind it reads arrives (0), or at most this often (events in between wait for "
                   "the next rebuild): a higher value trades freshness for CPU under heavy churn.")
@click.option("--switch-interval-ms", type=click.FloatRange(min=0.05), default=0.5, show_default=True,
              help="How long one thread may hold the interpreter before another runs (sys.setswitchinterval; "
                   "Python's default is 5): short, so a view rebuild or a watch event holds a review back at "
                   "most this long at a time.")
@click.option("--rules-configmap", default=None, metavar="NAME", envvar="ACCELPOLICY_RULES_CONFIGMAP",
              help="The ConfigMap (in --namespace) the rules directory is mounted from: a changed set serves "
                   "here only once the controller's leader recorded on it that it accepted (or an operator "
                   "approved) that generation; until then the generation in force keeps serving "
                   "(docs/rule-authoring.md 'How a rules change goes live'). Without it the replica decides "
                   "alone.")
@log_options
@bad_input_exits
def command(kubeconfig: Path | None, rules_dir: Path, namespace: str, view_refresh_seconds: float,
            switch_interval_ms: float, watch_rules_seconds: float, rules_configmap: str | None,
            log_level: str = "INFO", log_format: str = "text", **webhook) -> None:
    """Serve every admission webhook of rules/admission/ from watch caches of what admission reads.

    The admission half of accelpolicy, apart from `accelpolicy controller` so that reviews never wait
    for a reconcile pass. Reviews judge against what the controller published (InstanceTypes with their
    status, ResourceFlavors, ClusterQueues, LocalQueues), Nodes and the settings Secret, watched here;
    nothing is derived, nothing is written to the cluster. The controller's leader registers the webhook
    configurations for the Service in front of these replicas (`accelpolicy controller
    --webhook-registration-only`) and keeps the serving certificate in --webhook-cert-secret. /readyz
    answers 503 until every cache listed once and a cluster view was built, then 200, also while a cache
    relists (docs/availability.md).

    TLS: --webhook-cert and --webhook-key, --webhook-cert-secret NAME with --webhook-cert-dir DIR, or
    --webhook-self-signed DIR.
    """
    configure_logging(log_level, log_format)
    sys.setswitchinterval(switch_interval_ms / 1000.0)
    values = values_of(webhook)
    tls_choice(values, "admission")   # before connecting: bad input is a usage error
    policy, session = policy_and_session(rules_dir, lambda: connect_or_exit(kubeconfig), namespace,
                                         rules_configmap)
    stop = stop_on_signals()
    certificate, cert, key = _serving_files(session, namespace, values, stop)
    if stop.is_set():
        return
    server = AdmissionServer(session, policy, cert, key, secret_namespace(policy.settings, os.environ),
                             serving_of(values, policy), refresh_seconds=view_refresh_seconds,
                             watch_rules_seconds=watch_rules_seconds,
                             rules_configmap=(namespace, rules_configmap) if rules_configmap else None,
                             rules_dir=rules_read(rules_dir))
    try:
        server.serve()
    except OSError as exc:
        fail(f"cannot listen on {values['host']}:{values['port']}: {exc.strerror or exc}")
    _run(server, certificate, stop)


def _run(server: AdmissionServer, certificate, stop) -> None:
    """Follow the certificate, sync the caches, serve until ``stop`` (SIGINT/SIGTERM), then drain and
    stop; an API server that fails the start exits 1."""
    try:
        server.server.log_served()
        if certificate is not None:
            server.server.follow(certificate)
            certificate.start(stop)
        server.start()
        logger.info("admission ready: {} kinds listed, view built in {:.3f}s", len(server.cache.caches),
                    server.view.rebuild_seconds[-1] if server.view.rebuild_seconds else float("nan"))
        stop.wait()
    except (KubeApiError, TimeoutError) as exc:
        logger.error("error: {}", exc)
        sys.exit(1)
    finally:
        drain = server.options.drain_seconds if stop.is_set() else 0.0
        if drain > 0:
            logger.info("stopping: answering with Connection: close for {:g}s first", drain)
        server.stop(drain)


def _serving_files(session, namespace: str, values: dict, stop) -> tuple[object | None, Path, Path]:
    """The serving certificate (--webhook-cert-secret's, read and followed; None otherwise) and the paths
    of the certificate and key to serve (the Secret's files, --webhook-self-signed's, or --webhook-cert
    and --webhook-key). Exits 1 when the Secret cannot be read."""
    if values["cert_secret"]:
        certificate = shared_certificate(session, namespace, values, stop)
        return certificate, certificate.paths.get("tls.crt"), certificate.paths.get("tls.key")
    if values["self_signed"] is not None:
        paths = self_signed_files(values["self_signed"])
        return None, paths["cert"], paths["key"]
    return None, values["cert"], values["key"]
