"""The one webhook host (docs/architecture.md "Two paths, input to output"): what `accelpolicy webhook`,
`accelpolicy admission` and `accelpolicy controller --webhook-port` each serve their reviews with.

A :class:`WebhookServer` is the app (:class:`~runtime.webhook.app.WebhookState` and
:func:`~runtime.webhook.app.build_app`) on HTTPS in a thread (:class:`~runtime.webhook.server.ServerThread`),
configured by one :class:`ServingOptions` (the `--webhook-*` options every one of those commands takes,
docs/reference/cli.md). The commands differ only in where the view comes from (a snapshot, the controller's
watch caches, the admission process's own) and in what watches the rules; they all serve, install a
generation, follow a rotated certificate, name what they serve and stop (draining first) through it.

Installing a generation (:meth:`WebhookServer.install`) also settles the heap: one collection, then
``gc.freeze()``, so the interpreter's full collections no longer walk the compiled rules and the view
served (docs/performance.md "CPU per review outside decide()"). A replaced generation holds no reference
cycles (tests/admission/test_webhook_host.py checks it), so it is freed when its last review finishes,
frozen or not.
"""
from __future__ import annotations

import gc
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from loguru import logger

from runtime.engine.admission import AdmissionEngine, AdmissionView
from runtime.webhook.app import DEFAULT_DEADLINE_SECONDS, DEFAULT_MAX_BODY, WebhookState, build_app, routes_of
from runtime.webhook.server import DEFAULT_MAX_CONNECTIONS, DEFAULT_READ_TIMEOUT, ServerThread


@dataclass(frozen=True)
class ServingOptions:
    """How a webhook server serves: where it listens (``host``, ``port``; 0: any free port), its request
    bounds (``max_body_bytes``, ``read_timeout`` seconds, ``max_connections``), each review's deadline
    (``deadline_seconds``), the worker threads (``workers``; None: the CPU count) and how long it answers
    with ``Connection: close`` before it stops (``drain_seconds``; docs/availability.md)."""

    host: str = "127.0.0.1"
    port: int = 9443
    max_body_bytes: int = DEFAULT_MAX_BODY
    read_timeout: float = DEFAULT_READ_TIMEOUT
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    deadline_seconds: float = DEFAULT_DEADLINE_SECONDS
    workers: Optional[int] = None
    drain_seconds: float = 0.0


def settle_heap() -> None:
    """Collect once, then freeze every object alive (``gc.freeze``): the cyclic collector's later full
    collections skip them. Called once a generation is installed (the process start, each reload)."""
    gc.collect()
    gc.freeze()


class WebhookServer:
    """One webhook host serving ``engine``'s paths with ``options`` over TLS (``cert``, ``key``: PEM files;
    None: plain HTTP, for tests). ``clock``: the instant each review is judged at (PolicyExceptions; the
    wall clock when None); ``state_class``: a :class:`WebhookState` subclass (the benchmark's floor).

    Use: :meth:`serve` (reviews answered "not ready; retry" and ``/readyz`` 503 until :meth:`install`),
    :meth:`install` (again at each reload), :meth:`stop`. :attr:`state` is the app's state (metrics, the
    review sample, the holder's report)."""

    def __init__(self, engine: AdmissionEngine, options: ServingOptions = ServingOptions(),
                 cert: Path | str | None = None, key: Path | str | None = None,
                 clock: Optional[Callable] = None, state_class: type[WebhookState] = WebhookState):
        self.options, self.engine = options, engine
        self.cert, self.key = cert, key
        extra = {"clock": clock} if clock is not None else {}
        self.state = state_class(max_body_bytes=options.max_body_bytes,
                                 deadline_seconds=options.deadline_seconds, **extra)
        if options.workers:
            self.state.workers = options.workers
        self.app = build_app(self.state, routes_of(engine))
        self.thread: ServerThread | None = None
        self.port = options.port

    def serve(self) -> "WebhookServer":
        """Start the HTTPS server thread; returns once it accepts connections. Raises OSError when the
        port cannot be bound."""
        opts = self.options
        self.thread = ServerThread(self.app, str(self.cert) if self.cert else None,
                                   str(self.key) if self.key else None, opts.host, opts.port,
                                   read_timeout=opts.read_timeout,
                                   max_connections=opts.max_connections).start()
        self.port = self.thread.port
        return self

    def install(self, engine: AdmissionEngine, view: AdmissionView | Callable[[], AdmissionView],
                ready_check: Optional[Callable[[], Optional[str]]] = None) -> None:
        """From the next review on, ``engine`` judges against ``view`` (fixed, or a live source called per
        review), installed as one generation; ``/readyz`` turns 200 (with ``ready_check``: while it finds
        nothing). Settles the heap (:func:`settle_heap`)."""
        self.engine = engine
        self.state.set_ready(engine, view)
        if ready_check is not None:
            self.state.ready_check = ready_check
        settle_heap()

    def served(self) -> list[str]:
        """``serving <webhook> at https://<host>:<port><path>`` of every policy served now, by path."""
        host = self.options.host
        return [f"serving {spec.webhook} at https://{host}:{self.port}{spec.path}"
                for spec in sorted(self.engine.policies.values(), key=lambda s: s.path)]

    def log_served(self) -> None:
        """Log :meth:`served` at INFO, a line each."""
        for line in self.served():
            logger.info(line)

    def reload_tls(self, cert: Path | str | None = None, key: Path | str | None = None) -> None:
        """Serve ``cert`` and ``key`` (default: the files given, rewritten in place) to connections
        accepted from now on (a rotated certificate)."""
        self.cert, self.key = cert or self.cert, key or self.key
        if self.thread is not None:
            self.thread.reload_tls(self.cert, self.key)

    def follow(self, certificate) -> None:
        """Reload the TLS files whenever ``certificate`` (a
        :class:`runtime.controller.servingcert.ServingCertificate`: ``paths``, ``listeners``) rewrites
        them."""
        certificate.listeners.append(
            lambda data: self.reload_tls(certificate.paths["tls.crt"], certificate.paths["tls.key"]))

    def stop(self, drain_seconds: Optional[float] = None) -> None:
        """Stop serving: first ``drain_seconds`` (default: the options') of answers with ``Connection:
        close`` (:meth:`runtime.webhook.server.ServerThread.stop`), then the server and the worker pool."""
        if self.thread is not None:
            self.thread.stop(self.options.drain_seconds if drain_seconds is None else drain_seconds)
        self.state.close()
