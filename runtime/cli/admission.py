"""`accelpolicy admission`: serve the admission webhooks from the live cluster, apart from the
controller (docs/availability.md "Admission apart from reconciling"; :mod:`runtime.controller.admission`)."""
from __future__ import annotations

import os
import ssl
import sys
from pathlib import Path

import click
from loguru import logger

from runtime.cli.common import bad_input_exits, fail, policy_and_session, rules_option, rules_read
from runtime.cli.controller import _connect, _stop_on_signals
from runtime.cli.observability import configure_logging, log_options
from runtime.controller.admission import DEFAULT_REFRESH_SECONDS, AdmissionServer
from runtime.controller.servingcert import ServingCertificate, reload_server_tls
from runtime.controller.settings_seed import secret_namespace
from runtime.kube.session import KubeApiError
from runtime.webhook.server import check_tls, self_signed


@click.command("admission")
@click.option("--kubeconfig", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or the in-cluster "
                   "ServiceAccount).")
@rules_option
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address the HTTPS server binds (0.0.0.0 in a Pod behind a Service).")
@click.option("--port", type=click.IntRange(0, 65535), default=9443, show_default=True,
              help="Port of the HTTPS server (0: any free port): every webhook path, /healthz, /readyz, "
                   "/metrics.")
@click.option("--cert", type=click.Path(dir_okay=False, path_type=Path), default=None, metavar="FILE",
              help="Serving certificate (PEM), with --key.")
@click.option("--key", type=click.Path(dir_okay=False, path_type=Path), default=None, metavar="FILE",
              help="Private key of --cert (PEM).")
@click.option("--self-signed", "self_signed_dir", type=click.Path(file_okay=False, path_type=Path),
              default=None, metavar="DIR",
              help="Development: make a CA (DIR/ca.crt, for the registration's caBundle) and a "
                                  "certificate for 127.0.0.1 and localhost in DIR.")
@click.option("--cert-secret", default=None, metavar="NAME",
              help="Read the serving certificate from Secret NAME in --namespace (keys tls.crt, tls.key; the "
                   "controller's leader or cert-manager fills and rotates it), write it into --cert-dir and "
                   "reload it whenever it changes. Waits for the Secret to appear.")
@click.option("--cert-dir", type=click.Path(file_okay=False, path_type=Path), default=None, metavar="DIR",
              help="Where --cert-secret's files are written (a writable emptyDir in a Pod).")
@click.option("--cert-check-seconds", type=click.FloatRange(min=0.1), default=60.0, show_default=True,
              help="How often --cert-secret is read again.")
@click.option("--namespace", default="gpustack-system", show_default=True, envvar="KUBERNETES_POD_NAMESPACE",
              help="Namespace of --cert-secret.")
@click.option("--view-refresh-seconds", type=click.FloatRange(min=0), default=DEFAULT_REFRESH_SECONDS,
              show_default=True,
              help="The cluster view reviews judge against is rebuilt off the review path as soon as a watch "
                   "event of a kind it reads arrives (0), or at most this often (events in between wait for "
                   "the next rebuild): a higher value trades freshness for CPU under heavy churn.")
@click.option("--switch-interval-ms", type=click.FloatRange(min=0.05), default=0.5, show_default=True,
              help="How long one thread may hold the interpreter before another runs (sys.setswitchinterval; "
                   "Python's default is 5): short, so a view rebuild or a watch event holds a review back at "
                   "most this long at a time.")
@click.option("--watch-rules-seconds", type=click.FloatRange(min=0), default=2.0, show_default=True,
              help="Poll the rules directory this often and swap in a changed set once it lints and compiles "
                   "(a broken set is refused, the working one keeps serving); 0: never.")
