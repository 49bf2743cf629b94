"""The admission process: the webhooks served apart from the reconcile loop (docs/availability.md).

``accelpolicy admission`` (:mod:`runtime.cli.admission`) runs one :class:`AdmissionServer`: its own
watch caches of only what admission reads (:func:`admission_watched`: the kinds of
:func:`runtime.engine.admission.published_kinds`, the settings Secret alone in its namespace; no Pods,
Instances, Workloads, Devices or NodeFeatures), a cluster view refreshed off the review path
(:class:`BuiltAdmissionView`), the HTTPS server, ``/readyz`` as
:func:`runtime.controller.webhooks.view_not_ready_reason` says, and the rules hot reload.

The view is the objects the controller **published** (InstanceTypes with their status, ResourceFlavors,
ClusterQueues, LocalQueues), not a derivation of its own: once the controller reconciled they are what
:func:`runtime.engine.admission.admission_view` derives (tests/controller/test_admission_process.py
compares them), and deriving again in every replica cost a full derivation per change under churn (3.1 s
of a rebuild's mean at 5,000 nodes, the admission process saturated: docs/availability.md). A change
reaches admission when the controller has written it (its pass), as it reaches Kueue. It writes nothing to the
cluster: the controller's leader registers the webhook configurations for the admission Service and keeps the
serving certificate, which every admission replica reads from its Secret
(:class:`runtime.controller.servingcert.ServingCertificate`, ``manage`` off) and reloads when it changes. The
AdmissionCheck answers, the audit and the fit labels stay with the controller. Any number of replicas serve at
once (no leader election): the chart's admission Deployment scales by ``admission.replicas`` or an HPA.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from loguru import logger
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from runtime.controller.metrics import CacheCollector
from runtime.controller.snapshots import CacheSnapshots
from runtime.controller.webhooks import view_failed, view_not_ready_reason
from runtime.engine.admission import AdmissionEngine, AdmissionView, admission_view, published_kinds
from runtime.engine.policy import Policy
from runtime.kube.cache import WatchedKind
from runtime.kube.clustercache import ClusterCache
from runtime.reload.board import Board
from runtime.reload.holder import RulesHolder
from runtime.reload.hosts import AdmissionHost
from runtime.webhook.app import WebhookState
from runtime.webhook.host import ServingOptions, WebhookServer

DEFAULT_REFRESH_SECONDS = 0.0  # rebuild as soon as an event arrives (a rebuild costs the changes)


def admission_watched(policy: Policy, settings_namespace: str) -> list[WatchedKind]:
    """What the admission process watches: every kind of ``published_kinds(policy)`` (whole), except the
    settings Secret, watched alone (``settings_namespace``, its name from rules/settings.yaml)."""
    kinds = sorted(published_kinds(policy) - {"Secret", "Setting"})
    watched = [WatchedKind(kind) for kind in kinds]
    watched.append(WatchedKind("Secret", namespace=settings_namespace,
                               field_selector=f"metadata.name={policy.settings.secretName}"))
    return watched


class BuiltAdmissionView:
    """The admission view of ``cache`` (the published objects, module docstring), rebuilt by a thread of
    its own and never on a review's path.

    A cache event of a kind the view reads wakes the builder; it rebuilds incrementally (the
    controller's :class:`~runtime.controller.snapshots.CacheSnapshots`: the changed objects are copied,
    the other kinds' maps kept): as soon as an event arrives (events during a rebuild are coalesced into
    the next one), or at most once per ``refresh_seconds`` when that is above 0. Calling the object returns
    the last good view at once; only the first call, before any view exists, builds one (and raises when it
    cannot: :func:`runtime.controller.webhooks.view_not_ready_reason` reports it). A rebuild that
    fails keeps the last good view (``error`` says why; the next event tries again).

    How stale a served view may be: one rebuild (plus ``refresh_seconds``) after the event that changed
    it, on top of the cache's own age (:meth:`lag` reads it; the gauge
    ``accelpolicy_admission_view_stale_seconds``). Counters: ``rebuilds``, ``rebuild_seconds`` (the
    last 1,000), ``rebuild_total`` (seconds), ``failures``.
    """

    def __init__(self, cache: ClusterCache, policy: Policy, settings_namespace: str | None = None,
                 refresh_seconds: float = DEFAULT_REFRESH_SECONDS):
        self.cache = cache
        self.policy = policy
        self.settings_namespace = settings_namespace
        self.refresh_seconds = refresh_seconds
        self.kinds = published_kinds(policy)
        self.snapshots = CacheSnapshots(cache)
        self.error: str | None = None
        self.rebuilds = self.failures = 0
        self.rebuild_seconds: list[float] = []
        self.rebuild_total = 0.0
        self._view: AdmissionView | None = None
        self._pending_since: float | None = None  # first event not yet in the view (monotonic)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def on_event(self, kind: str, event_type: str, obj: dict) -> None:
        """A cache event: a kind the view reads makes it stale and wakes the builder."""
        if kind in self.kinds:
            if self._pending_since is None:
                self._pending_since = time.monotonic()
            self._wake.set()

    def __call__(self) -> AdmissionView:
        view = self._view
        return view if view is not None else self.build()

    def current(self) -> AdmissionView | None:
        """The view in service, at once (None before the first was built)."""
        return self._view

    def lag(self) -> float:
        """Seconds since the first cache event the served view does not hold yet (0.0 when current)."""
        since = self._pending_since
        return 0.0 if since is None else max(0.0, time.monotonic() - since)

    def build(self) -> AdmissionView:
        """Rebuild now (the builder's job; also the first view). Returns the view in service: the new
        one, or the last good one when the rebuild fails; raises when none was ever built."""
        with self._lock:
            started = time.monotonic()
            pending = self._pending_since
            self._pending_since = None  # events from here on make it stale again
            t0 = time.perf_counter()
            try:
                view = admission_view(self.policy, self.snapshots.snapshot(), derive_state=False,
                                      settings_namespace=self.settings_namespace)
            except Exception as exc:
                view_failed(self, exc, self._view is not None)
                if self._pending_since is None and pending is not None:
                    self._pending_since = min(pending, started)
                if self._view is None:
                    raise
                return self._view
            self.error = None
            self._view = view
            self.rebuilds += 1
            took = time.perf_counter() - t0
            self.rebuild_total += took
            self.rebuild_seconds = self.rebuild_seconds[-999:] + [took]
            return view

    def start(self) -> "BuiltAdmissionView":
        """Start the builder thread (a daemon); returns self."""
        self._thread = threading.Thread(target=self._run, name="admission-view", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the builder (the last view stays callable)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(5.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            if self._stop.is_set():
                return
            self._wake.clear()
            try:
                self.build()
            except Exception:  # noqa: BLE001 - recorded in error; the next event tries again
                pass
            if self.refresh_seconds > 0:
                self._stop.wait(self.refresh_seconds)  # coalesce: at most one rebuild per period


class ViewCollector(Collector):
    """The admission process's view, read at scrape: ``accelpolicy_admission_view_stale_seconds``, and
    the rebuilds and their seconds (counted over every view this process built, reloads included)."""

    def __init__(self, view_of: Callable[[], BuiltAdmissionView]):
        self.view_of = view_of
        self.retired = [0, 0.0]  # rebuilds and seconds of the views a reload replaced

    def retire(self, view: BuiltAdmissionView) -> None:
        """Keep a replaced view's counts in the totals."""
        self.retired[0] += view.rebuilds
        self.retired[1] += view.rebuild_total

    def _families(self):
        return (GaugeMetricFamily("accelpolicy_admission_view_stale_seconds",
                                  "Seconds since the first watch event the admission view in service does "
                                  "not hold yet (0 when current; rebuilt off the review path as events "
                                  "arrive, or at most once per --view-refresh-seconds when set)"),
                CounterMetricFamily("accelpolicy_admission_view_rebuilds", "Admission views built"),
                CounterMetricFamily("accelpolicy_admission_view_rebuild_seconds",
                                    "Seconds spent building admission views (divided by the rebuilds: the "
                                    "mean)"))

    def describe(self):
        return list(self._families())

    def collect(self):
        stale, rebuilds, seconds = self._families()
        view = self.view_of()
        stale.add_metric([], view.lag())
        rebuilds.add_metric([], self.retired[0] + view.rebuilds)
        seconds.add_metric([], self.retired[1] + view.rebuild_total)
        return [stale, rebuilds, seconds]


class AdmissionMetrics:
    """The admission process's own collectors, beside the webhook server's (:class:`WebhookMetrics`), in
    ``registry`` (a new one when None): its watch caches' (:class:`CacheCollector`) and its view's
    (:class:`ViewCollector`) of ``server``."""

    def __init__(self, registry: CollectorRegistry | None = None, server: "AdmissionServer | None" = None):
        self.registry = registry or CollectorRegistry()
        self.view = ViewCollector(lambda: server.view)
        self.registry.register(CacheCollector(server.cache if server is not None else None))
        self.registry.register(self.view)


@dataclass
class AdmissionServer:
    """One admission replica: caches, view, HTTPS server, readiness, rules reload (module docstring).

    Use: ``serve()`` (reviews answered "not ready; retry" and ``/readyz`` 503 until ready), ``start()``
    (caches listed, first view built, builder and reload running), ``wait(stop)``, ``stop()``.
    ``cert``/``key``: the serving files (``server``, the webhook host, reloads them: ``server.follow``),
    ``options`` how it serves (the `--webhook-*` options). A changed rules set that
    loads is tried on the reviews this replica answered recently, judged against the published objects
    (:class:`runtime.reload.hosts.AdmissionHost`; the controller's leader replays the existing objects and
    reads this replica's trial at ``/generation``); with ``rules_configmap`` (``(namespace, name)``,
    ``--rules-configmap``) the replica serves a generation only once the verdict the leader recorded on
    that ConfigMap accepted it (:class:`runtime.reload.holder.RulesHolder`; docs/rule-authoring.md "How a
    rules change goes live"); without one it decides alone.
    """

    session: object
    policy: Policy
    cert: Path
    key: Path
    settings_namespace: str
    options: ServingOptions = ServingOptions()
    refresh_seconds: float = DEFAULT_REFRESH_SECONDS
    watch_rules_seconds: float = 2.0
    rules_configmap: tuple[str, str] | None = None   # (namespace, name): the leader's verdict is followed
    rules_dir: Path | None = None   # the directory watched (default: the policy's; not a serving copy's)
    cache: ClusterCache = field(init=False)
    server: WebhookServer = field(init=False)

    def __post_init__(self):
        self.engine = AdmissionEngine(self.policy)
        self.cache = ClusterCache(self.session, admission_watched(self.policy, self.settings_namespace),
                                  on_event=self._on_event)
        self.view = BuiltAdmissionView(self.cache, self.policy, self.settings_namespace, self.refresh_seconds)
        self.server = WebhookServer(self.engine, self.options, self.cert, self.key)
        self.view_metrics = AdmissionMetrics(self.state.metrics.registry, self).view
        self.reload: RulesHolder | None = None

    @property
    def state(self) -> WebhookState:
        """The server's state (metrics, the review sample, the rules holder's report)."""
        return self.server.state

    def _on_event(self, kind: str, event_type: str, obj: dict) -> None:
        self.view.on_event(kind, event_type, obj)  # the view in service (a reload replaces it)

    def serve(self) -> "AdmissionServer":
        """Start the HTTPS server thread. Raises OSError when the port cannot be bound."""
        self.server.serve()
        return self

    def start(self, sync_timeout: float = 120.0) -> "AdmissionServer":
        """List every watched kind, build the first view, serve from it; raises ``TimeoutError`` when
        the caches do not list within ``sync_timeout`` seconds. A first view that cannot be built
        leaves ``/readyz`` 503 with the reason (the builder tries again at every event)."""
        self.cache.start()
        if not self.cache.wait_synced(sync_timeout):
            raise TimeoutError(
                f"watch caches not synced within {sync_timeout}s: {', '.join(self.cache.never_synced())}")
        try:
            self.view.build()
        except Exception:  # noqa: BLE001 - /readyz says why
            pass
        self.view.start()
        self.server.install(self.engine, self.view, lambda: view_not_ready_reason(self.cache, self.view))
        if self.watch_rules_seconds > 0:
            board = Board(self.session, *self.rules_configmap,
                          keys=lambda: self.policy.ruleset.get("ReloadGate").annotations) \
                if self.rules_configmap else None
            self.reload = RulesHolder(AdmissionHost(self), self.rules_dir or self.policy.ruleset.root,
                                      self.policy.ruleset,
                                      board=board, decides=lambda: board is None,
                                      registry=self.state.metrics.registry,
                                      interval=self.watch_rules_seconds).start()
            self.state.report = self.reload.report
        return self

    def view_for(self, policy: Policy) -> BuiltAdmissionView:
        """A hot reload's view: built for ``policy`` before it serves (on the reload's thread), then the
        cache's events go to it and the old builder stops."""
        missing = sorted(published_kinds(policy) - {"Setting"} - set(self.cache.caches))
        if missing:
            logger.warning("the reloaded rules read {} too, which this process does not watch: restart it "
                           "to serve them", ", ".join(missing))
        view = BuiltAdmissionView(self.cache, policy, self.settings_namespace, self.refresh_seconds)
        try:
            view.build()
        except Exception:  # noqa: BLE001 - served reviews then say why; the builder tries again
            pass
        old, self.view, self.policy = self.view, view.start(), policy
        old.stop()
        self.view_metrics.retire(old)
        return view

    def swap(self, policy: Policy, engine: AdmissionEngine) -> None:
        """A hot reload: from the next review on, ``engine`` judges against the view of ``policy``
        (:meth:`view_for`), installed as one generation; a review in flight finishes on the old pair."""
        view = self.view_for(policy)
        self.engine = engine
        self.server.install(engine, view)

    def stop(self, drain_seconds: float = 0.0) -> None:
        """Stop the server (after ``drain_seconds`` of answering with ``Connection: close``, serving as
        before meanwhile: :meth:`runtime.webhook.host.WebhookServer.stop`), the reload, the builder and
        the caches."""
        self.server.stop(drain_seconds)
        if self.reload is not None:
            self.reload.stop()
        self.view.stop()
        self.cache.stop()
