"""The accelerator-seconds counters of showback (docs/tasks/report-usage.md "The counters").

After every reconcile pass the controller (the leader; it sees every Devices object and every Pod) reads
what each accelerator is charged for now (:mod:`runtime.engine.pools.usage`, kept up to date from the
changes by :class:`runtime.controller.usagetracker.UsageTracker`). A
:class:`UsageMeter` holds those rates and adds ``rate × seconds`` to each counter at every pass and at
every scrape, so a counter stands for the accelerators held since the process began to count:

* ``accelpolicy_accelerator_charged_seconds_total{namespace,pool,resourceflavor,product,view,clusterqueue}``
* ``accelpolicy_accelerator_idle_seconds_total{pool,resourceflavor,product,view,state}``
* ``accelpolicy_accelerator_capacity_seconds_total{pool,resourceflavor,product,view,state}``
* ``accelpolicy_clusterqueue_reserved_seconds_total{clusterqueue,namespace}``

(``node`` ends the labels of the first three with ``--usage-by-node``). The seconds are the process's
monotonic clock. Counters start at 0 with the process and stop while it does not lead (:meth:`pause`):
Prometheus' ``increase()`` and ``rate()`` read a restart as a counter reset and add what came before,
so a report over a window loses only the time no replica counted (from the last scrape of the old
leader to the first pass of the new one). A series whose labels no accelerator or Workload holds any
more stops counting and is dropped ``retain_seconds`` later (Prometheus marks it stale), so only the
label sets seen lately are held.
"""
from __future__ import annotations

import threading
import time
from typing import Callable

from loguru import logger
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from runtime.controller.usagetracker import UsageTracker
from runtime.engine.pools.usage import CAPACITY_LABELS, CHARGED_LABELS, FAMILIES as NAMES, RESERVED_LABELS, \
    UsageRates

RETAIN_SECONDS = 3600.0
# family -> (UsageRates attribute, labels, help)
FAMILIES = {
    NAMES["charged"]: (
        "charged", CHARGED_LABELS,
        "Physical accelerator-seconds the Devices ledgers charged to Pods of a namespace, by the pool and "
        "ResourceFlavor the accelerator accounts to, its product, the view (ledger mode) of the charge and "
        "the ClusterQueue that admitted the Pod: a 25 % slice held for an hour adds 900 "
        "(docs/tasks/report-usage.md)"),
    NAMES["idle"]: (
        "idle", CAPACITY_LABELS,
        "Physical accelerator-seconds no charge held, by pool, ResourceFlavor, product, the view the "
        "accelerator was held in (none: free) and state (usable, outOfService); charged + idle = capacity"),
    NAMES["capacity"]: (
        "capacity", CAPACITY_LABELS,
        "Installed accelerator-seconds, by pool, ResourceFlavor, product, view and state (usable: in the "
        "views and quota; outOfService: unhealthy)"),
    NAMES["reserved"]: (
        "reserved", RESERVED_LABELS,
        "Accelerator-seconds of quota admitted Kueue Workloads of a namespace held in a ClusterQueue "
        "(their credits resource usage / creditsPerAccelerator)"),
}


class UsageMeter(Collector):
    """The counters of the module docstring. :meth:`observe` after each pass; registered in the
    controller's registry. ``clock``: monotonic seconds; ``by_node``: the rates carry the node.

    Each series is ``[seconds at since, since, rate, gone at]``: a rate change folds what it counted
    into the value, so a pass touches only the series whose rate changed and a scrape reads every
    series once. A series gone from the rates counts no more and is dropped ``retain_seconds`` later.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, by_node: bool = False,
                 retain_seconds: float = RETAIN_SECONDS):
        self.clock, self.by_node, self.retain_seconds = clock, by_node, retain_seconds
        self._lock = threading.Lock()
        self.tracker = UsageTracker(by_node)   # the rates, from what changed (the pass thread's)
        self._series: dict[str, dict[tuple, list]] = {attr: {} for attr, _, _ in FAMILIES.values()}

    def observe(self, policy, state, caches) -> None:
        """Count up to now at the old rates, then take the rates after one pass: its rules ``policy``,
        its derived ``state`` and the watch ``caches`` (kind -> KindCache) it read. A pass whose
        objects cannot be read keeps the old rates."""
        try:
            full, changed = self.tracker.update(policy, state, caches)
        except Exception as exc:  # noqa: BLE001 - a bad object must not stop the counting
            logger.warning("usage counters keep the previous rates: {}", exc)
            self.tracker = UsageTracker(self.by_node)   # read everything again next time
            return
        self.apply(changed, full)

    def update(self, rates: UsageRates) -> None:
        """Count at ``rates`` from now on, every other series gone."""
        self.apply({(which, labels): value for which in self._series
                    for labels, value in getattr(rates, which).items()}, full=True)

    def apply(self, changed: dict[tuple[str, tuple], float | None], full: bool = False) -> None:
        """Count up to now, then at the new rate of each ``(table, labels)`` of ``changed`` (None: gone);
        ``full``: a series ``changed`` leaves out is gone."""
        with self._lock:
            now = self.clock()
            if full:
                for which, table in self._series.items():
                    for labels in table:
                        changed.setdefault((which, labels), None)
            for (which, labels), rate in changed.items():
                series = self._series[which].get(labels)
                if series is None:
                    if rate is not None:
                        self._series[which][labels] = [0.0, now, rate, None]
                    continue
                series[0] += series[2] * max(now - series[1], 0.0)
                series[1], series[2], series[3] = now, rate or 0.0, now if rate is None else None

    def pause(self) -> None:
        """Stop counting (the Lease lost, the term over): every series gone from now on; the next pass
        reads everything again."""
        self.apply({}, full=True)
        self.tracker = UsageTracker(self.by_node)

    def totals(self) -> dict[str, dict[tuple, float]]:
        """Every counter now: family -> label values -> seconds; drops the series gone for longer
        than ``retain_seconds``."""
        with self._lock:
            now = self.clock()
            out = {}
            for family, (which, _labels, _help) in FAMILIES.items():
                table = self._series[which]
                for labels in [k for k, s in table.items()
                               if s[3] is not None and now - s[3] > self.retain_seconds]:
                    del table[labels]
                out[family] = {labels: s[0] + s[2] * max(now - s[1], 0.0) for labels, s in table.items()}
            return out

    def describe(self):
        return list(self._families().values())

    def collect(self):
        families = self._families()
        for family, values in self.totals().items():
            for labels, value in values.items():
                families[family].add_metric(list(labels), value)
        return list(families.values())

    def _families(self) -> dict[str, CounterMetricFamily]:
        tail = ["node"] if self.by_node else []
        return {family: CounterMetricFamily(family, text, labels=list(labels) + (
            tail if attr != "reserved" else [])) for family, (attr, labels, text) in FAMILIES.items()}
