"""The admission webhooks inside the controller: served from its watch caches, registered for real
(docs/reference/controller.md; docs/reference/controller.md "Controller and webhooks" "Serves every admission
webhook").

* :class:`LiveAdmissionView`: the admission view (:func:`runtime.engine.admission.admission_view`)
  of the controller's caches. Events of the kinds the view reads
  (:func:`runtime.engine.admission.view_kinds`) mark it stale; the next review rebuilds it (lazily:
  a burst of events costs one rebuild, and events of other kinds, e.g. Pods, cost nothing). A rebuild
  that fails keeps the last good view in service until an event lets one succeed (docs/availability.md
  "Serving while a watch cache relists").
* :class:`runtime.controller.registrar.WebhookRegistrar` (its own module): the registration, reconciled
  both ways.
* :class:`ControllerWebhooks`: the one webhook host (:class:`runtime.webhook.host.WebhookServer`) next to
  the reconcile loop, ``/readyz`` 503 until every cache listed once and a view was built, 200 from then on
  (a relisting cache serves its last objects), plus the registrar (run by the leader only).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from loguru import logger

from runtime.controller.reconciler import Controller
from runtime.controller.registrar import WebhookRegistrar
from runtime.engine.admission import AdmissionEngine, AdmissionView, admission_view, view_kinds
from runtime.engine.admission.registration import ClientConfig, registration_of
from runtime.engine.policy import Policy
from runtime.kube.clustercache import ClusterCache
from runtime.webhook.app import WebhookState
from runtime.webhook.host import ServingOptions, WebhookServer


class LiveAdmissionView:
    """A callable returning the admission view of ``cache`` as it is now.

    ``on_event(kind, event_type, obj)`` (a controller listener) marks the view stale when ``kind`` is
    one it reads; calling the object rebuilds a stale view (``cache.snapshot`` of those kinds, then
    derivation with ``live=True``) and otherwise returns the same view. A rebuild that fails (e.g. a
    malformed Devices object) sets ``error`` and keeps the last good view in service, not tried again
    before the next event; only when no view was ever built does the failure propagate. Thread-safe.
    Counters for reports: ``rebuilds``, ``rebuild_seconds`` (each rebuild's duration), ``failures``.
    """

    def __init__(self, cache: ClusterCache, policy: Policy, settings_namespace: str | None = None):
        self.cache = cache
        self.policy = policy
        self.settings_namespace = settings_namespace
        self.kinds = view_kinds(policy)
        self._generation = 0
        self._built = -1
        self._view: AdmissionView | None = None
        self._lock = threading.Lock()
        self._build_lock = threading.Lock()
        self.rebuilds = 0
        self.rebuild_seconds: list[float] = []
        self.failures = 0
        self.error: str | None = None  # why the last rebuild failed; None after a good one

    def on_event(self, kind: str, event_type: str, obj: dict) -> None:
        """A cache event: the view is stale when ``kind`` is one it reads."""
        if kind in self.kinds:
            with self._lock:
                self._generation += 1

    def current(self) -> AdmissionView | None:
        """The view when no event made it stale since it was built (or last tried), at once; None when
        calling the object would rebuild it."""
        with self._lock:
            return self._view if self._generation == self._built else None

    def __call__(self) -> AdmissionView:
        with self._lock:
            generation = self._generation
            if generation == self._built and self._view is not None:
                return self._view
        with self._build_lock:
            with self._lock:  # another review may have rebuilt it meanwhile
                if self._built >= generation and self._view is not None:
                    return self._view
                generation = self._generation
            t0 = time.perf_counter()
            try:
                view = admission_view(self.policy, self.cache.snapshot(self.kinds), live=True,
                                      settings_namespace=self.settings_namespace)
            except Exception as exc:
                view_failed(self, exc, self._view is not None)
                with self._lock:
                    if self._view is None:
                        raise
                    self._built = generation  # tried: the next event tries again
                    return self._view
            self.error = None
            with self._lock:
                self._view, self._built = view, generation
            self.rebuilds += 1
            self.rebuild_seconds.append(time.perf_counter() - t0)
            return view


def view_failed(view, exc: Exception, kept: bool) -> None:
    """Record a failed rebuild of ``view`` (its ``error`` and ``failures``); a new reason is logged once,
    saying whether the last good view serves on (``kept``)."""
    error = f"{type(exc).__name__}: {exc}"
    if error != view.error:
        logger.warning("admission view not rebuilt ({}): {}", "the last good view serves on" if kept else
                       "no view yet", error)
    view.error = error
    view.failures += 1


def view_not_ready_reason(cache: ClusterCache, view: LiveAdmissionView) -> str | None:
    """Why a webhook server serving ``view`` from ``cache`` is not ready (docs/availability.md
    "Readiness"): a watch cache that never listed, or no cluster view ever built (it is built here when
    stale). A cache relisting or retrying after its watch broke serves its last objects (their age:
    ``accelpolicy_watch_cache_stale_seconds``), and a rebuild that fails after a good one keeps that
    one: neither makes a replica unready, so no fault of a watch takes every replica out together.
    None when ready. Blocking: the app calls it off the event loop."""
    never = cache.never_synced()
    if never:
        return f"caches not synced: {', '.join(never)}"
    try:
        view()
    except Exception:  # noqa: BLE001 - the reason is the answer
        return f"cluster view cannot be built: {view.error}"
    return None


@dataclass
class WebhookTls:
    """The serving certificate and key files and the CA bundle (PEM bytes) that verifies them."""

    cert: Path
    key: Path
    ca_pem: bytes


@dataclass
class ControllerWebhooks:
    """The controller's admission webhooks: the webhook server, its live view and (for the leader)
    registration.

    ``options``: how the server serves (the `--webhook-*` options). ``url_base`` or ``service`` say how
    the API server reaches it (``url_base`` None and no ``service``: ``https://127.0.0.1:<bound port>``);
    ``register_configurations`` False serves without registering (configurations managed elsewhere);
    ``owner_clusterrole`` names the ClusterRole that owns the registered configurations
    (:class:`WebhookRegistrar`). Use: ``serve()`` early (``/readyz`` 503), ``ready()`` once
    ``controller.start_caches()`` returned, ``register()`` once leading, ``stop()``.
    """

    controller: Controller
    tls: WebhookTls
    options: ServingOptions = ServingOptions()
    url_base: str | None = None
    service: tuple[str, str, int] | None = None
    register_configurations: bool = True
    owner_clusterrole: str | None = None
    view: LiveAdmissionView = field(init=False)
    server: WebhookServer = field(init=False)
    registrar: WebhookRegistrar | None = field(init=False, default=None)

    def __post_init__(self):
        policy = self.controller.policy
        self.engine = AdmissionEngine(policy)
        if self.register_configurations:
            registration_of(policy)   # KeyError now, naming the kind, rather than once leading
        self.view = LiveAdmissionView(self.controller.cache, policy, self.controller.settings_namespace)
        self.controller.listeners.append(self.view.on_event)
        self.server = WebhookServer(self.engine, self.options, self.tls.cert, self.tls.key,
                                    clock=self.controller.clock)

    @property
    def state(self) -> WebhookState:
        """The server's state (metrics, the review sample, the rules holder's report)."""
        return self.server.state

    def serve(self) -> "ControllerWebhooks":
        """Start the HTTPS server thread (reviews answer "not ready; retry" until :meth:`ready`).
        Raises OSError when the port cannot be bound."""
        self.server.serve()
        return self

    def ready(self) -> None:
        """The caches synced: serve from the live view; ``/readyz`` turns 200 while
        :meth:`not_ready_reason` finds nothing (docs/availability.md "Readiness")."""
        self.server.install(self.engine, self.view, self.not_ready_reason)

    def swap(self, policy: Policy, engine: AdmissionEngine) -> None:
        """A hot reload: from the next review on, ``engine`` judges against a live view of ``policy``
        (built afresh on its first review, with the kinds ``policy`` reads), installed as one
        generation; a review in flight finishes on the old pair. Before :meth:`ready` only the pair
        to serve changes."""
        old = self.view
        view = LiveAdmissionView(self.controller.cache, policy, self.controller.settings_namespace)
        # a new list, not an edit: the controller's loop may be iterating the old one
        self.controller.listeners = [
            f for f in self.controller.listeners if f != old.on_event] + [view.on_event]
        self.engine, self.view = engine, view
        if self.state.ready:
            self.server.install(engine, view)

    def not_ready_reason(self) -> str | None:
        """Why ``/readyz`` says 503 now; None when ready. See :func:`view_not_ready_reason`."""
        return view_not_ready_reason(self.controller.cache, self.view)

    def client_config(self) -> ClientConfig:
        """How the API server reaches this server (see the class docstring)."""
        if self.service is not None:
            return ClientConfig(ca_pem=self.tls.ca_pem, service=self.service)
        return ClientConfig(ca_pem=self.tls.ca_pem,
                            url_base=self.url_base or f"https://127.0.0.1:{self.server.port}")

    def identity_warning(self) -> str | None:
        """A warning when the controller's own user is not among the ``controllerUsers`` the
        policies' params name (rules/controller.yaml ``controllerServiceAccount``): its own webhooks
        would then refuse its InstanceTypeFlavor writes and Setting deletes. None when it is, or when
        unknown."""
        allowed = sorted({user for params in self.engine.params.values()
                          for user in params.get("controllerUsers") or []})
        user = self.controller.session.username() if allowed else None
        if user is None or user in allowed:
            return None
        return (f"the controller runs as {user!r}, not as one of the controllerUsers {allowed} of "
                "rules/controller.yaml: once registered, its own webhooks refuse its "
                "InstanceTypeFlavor writes and Setting deletes")

    def register(self, sync_timeout: float = 60.0) -> WebhookRegistrar | None:
        """Start the registrar (the leader's job); None when registration is off. Logs
        :meth:`identity_warning` first."""
        if not self.register_configurations:
            return None
        warning = self.identity_warning()
        if warning:
            logger.warning("webhook registration: {}", warning)
        self.registrar = WebhookRegistrar(self.controller.session, self.controller.policy,
                                          self.client_config(), owner=self.owner_clusterrole,
                                          policy_of=lambda: self.controller.policy,
                                          served=self.served_paths).start(sync_timeout)
        return self.registrar

    def served_paths(self) -> set[str]:
        """The webhook paths this server serves now (its engine's)."""
        return {spec.path for spec in self.engine.policies.values()}

    def use_ca(self, ca_pem: bytes) -> None:
        """A new CA bundle verifies the serving certificate: register it as ``caBundle`` from now on."""
        self.tls.ca_pem = ca_pem
        if self.registrar is not None:
            self.registrar.retarget(self.client_config())

    def stop(self, drain_seconds: float = 0.0) -> None:
        """Stop the registrar and the server (after ``drain_seconds`` of ``Connection: close`` answers);
        registrations are left in place."""
        if self.registrar is not None:
            self.registrar.stop()
        self.server.stop(drain_seconds)
        if self.view.on_event in self.controller.listeners:
            self.controller.listeners.remove(self.view.on_event)
