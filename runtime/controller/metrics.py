"""The controller's Prometheus metrics (docs/observability.md), in one registry it shares with the rules
reload (``accelpolicy_rules_generation``), the background audit and, when served, the webhooks.

Two sources, so no number is derived twice:

- **Read at scrape time** (:class:`ControllerCollector`) from what the controller holds: the
  capacity, remaining and onceMaxRequest of each InstanceType's view as its **published status**
  reads (the watch cache's copy, which the controller's own status writes update), the flavors of each
  ClusterQueue, the cached objects per kind, each watch's restarts and relists and how stale each
  cache is (:class:`CacheCollector`, also the admission process's).
- **Counted as it happens** (:class:`ControllerMetrics`): each reconcile's duration and failed
  actions (a reconcile observer), the AdmissionCheck answers it wrote by state and their latency from
  the Workload's quota reservation, the API writes by kind and verb (the applier's write log, read
  forward at each scrape) and whether this replica leads.

Labels stay bounded: InstanceType, ClusterQueue and kind names, views and verbs, and on the usage
counters the namespaces charged; never a Pod name, a Node name only with ``usage_by_node``
(docs/tasks/report-usage.md "Cost and cardinality").
"""
from __future__ import annotations

import threading
from collections import Counter as Tally
from datetime import datetime, timezone
from typing import Callable, Iterable, Iterator, Optional

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from runtime.controller.clock import utc_now
from runtime.controller.reach import ReachCollector
from runtime.controller.usage import UsageMeter
from runtime.engine.plan import Verb
from runtime.kube.held import CacheBytesCollector
from runtime.model.rfc3339 import TIME_FORMAT

# Views (docs/concepts/four-views.md "The four views", docs/concepts/pools-and-flavors.md "InstanceType
# status") -> the InstanceType status field that publishes them (crds/worker.gpustack.ai_instancetypes.yaml).
# Units: ex accelerators, sh shares, sl VRAM percent, pt partitions, cpu cores.
STATUS_VIEWS = {"ex": "accelerator", "sh": "acceleratorShared", "sl": "acceleratorSliced",
                "pt": "acceleratorPartitioned", "cpu": "cpu"}
VIEW_NUMBERS = {"capacity": "capacity", "remaining": "remaining", "once_max_request": "onceMaxRequest"}
VIEW_HELP = ("view: ex (accelerators), sh (shares), sl (VRAM percent), pt (partitions), cpu (cores); "
             "as the InstanceType's status publishes it")
RECONCILE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
CHECK_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0)


def view_samples(instancetype: dict) -> Iterator[tuple[str, str, float]]:
    """``(view, number, value)`` for each view present in ``instancetype``'s status; ``number`` is a
    key of :data:`VIEW_NUMBERS`. A value that is not an integer string is left out (never guessed)."""
    status = instancetype.get("status") or {}
    for view, field in STATUS_VIEWS.items():
        numbers = status.get(field)
        if not isinstance(numbers, dict):
            continue
        for number, key in VIEW_NUMBERS.items():
            try:
                yield view, number, float(int(str(numbers[key])))
            except (KeyError, ValueError):
                continue


def queue_flavors(queue: dict) -> int:
    """How many ResourceFlavors a ClusterQueue's ``spec.resourceGroups`` name (each counted once)."""
    groups = (queue.get("spec") or {}).get("resourceGroups") or []
    return len({f.get("name") for g in groups for f in (g.get("flavors") or []) if isinstance(f, dict)})