@click.option("--max-body-bytes", default=3 * 1024 * 1024, show_default=True, type=click.IntRange(min=1))
@click.option("--rules-configmap", default=None, metavar="NAME", envvar="ACCELPOLICY_RULES_CONFIGMAP",
              help="The ConfigMap (in --namespace) the rules directory is mounted from: a changed set serves "
                   "here only once the controller's leader recorded on it that it accepted (or an operator "
                   "approved) that generation; until then the generation in force keeps serving "
                   "(docs/rule-authoring.md 'How a rules change goes live'). Without it the replica decides "
                   "alone.")
@click.option("--read-timeout", default=10.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Seconds a request may take to arrive whole (headers and body) before the connection is "
                   "closed.")
@click.option("--max-connections", default=512, show_default=True, type=click.IntRange(min=1),
              help="Connections and requests served at once; more are answered 503.")
@click.option("--deadline", "deadline_seconds", default=8.0, show_default=True,
              type=click.FloatRange(min=0.1),
              help="Seconds to judge one review; a miss is answered with a Timeout denial (keep it below the "
                   "webhooks' timeoutSeconds of rules/admission/registration.yaml).")
@click.option("--workers", default=None, type=click.IntRange(min=1),
              help="Reviews judged at once (threads; default: the CPU count).")
@click.option("--drain-seconds", default=5.0, show_default=True, type=click.FloatRange(min=0),
              help="On SIGTERM, keep serving this long with `Connection: close` on every answer before the "
                   "server stops, so kube-apiserver drops its keep-alive connections to this replica between "
                   "reviews instead of racing a closing one (\"failed to call webhook: ... EOF\"). Comes "
                   "after the Pod's preStop sleep; keep both within terminationGracePeriodSeconds.")
@log_options
@bad_input_exits
def command(kubeconfig: Path | None, rules_dir: Path, host: str, port: int, cert: Path | None,
            key: Path | None, self_signed_dir: Path | None, cert_secret: str | None, cert_dir: Path | None,
            cert_check_seconds: float, namespace: str, view_refresh_seconds: float, switch_interval_ms: float,
            watch_rules_seconds: float, max_body_bytes: int, rules_configmap: str | None,
            read_timeout: float, max_connections: int, deadline_seconds: float, workers: int | None,
            drain_seconds: float = 5.0, log_level: str = "INFO", log_format: str = "text") -> None:
    """Serve every admission webhook of rules/admission/ from watch caches of what admission reads.

    The admission half of accelpolicy, apart from `accelpolicy controller` so that reviews never wait
    for a reconcile pass. Reviews judge against what the controller published (InstanceTypes with their
    status, ResourceFlavors, ClusterQueues, LocalQueues), Nodes and the settings Secret, watched here;
    nothing is derived, nothing is written to the cluster. The controller's leader registers the webhook
    configurations for the Service in front of these replicas (`accelpolicy controller
    --webhook-registration-only`) and keeps the serving certificate in --cert-secret. /readyz answers 503
    until every cache listed once and a cluster view was built, then 200, also while a cache relists
    (docs/availability.md).

    TLS: --cert and --key, --cert-secret NAME with --cert-dir DIR, or --self-signed DIR.
    """
    configure_logging(log_level, log_format)
    sys.setswitchinterval(switch_interval_ms / 1000.0)
    _tls_choice(cert, key, self_signed_dir, cert_secret, cert_dir)
    if cert or key:
        _check_files(cert, key)   # before connecting: bad input is a usage error
    policy, session = policy_and_session(rules_dir, lambda: _connect(kubeconfig), namespace, rules_configmap)
    stop = _stop_on_signals()
    certificate, cert, key = _serving_files(session, namespace, cert_secret, cert_dir, cert_check_seconds,
                                            self_signed_dir, cert, key, stop)
    if stop.is_set():
        return
    server = AdmissionServer(session, policy, cert, key, secret_namespace(policy.settings, os.environ),
                             host=host, port=port, refresh_seconds=view_refresh_seconds,
                             max_body_bytes=max_body_bytes, deadline_seconds=deadline_seconds,
                             workers=workers, read_timeout=read_timeout, max_connections=max_connections,
                             watch_rules_seconds=watch_rules_seconds,
                             rules_configmap=(namespace, rules_configmap) if rules_configmap else None,
                             rules_dir=rules_read(rules_dir))
    try:
        server.serve()
    except OSError as exc:
        fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
    try:
        for spec in sorted(server.engine.policies.values(), key=lambda s: s.path):
            logger.info(f"serving {spec.webhook} at https://{host}:{server.port}{spec.path}")
        if certificate is not None:
            certificate.listeners.append(lambda data: reload_server_tls(
                server.server, certificate.paths["tls.crt"], certificate.paths["tls.key"]))
            certificate.start(stop)
        server.start()
        logger.info("admission ready: {} kinds listed, view built in {:.3f}s", len(server.cache.caches),
                    server.view.rebuild_seconds[-1] if server.view.rebuild_seconds else float("nan"))
        stop.wait()
    except (KubeApiError, TimeoutError) as exc:
        logger.error("error: {}", exc)
        sys.exit(1)
    finally:
        if stop.is_set() and drain_seconds > 0:
            logger.info("stopping: answering with Connection: close for {:g}s first", drain_seconds)
        server.stop(drain_seconds if stop.is_set() else 0.0)


