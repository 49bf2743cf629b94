"""The live controller: watch caches -> Snapshot -> derive() -> plan -> writes (docs/reference/controller.md).

Level-triggered: every cache event marks the cluster dirty; the loop waits a short coalescing window,
then reconciles the whole desired state from one snapshot. A pass's own writes come back as events and
cause one more pass, which finds nothing to do (the plan is empty when the cluster matches,
:mod:`runtime.engine.plan`). Settings live in the watched Secret (docs/concepts/settings.md "Settings").

Each pass plans, in order: the pools (:func:`runtime.engine.plan.plan`), every Instance and its volumes
(:mod:`runtime.controller.instances`, docs/concepts/instances.md "Life cycle"), the Setting view
(:mod:`runtime.controller.settingsview`), the ``gpustack-node-devices`` answers on Workloads
(:mod:`runtime.controller.workloadchecks`, docs/concepts/pools-and-flavors.md "The AdmissionCheck
`gpustack-node-devices`"), the AcceleratorMaintenance status (:mod:`runtime.controller.maintenance`), the
DeviceClasses. A pass is also requeued without an event when an Instance, a Retry, a maintenance expiry,
the fit labels' window (docs/agent.md "Capacity and fit labels") or the start guard
(docs/availability.md "The start guard") asks; what the window and the guard hold back is
``ReconcileResult.deferred``.

Typical use::

    controller = Controller(connect(kubeconfig), policy)
    controller.start()               # caches synced, settings Secret seeded
    result = controller.reconcile()  # one pass; result.writes lists what was written
    controller.run(stop_event)       # or: loop until stop_event is set
"""
from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Iterable, Mapping

from loguru import logger

from runtime.controller import gcpolicy, settings_seed
from runtime.controller.actions import ActionWriter
from runtime.controller.clock import Clock, utc_now
from runtime.controller.deviceclasses import DeviceClassFeature, plan_device_classes
from runtime.controller.fitlabels import FitLabelWriter
from runtime.controller.instances import RetryMessages, plan_instances, plan_persistent_volumes
from runtime.controller.passsteps import (FitLabelWindow, InvalidSettingReports, Pass, Requeue,
                                          RulesGeneration, WarningsOnce, maintenance_step,
                                          workload_check_step)
from runtime.controller.reach import ReachWatch
from runtime.controller.settingsview import plan_settings
from runtime.controller.snapshots import CacheSnapshots
from runtime.controller.startguard import StartGuard
from runtime.controller.transitions import TransitionEvents
from runtime.engine.plan import Action, plan
from runtime.engine.pools import DesiredState, derive
from runtime.engine.pools.incremental import DeriveMemo
from runtime.engine.policy import Policy
from runtime.engine.snapshot import Snapshot
from runtime.kube.applier import Applier, Write
from runtime.kube.cache import WatchedKind
from runtime.kube.clustercache import ClusterCache
from runtime.kube.session import KubeApiError, Session
from runtime.model.rfc3339 import format_time

# What the pools depend on (docs/concepts/pools-and-flavors.md "ResourceFlavors: what each node contributes"),
# what Instances depend on (docs/concepts/instances.md "The Instance's Pod" and "Persistent volumes"), Kueue
# Workloads (the check answers); the settings Secret and the Setting view: in the settings namespace only.
WATCHED = ("Node", "NodeFeature", "Devices", "AcceleratorMaintenance", "Namespace", "ResourceFlavor",
           "ClusterQueue", "LocalQueue", "AdmissionCheck", "InstanceType", "InstanceTypeFlavor",
           "Instance", "Pod", "Service", "InstancePersistentVolume", "PersistentVolumeClaim",
           "PersistentVolume", "StorageClass", "RuntimeClass", "Workload", "PolicyException")
# Fit label patches (one per Node) are sent this many at a time (619 Nodes one by one took 5 s).
FIT_LABEL_WORKERS = 8
KEPT_PASSES = 500  # results kept in Controller.reconciles (tests, debugging): the last 500 to 1,000


@dataclass
class ReconcileResult:
    """One pass: ``writes`` made, ``errors`` (one line per failed action), ``seconds`` taken,
    ``planned`` actions, the actions ``deferred`` to a later pass (fit label patches whose
    coalescing window is open; destructive steps the start guard holds), and the ``state`` derived."""

    writes: list[Write] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    planned: list[Action] = field(default_factory=list)
    deferred: list[Action] = field(default_factory=list)
    seconds: float = 0.0
    state: DesiredState | None = None


