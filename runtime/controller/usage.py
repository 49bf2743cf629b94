"""The accelerator-seconds counters of showback (docs/tasks/report-usage.md "The counters").

After every reconcile pass the controller (the leader; it sees every Devices object and every Pod) reads
what each accelerator is charged for now (:func:`runtime.engine.pools.usage.usage_rates`). A
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
leader to the first pass of the new one). A series whose rate has been 0 for ``retain_seconds`` is
dropped (Prometheus marks it stale), so only the label sets seen lately are held.
"""
from __future__ import annotations

import threading
import time
from typing import Callable

from loguru import logger
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from runtime.engine.pools.usage import CAPACITY_LABELS, CHARGED_LABELS, FAMILIES as NAMES, RESERVED_LABELS, \
    UsageRates, usage_rates

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
    controller's registry. ``clock``: monotonic seconds; ``by_node``: the rates carry the node."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, by_node: bool = False,
                 retain_seconds: float = RETAIN_SECONDS):
        self.clock, self.by_node, self.retain_seconds = clock, by_node, retain_seconds
        self._lock = threading.Lock()
        self._rates = UsageRates()
        self._since: float | None = None   # when the totals were last brought up to date
        self._totals: dict[str, dict[tuple, float]] = {f: {} for f in FAMILIES}
        self._last_held: dict[str, dict[tuple, float]] = {f: {} for f in FAMILIES}

    def observe(self, policy, snapshot, state) -> None:
        """Count up to now at the old rates, then take the rates of one pass (its rules ``policy``,
        ``snapshot`` and derived ``state``). A pass that cannot be read keeps the old rates."""
        try:
            rates = usage_rates(policy, snapshot, state.node_flavors, state.resource_flavors,
                                state.cluster_queues, by_node=self.by_node)
        except Exception as exc:  # noqa: BLE001 - a bad object must not stop the counting
            logger.warning("usage counters keep the previous rates: {}", exc)
            return
        self.update(rates)

    def update(self, rates: UsageRates) -> None:
        """Count up to now at the old rates; count at ``rates`` from now on."""
        with self._lock:
            now = self.clock()
            self._accrue(now)
            self._rates, self._since = rates, now

    def pause(self) -> None:
        """Stop counting (the Lease lost, the term over): up to now at the old rates, nothing after."""
        self.update(UsageRates())

    def _accrue(self, now: float) -> None:
        if self._since is None:
            return
        elapsed = max(now - self._since, 0.0)
        self._since = now
        for family, (attr, _labels, _help) in FAMILIES.items():
            totals, held = self._totals[family], self._last_held[family]
            rates = getattr(self._rates, attr)
            for labels, rate in rates.items():
                totals[labels] = totals.get(labels, 0.0) + rate * elapsed
                if rate > 0:
                    held[labels] = now
                else:
                    held.setdefault(labels, now)
            for labels in [k for k, t in held.items() if k not in rates and now - t > self.retain_seconds]:
                del held[labels]
                totals.pop(labels, None)

    def totals(self) -> dict[str, dict[tuple, float]]:
        """Every counter now: family -> label values -> seconds (a copy)."""
        with self._lock:
            self._accrue(self.clock())
            return {family: dict(values) for family, values in self._totals.items()}

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