def _serving_files(session, namespace: str, cert_secret: str | None, cert_dir: Path | None,
                   cert_check_seconds: float, self_signed_dir: Path | None, cert: Path | None,
                   key: Path | None, stop) -> tuple[ServingCertificate | None, Path | None, Path | None]:
    """The serving certificate (``--cert-secret``'s, read and followed; None otherwise) and the paths of
    the certificate and key to serve (the Secret's files, ``--self-signed``'s, or ``--cert``/``--key``).
    Exits 1 when the Secret cannot be read."""
    if cert_secret:
        certificate = ServingCertificate(session, namespace, cert_secret, (), cert_dir, manage=False,
                                         check_seconds=cert_check_seconds)
        try:
            certificate.ensure(stop=stop)
        except (KubeApiError, TimeoutError) as exc:
            click.echo(f"error: serving certificate: {exc}", err=True)
            sys.exit(1)
        logger.info(f"serving certificate from Secret {namespace}/{cert_secret} in {cert_dir}")
        return certificate, certificate.paths.get("tls.crt"), certificate.paths.get("tls.key")
    if self_signed_dir is not None:
        paths = self_signed(self_signed_dir)
        logger.info(f"self-signed: CA {paths['ca']}, certificate {paths['cert']}")
        return None, paths["cert"], paths["key"]
    return None, cert, key


def _tls_choice(cert, key, self_signed_dir, cert_secret, cert_dir) -> None:
    """Exactly one TLS source; bad combinations exit 2."""
    given = [name for name, value in (("--cert/--key", cert or key), ("--self-signed", self_signed_dir),
                                      ("--cert-secret", cert_secret)) if value]
    if len(given) != 1:
        fail("give one of --cert and --key, --cert-secret NAME with --cert-dir DIR, or --self-signed DIR"
             + (f" (got {', '.join(given)})" if given else ""))
    if cert_secret and cert_dir is None:
        fail("--cert-secret needs --cert-dir DIR (where its files are written)")
    if cert_dir is not None and not cert_secret:
        fail("--cert-dir needs --cert-secret")


def _check_files(cert: Path | None, key: Path | None) -> None:
    """--cert and --key both given, readable and a matching PEM pair; exits 2 naming them otherwise."""
    if not (cert and key):
        fail("give --cert and --key together")
    for option, path in (("--cert", cert), ("--key", key)):
        if not path.is_file():
            fail(f"{option} {path}: No such file")
    try:
        check_tls(str(cert), str(key))
    except ssl.SSLError as exc:
        fail(
            f"--cert {cert} / --key {key}: not a PEM certificate and matching private key "
            f"({exc.reason or exc})")
    except OSError as exc:
        fail(f"{exc.filename}: {exc.strerror or exc}")