class Controller:
    """Keeps one cluster equal to ``derive(policy, snapshot)``.

    ``coalesce_seconds``: how long events are gathered before a reconcile; ``resync_seconds``: a
    reconcile runs at least this often without events; ``env``: where the settings seeds are read;
    ``fit_coalesce_seconds``: the fit label window (None: ``fitCoalesceSeconds`` of the rules; 0
    writes fit labels in the pass that plans them, as ``--once`` needs); ``extra_kinds``: more kinds
    to watch (e.g. what the admission webhooks read, :func:`runtime.engine.admission.view_kinds`);
    ``listeners``: callables also given every cache event ``(kind, event_type, object)``; ``tune_gc``:
    no full garbage collection from :meth:`start` to the end of the first pass, then everything
    alive frozen, and after each later pass what survived since frozen too (:mod:`runtime.controller.gcpolicy`
    ``tend``; the process's collector); ``clock``: the wall clock every timestamp the controller writes
    or judges by is read from (Events, the plan's ``now``, Workload check answers; aware UTC; default
    :func:`runtime.controller.clock.utc_now`). Durations and requeue times: ``time.monotonic``.

    Its collaborators, each with explicit inputs (:mod:`runtime.controller.passsteps`,
    :mod:`runtime.controller.actions`): ``generation`` (the rules a pass reads, once), ``writer`` (runs
    the planned Actions, records Events), ``guard`` (the start guard), ``requeue``, ``fit_window``, the
    transition and reach Events; :attr:`last_pass` is the last pass's :class:`Pass`.
    """

    def __init__(self, session: Session, policy: Policy, coalesce_seconds: float = 0.2,
                 resync_seconds: float = 300.0, watch_timeout: int = 300,
                 env: Mapping[str, str] | None = None, fit_coalesce_seconds: float | None = None,
                 extra_kinds: Iterable[str] = (), tune_gc: bool = True, clock: Clock = utc_now):
        self.session = session
        self.clock = clock
        self.tune_gc = tune_gc
        self.generation = RulesGeneration(policy)  # the rules a pass reads once (a reload assigns the next)
        self.coalesce_seconds = coalesce_seconds
        self.fit_window = FitLabelWindow(policy.labels.fitCoalesceSeconds if fit_coalesce_seconds is None
                                         else fit_coalesce_seconds)
        self.resync_seconds = resync_seconds
        self.env = dict(os.environ if env is None else env)
        catalog = policy.settings
        self.settings_namespace = settings_seed.secret_namespace(catalog, self.env)
        watched = [WatchedKind(k) for k in WATCHED]
        watched += [WatchedKind(k) for k in sorted(set(extra_kinds) - set(WATCHED) - {"Secret", "Setting"})]
        watched.append(WatchedKind("Secret", namespace=self.settings_namespace,
                                   field_selector=f"metadata.name={catalog.secretName}"))
        watched.append(WatchedKind("Setting", namespace=self.settings_namespace))
        # docs/concepts/dra.md "The ledger from claims": watched where served
        self.device_classes = DeviceClassFeature(session, clock=clock)
        if self.device_classes.served:
            watched.append(WatchedKind("DeviceClass"))
        self._dirty = threading.Event()
        self.events = 0
        self.listeners: list[Callable[[str, str, dict], None]] = []  # also told of every cache event
        self.observers: list[Callable[[ReconcileResult], None]] = []  # told of every pass (metrics)
        self.cache = ClusterCache(session, watched, on_event=self._on_event, watch_timeout=watch_timeout)
        self.applier = Applier(session, policy, cache=self.cache, policy_source=lambda: self.policy)
        self.writer = ActionWriter(self.applier, self.cache, lambda: self.policy)
        self.reconciles: list[ReconcileResult] = []
        self.invalid_settings = InvalidSettingReports()
        self.transitions = TransitionEvents()  # the state-transition Events (docs/observability.md "Events")
        self.reach = ReachWatch()  # pools that cannot keep their promises: Events, metrics
        self.last_pass: Pass | None = None  # the last pass's generation, snapshot and check verdicts
        self._foreign: set[str] = set()  # Instances reported for a same-named Pod not theirs
        self.retry_messages = RetryMessages()  # the check's last Retry per Pod: a waiting Instance's message
        self.warnings = WarningsOnce()
        self.requeue = Requeue()  # a pass without an event: an Instance, a Retry, the fit window, the guard
        self.snapshots = CacheSnapshots(self.cache)  # each pass's snapshot, from the last one and the changes
        self._memo = DeriveMemo()  # incremental derive: per-node and per-pool results of the last pass
        self.fit_writer: FitLabelWriter | None = None  # run()'s: fit labels written outside the pass
        self.guard = StartGuard(policy, self.settings_namespace)  # nothing destructive before a whole view

    # -- the rules generation --------------------------------------------------------------------------
    @property
    def policy(self) -> Policy:
        """The rules generation in force: the pass's while one runs, else the newest assigned."""
        return self.generation.current

    @policy.setter
    def policy(self, policy: Policy) -> None:
        """A reload: one assignment; the next pass reads it, a pass in progress keeps its own."""
        self.generation.assign(policy)

    # -- events ----------------------------------------------------------------------------------------
    def _on_event(self, kind: str, event_type: str, obj: dict) -> None:
        self.events += 1
        self._dirty.set()
        for listener in self.listeners:
            listener(kind, event_type, obj)

    # -- start -----------------------------------------------------------------------------------------
    def start(self, sync_timeout: float = 60.0) -> "Controller":
        """Start the caches, wait for their first list, seed the settings Secret.

        Raises ``TimeoutError`` when the caches do not sync within ``sync_timeout`` seconds.
        """
        self.start_caches(sync_timeout)
        self.seed_settings()
        self.device_classes.check(self.policy, self.settings_namespace, self.writer.create_event)
        return self

    def start_caches(self, sync_timeout: float = 60.0, until_pass: bool = True) -> "Controller":
        """Start the watch caches (once) and wait for their first list, writing nothing: what a replica that
        is not (yet) the leader runs to serve the admission webhooks from (with ``until_pass=False``). With
        ``tune_gc``, no full collection runs while they fill; with ``until_pass`` none until the end of the
        first pass, else the caches are settled once synced (:func:`gcpolicy.settle`): a standby that waits
        for the Lease while it serves the webhooks runs no passes, and held until then its cyclic garbage
        would never be collected. Leading (:meth:`start`) holds again until its first pass.

        Raises ``TimeoutError`` when the caches do not sync within ``sync_timeout`` seconds.
        """
        if self.tune_gc:
            gcpolicy.hold()
        self.cache.start()
        if not self.cache.wait_synced(sync_timeout):
            raise TimeoutError(f"watch caches not synced within {sync_timeout}s")
        if self.tune_gc and not until_pass:
            gcpolicy.settle()
        return self

    def stop(self) -> None:
        """Stop the watch caches (a running :meth:`run` is stopped through its own event)."""
        self.cache.stop()
        if self.tune_gc:
            gcpolicy.settle()

    def seed_settings(self) -> list[str]:
        """Create the settings Secret or add its missing keys; returns the keys written. A missing
        namespace is logged, not raised (the next start tries again)."""
        catalog = self.policy.settings
        secret = self.applier.get("Secret", catalog.secretName, self.settings_namespace)
        data = settings_seed.missing_data(catalog, (secret or {}).get("data") if secret else None, self.env)
        if not data:
            return []
        try:
            if secret is None:
                result = self.applier.create({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                                              "metadata": {"name": catalog.secretName,
                                                           "namespace": self.settings_namespace},
                                              "data": data})
                if result is None:  # created meanwhile by someone else: add what is missing
                    return self.seed_settings()
            else:
                self.applier.merge_patch("Secret", catalog.secretName, {"data": data},
                                         self.settings_namespace)
        except KubeApiError as exc:
            logger.warning("settings Secret {}/{} not seeded: {}", self.settings_namespace,
                           catalog.secretName, exc)
            return []
        return sorted(data)

    # -- one pass --------------------------------------------------------------------------------------
    def reconcile(self) -> ReconcileResult:
        """Derive from the cache and execute the plan; failures of single actions are collected
        in ``errors`` (and mark the cluster dirty for a retry), not raised."""
        with self.applier.recording() as own:  # this pass's writes, not the audit's or a reload's meanwhile
            with self.generation.pinned() as policy:  # the pass reads its rules generation once
                return self._reconcile(policy, own)

    def _reconcile(self, policy: Policy, own: list[Write]) -> ReconcileResult:
        """The pass of :meth:`reconcile` on rules generation ``policy``; ``own`` gathers its writes (its
        thread's and fit label workers')."""
        t0, cpu0 = time.monotonic(), time.thread_time()
        snapshot = self._snapshot()
        state = derive(policy, snapshot, live=True, settings_namespace=self.settings_namespace,
                       memo=self._memo)
        for event in self.invalid_settings.events(policy, state, snapshot, self.settings_namespace,
                                                  self.clock()):
            self.writer.create_event(event)
        for event in self.transitions.pool_events(policy, state.node_flavors, snapshot, self.clock()):
            self.writer.create_event(event)
        for event in self.reach.update(policy, snapshot, state, self.clock()):
            self.writer.create_event(event)
        self.warnings.log(state.warnings)
        actions, deferred, verdicts = self._planned(policy, state, snapshot)
        current = self.last_pass = Pass(policy, snapshot, verdicts)
        self.guard.policy = policy  # the pass's generation (a reload meanwhile waits for the next pass)
        actions, held = self.guard.hold(actions, snapshot, self.cache.never_synced())
        if (due := self.guard.due()) is not None:  # the grace period's end: a pass then
            self.requeue.ask(due)
        result = ReconcileResult(planned=actions, deferred=deferred + held, state=state)
        for action in actions:
            if action.kind != "Node":
                self._run_action(current, action, result)
        fit = [a for a in actions if a.kind == "Node"]  # independent one-Node patches: in parallel
        if self.fit_writer is not None:  # the loop's: written on its threads, this pass does not wait
            self.fit_writer.submit(fit, partial(snapshot.get, "Node"))
        elif len(fit) > 1:
            with ThreadPoolExecutor(min(FIT_LABEL_WORKERS, len(fit))) as pool:
                list(pool.map(lambda a: self._run_recorded(own, current, a, result), fit))
        elif fit:
            self._run_action(current, fit[0], result)
        if result.errors:
            self._dirty.set()
        result.writes = list(own)
        if self.fit_writer is not None:  # its Node patches are its own (logged per batch), not this pass's
            result.writes = [w for w in result.writes if w.kind != "Node"]
        result.seconds = time.monotonic() - t0
        self._record(result)
        self._notify(result)
        cpu = time.thread_time() - cpu0
        summary = logger.bind(reconcile_seconds=round(result.seconds, 6), cpu_seconds=round(cpu, 6),
                              writes=len(result.writes), errors=len(result.errors))
        summary.info("reconcile: {} actions, {} deferred, {} writes, {} errors in {:.3f}s ({:.3f}s CPU)",
                     len(actions), len(result.deferred), len(result.writes), len(result.errors),
                     result.seconds, cpu)
        if self.tune_gc:
            gcpolicy.after_pass()
        return result

    def _record(self, result: ReconcileResult) -> None:
        """Append ``result`` to :attr:`reconciles`: the last ``KEPT_PASSES`` to ``2 * KEPT_PASSES``
        passes, only the latest with its ``state`` (at 10,000 nodes a pass holds about 8,000 objects)."""
        if self.reconciles:
            self.reconciles[-1].state = None
        self.reconciles.append(result)
        if len(self.reconciles) > 2 * KEPT_PASSES:
            del self.reconciles[:-KEPT_PASSES]

    def _planned(self, policy: Policy, state: DesiredState, snapshot: Snapshot
                 ) -> tuple[list[Action], list[Action], dict]:
        """This pass's actions (pools, Instances and their Pods, volumes, Settings, Workload checks,
        DeviceClasses), apart from them the fit labels still inside their window, and the Workload check
        verdicts: ``(actions, deferred, verdicts)``. Restarts :attr:`requeue` with the Instances' ask."""
        now = self.clock()
        actions = plan(policy, state, snapshot, now=format_time(now), memo=self._memo)
        instances = plan_instances(policy, state, snapshot, self.retry_messages.by_pod)
        for key in set(instances.foreign) - self._foreign:
            logger.warning("Instance {}: a Pod of that name exists and is not the Instance's; left alone",
                           key)
        self._foreign = set(instances.foreign)
        actions += instances.actions
        actions += plan_persistent_volumes(policy, snapshot)
        if "Setting" in self.cache.caches:
            actions += plan_settings(policy.settings, self.settings_namespace, snapshot)
        self.requeue.restart(time.monotonic() + instances.requeue if instances.requeue > 0 else None)
        checks, verdicts = workload_check_step(policy, snapshot, now, self.settings_namespace, time.monotonic,
                                               self.requeue, self.retry_messages)
        actions += checks + maintenance_step(policy, snapshot, now, time.monotonic, self.requeue)
        if self.device_classes.available:
            actions += plan_device_classes(policy, snapshot)
        if self.fit_writer is not None:
            actions = self.fit_writer.fresh(actions, partial(snapshot.get, "Node"))
        actions, deferred, due = self.fit_window.hold(actions, time.monotonic())
        if due is not None:  # the window's end: a pass then
            self.requeue.ask(due)
        return actions, deferred, verdicts

    def _run_recorded(self, own: list[Write], current: Pass, action: Action, result: ReconcileResult) -> None:
        """:meth:`_run_action` on a worker thread, its writes recorded in the pass's ``own``."""
        with self.applier.recording(own):
            self._run_action(current, action, result)

    def _run_action(self, current: Pass, action: Action, result: ReconcileResult) -> None:
        """Write one Action of pass ``current``; a failure goes to ``result.errors`` (and the log), a
        success may bring its transition Events."""
        try:
            self.writer.execute(action)
        except (KubeApiError, RuntimeError) as exc:
            result.errors.append(f"{action.verb} {action.kind} {action.name}: {exc}")
            logger.warning("{} {} {}: {}", action.verb, action.kind, action.name, exc)
            return
        now = self.clock()
        event = self.transitions.after_action(current.policy, action, current.snapshot, current.verdicts, now)
        if event is not None:
            self.writer.create_event(event)
        loop = self.transitions.loop_event(current.policy, action, current.snapshot, current.verdicts, now)
        if loop is not None:
            logger.warning("{}", loop["message"])
            self.writer.create_event(loop)

    def _snapshot(self) -> Snapshot:
        """Every cached object as an engine Snapshot of copies (the cache's dicts are shared), kept
        up to date by the cache's changes (:class:`runtime.controller.snapshots.CacheSnapshots`)."""
        return self.snapshots.snapshot()

    def _notify(self, result: ReconcileResult) -> None:
        for observer in self.observers:
            observer(result)

    def request_reconcile(self) -> None:
        """Reconcile at the next turn of :meth:`run` (e.g. once after a rules reload)."""
        self._dirty.set()

    # -- the loop ----------------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """Reconcile now, then after every burst of events (coalesced) until ``stop`` is set. Fit label
        patches are written by a :class:`FitLabelWriter` meanwhile (closed when the loop ends)."""
        self._dirty.set()
        self.guard.begin()  # leading starts: the start guard's grace period runs from here
        self.fit_writer = FitLabelWriter(self.writer.execute, FIT_LABEL_WORKERS,
                                         lambda _message: self._dirty.set())
        try:
            self._loop(stop)
        finally:
            writer, self.fit_writer = self.fit_writer, None
            writer.close()
            if self.tune_gc:  # a term that ended before its first pass: not held while standing by
                gcpolicy.settle()

    def _loop(self, stop: threading.Event) -> None:
        while not stop.is_set():
            if not self._dirty.wait(timeout=min(self.resync_seconds, 0.25)):
                due = self.requeue.is_due(time.monotonic())
                if not due and time.monotonic() - self._last_run < self.resync_seconds:
                    continue
            if stop.wait(self.coalesce_seconds):
                break
            self._dirty.clear()
            try:
                self.reconcile()
            except Exception as exc:  # noqa: BLE001 - keep the loop alive; retry after a pause
                logger.exception("reconcile failed: {}", exc)
                self._notify(ReconcileResult(errors=[f"reconcile failed: {exc}"]))
                self._dirty.set()
                stop.wait(1.0)
            self._last_run = time.monotonic()

    _last_run: float = 0.0