def quota_reserved_at(workload: dict | None) -> datetime | None:
    """When Kueue reserved the Workload's quota: its ``QuotaReserved`` True condition's
    ``lastTransitionTime`` (None when absent or unreadable)."""
    for cond in ((workload or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "QuotaReserved" and cond.get("status") == "True":
            try:
                return datetime.strptime(cond.get("lastTransitionTime", ""), TIME_FORMAT).replace(
                    tzinfo=timezone.utc)
            except ValueError:
                return None
    return None


def check_answers(planned: Iterable, writes: Iterable, workload_of: Callable[[str, str], dict | None],
                  now: datetime) -> list[tuple[str, float | None]]:
    """``(state, seconds since quota reservation or None)`` for each AdmissionCheck answer a pass
    wrote: its ``apply-check-state`` actions whose Workload status write succeeded
    (docs/concepts/pools-and-flavors.md "The AdmissionCheck `gpustack-node-devices`")."""
    written = {(w.namespace, w.name) for w in writes if w.kind == "Workload" and w.verb == "apply-status"}
    out = []
    for action in planned:
        if action.verb != Verb.APPLY_CHECK_STATE or (action.namespace, action.name) not in written:
            continue
        state = action.body["status"]["admissionChecks"][0]["state"]
        reserved = quota_reserved_at(workload_of(action.name, action.namespace))
        out.append((state, (now - reserved).total_seconds() if reserved else None))
    return out


def cache_families() -> dict[str, GaugeMetricFamily | CounterMetricFamily]:
    """The per-kind watch cache families (empty): objects, restarts, relists, staleness."""
    return {"objects": GaugeMetricFamily("accelpolicy_cache_objects", "Objects in the watch cache of a kind",
                                         labels=["kind"]),
            "restarts": CounterMetricFamily("accelpolicy_watch_restarts",
                                            "Watches of a kind restarted after a connection or API error",
                                            labels=["kind"]),
            "relists": CounterMetricFamily("accelpolicy_watch_relists",
                                           "Full lists of a kind after its watch expired (410 Gone)",
                                           labels=["kind"]),
            "stale": GaugeMetricFamily("accelpolicy_watch_cache_stale_seconds",
                                       "Seconds the objects a kind's watch cache serves may lag the API "
                                       "server: 0 while its watch is current, the time since the watch broke "
                                       "while it relists or retries (the last good objects are served "
                                       "meanwhile)",
                                       labels=["kind"])}


def add_cache_samples(families: dict, caches: dict) -> None:
    """Add one sample per kind of ``caches`` (kind -> :class:`runtime.kube.cache.KindCache`) to the
    :func:`cache_families` in ``families``; a kind never listed has no staleness sample."""
    for kind, cache in caches.items():
        families["objects"].add_metric([kind], len(cache.keys()))
        families["restarts"].add_metric([kind], cache.errors)
        families["relists"].add_metric([kind], cache.relists)
        age = cache.age()
        if age is not None:
            families["stale"].add_metric([kind], age)


class CacheCollector(Collector):
    """Scrape-time :func:`cache_families` of one :class:`runtime.kube.clustercache.ClusterCache` (the
    admission process's; the controller's are part of :class:`ControllerCollector`)."""

    def __init__(self, cache):
        self.cache = cache

    def describe(self):
        return list(cache_families().values())

    def collect(self):
        families = cache_families()
        add_cache_samples(families, self.cache.caches)
        return list(families.values())


class ControllerCollector(Collector):
    """Scrape-time families read from a controller (``None``: the families, empty); ``before_scrape``
    runs first at each scrape (registered first, so what it updates is read in the same scrape)."""

    def __init__(self, controller=None, before_scrape=None):
        self.controller = controller
        self.before_scrape = before_scrape

    def _families(self) -> dict[str, GaugeMetricFamily | CounterMetricFamily]:
        views = {number: GaugeMetricFamily(f"accelpolicy_instancetype_{number}",
                                           f"{number.replace('_', ' ').capitalize()} of one view of an "
                                           f"InstanceType; {VIEW_HELP}", labels=["instancetype", "view"])
                 for number in VIEW_NUMBERS}
        return {**views,
                "flavors": GaugeMetricFamily("accelpolicy_clusterqueue_flavors",
                                             "ResourceFlavors a ClusterQueue names", labels=["clusterqueue"]),
                "retryLoops": GaugeMetricFamily("accelpolicy_admissioncheck_retry_loops",
                                                "Workloads the check answered Retry on one flavor "
                                                "admissionCheck.retryLoopAfter times in a row while another "
                                                "flavor of the pool holds a node that can take them (not "
                                                "Ready since)",
                                                labels=["clusterqueue"]),
                **cache_families()}

    def describe(self):
        return list(self._families().values())

    def collect(self):
        if self.before_scrape is not None:
            self.before_scrape()
        families = self._families()
        controller = self.controller
        if controller is not None:
            caches = controller.cache.caches
            for it in caches["InstanceType"].objects() if "InstanceType" in caches else ():
                name = (it.get("metadata") or {}).get("name", "")
                for view, number, value in view_samples(it):
                    families[number].add_metric([name, view], value)
            for queue in caches["ClusterQueue"].objects() if "ClusterQueue" in caches else ():
                families["flavors"].add_metric([(queue.get("metadata") or {}).get("name", "")],
                                               queue_flavors(queue))
            loops = Tally(getattr(getattr(controller, "transitions", None), "retry_loops", {}).values())
            for pool, n in sorted(loops.items()):
                families["retryLoops"].add_metric([pool], n)
            add_cache_samples(families, caches)
        return list(families.values())


class ControllerMetrics:
    """The controller's collectors in ``registry`` (a new one when None); :meth:`bind` a controller.

    ``writes`` counts the applier's writes by kind and verb, read forward from its write log at each
    scrape (every write of this process: reconciles, Events, reports); ``leader`` is 1 while this
    replica holds the Lease. ``usage`` holds the accelerator-seconds counters
    (:mod:`runtime.controller.usage`), taken from each pass; ``usage_by_node`` adds the node label to them.
    """

    def __init__(self, registry: Optional[CollectorRegistry] = None, usage_by_node: bool = False):
        self.registry = registry or CollectorRegistry()
        self.controller = None
        self._counted = 0
        self._lock = threading.Lock()
        self.collector = ControllerCollector(before_scrape=self.count_writes)
        self.registry.register(self.collector)
        self.registry.register(
            CacheBytesCollector(lambda: self.controller.cache.caches if self.controller else None))
        self.registry.register(ReachCollector(lambda: getattr(self.controller, "reach", None)))  # pool reach
        self.usage = UsageMeter(by_node=usage_by_node)
        self.registry.register(self.usage)
        self.reconcile_seconds = Histogram("accelpolicy_reconcile_seconds", "Time one reconcile pass took",
                                           buckets=RECONCILE_BUCKETS, registry=self.registry)
        self.reconcile_errors = Counter("accelpolicy_reconcile_errors",
                                        "Failed reconcile actions, and passes that failed as a whole",
                                        registry=self.registry)
        self.writes = Counter("accelpolicy_api_writes", "Successful API writes by kind and verb "
                              "(apply, apply-status, create, patch, delete)", ["kind", "verb"],
                              registry=self.registry)
        self.check_answers = Counter("accelpolicy_admissioncheck_answers",
                                     "AdmissionCheck answers written on "
                                     "Workloads, by state (Ready, Retry, Rejected)", ["state"],
                                     registry=self.registry)
        self.check_latency = Histogram("accelpolicy_admissioncheck_answer_seconds",
                                       "Time from a Workload's quota "
                                       "reservation to the check's answer", ["state"], buckets=CHECK_BUCKETS,
                                       registry=self.registry)
        self.leader = Gauge("accelpolicy_leader", "1 while this replica holds the leader Lease, else 0",
                            registry=self.registry)

    def bind(self, controller) -> "ControllerMetrics":
        """Read ``controller`` from now on: its caches, applier and reconcile results."""
        self.controller = self.collector.controller = controller
        controller.observers.append(self.observe)
        self.count_writes()
        return self

    def observe(self, result) -> None:
        """Record one reconcile (a :class:`runtime.controller.reconciler.ReconcileResult`)."""
        self.reconcile_seconds.observe(result.seconds)
        last = getattr(self.controller, "last_pass", None)
        if result.state is not None and last is not None:
            self.usage.observe(last.policy, result.state, self.controller.cache.caches)
        if result.errors:
            self.reconcile_errors.inc(len(result.errors))
        cache = self.controller.cache if self.controller is not None else None
        for state, seconds in check_answers(result.planned, result.writes,
                                            lambda n, ns: cache.get("Workload", n, ns) if cache else None,
                                            self.controller.clock() if self.controller is not None
                                            else utc_now()):
            self.check_answers.labels(state).inc()
            if seconds is not None:
                self.check_latency.labels(state).observe(max(seconds, 0.0))
        self.count_writes()

    def count_writes(self) -> None:
        """Count the applier's writes made since the last call (also run before every scrape)."""
        if self.controller is None:
            return
        with self._lock:
            log = self.controller.applier.writes
            new, self._counted = log[self._counted:], len(log)
        for (kind, verb), n in Tally((w.kind, w.verb) for w in new).items():
            self.writes.labels(kind, verb).inc(n)
