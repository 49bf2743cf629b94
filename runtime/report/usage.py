"""`accelpolicy usage`: accelerator-hours over a window, from the controller's counters
(docs/tasks/report-usage.md "Report usage").

Sections, each from one question to the source (:mod:`runtime.report.usagesource`):

* **charged**: accelerator-hours by namespace, pool, product and view
  (``accelpolicy_accelerator_charged_seconds``, asked once by those labels and the admitting
  ClusterQueue: it serves the fairness section too);
* **pools**: per pool and product, the installed hours (``..._capacity_seconds``), the hours charged
  in it, the idle hours (``..._idle_seconds``) and, of them, the hours out of service; a **total**
  line over the fleet, where installed = charged + idle (the residual, when counters started or
  stopped inside the window, is shown);
* **fairness**: per ClusterQueue and namespace, the quota hours admitted Workloads held
  (``accelpolicy_clusterqueue_reserved_seconds``) against the hours charged through that queue, and
  the held hours not used.

Outputs: a kubectl-style table per section, ``json``, ``csv`` (one row per figure, a ``section``
column first) and ``html`` (:mod:`runtime.report.usagehtml`).
"""
from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, dataclass, field

from tabulate import tabulate

from runtime.engine.pools.usage import FAMILIES, OUT_OF_SERVICE
from runtime.report.tables import KUBECTL_FORMAT
from runtime.report.usagesource import UsageSourceError, Window

HOUR = 3600.0
NO_NAME = "<none>"   # a pool, flavor or queue label left empty (an unmanaged node, a Pod outside Kueue)


class NoUsageData(UsageSourceError):
    """The window holds no samples of the counters."""


@dataclass(frozen=True, order=True)
class ChargeRow:
    namespace: str
    pool: str
    product: str
    view: str
    hours: float


@dataclass(frozen=True)
class PoolRow:
    """One pool's hours: ``installed`` = ``charged`` + ``idle`` (``out_of_service`` is part of idle)."""

    pool: str
    product: str
    installed: float
    charged: float
    idle: float
    out_of_service: float

    @property
    def idle_share(self) -> float:
        return self.idle / self.installed if self.installed else 0.0


@dataclass(frozen=True)
class QueueRow:
    """Quota hours held by a namespace's admitted Workloads in a ClusterQueue against the hours charged
    to its Pods admitted there; ``unused`` the held hours not charged (never below 0)."""

    clusterqueue: str
    namespace: str
    reserved: float
    charged: float

    @property
    def unused(self) -> float:
        return max(self.reserved - self.charged, 0.0)


@dataclass
class UsageReport:
    window: Window
    charged: list[ChargeRow] = field(default_factory=list)
    pools: list[PoolRow] = field(default_factory=list)
    queues: list[QueueRow] = field(default_factory=list)

    def total(self) -> PoolRow:
        """The fleet: every pool added up."""
        return PoolRow("TOTAL", "", *(sum(getattr(p, f) for p in self.pools)
                                      for f in ("installed", "charged", "idle", "out_of_service")))


def _name(value: str) -> str:
    return value or NO_NAME


def build_report(source, window: Window) -> UsageReport:
    """The report of ``window`` from ``source`` (a :mod:`runtime.report.usagesource` source).
    :class:`NoUsageData` when no capacity was counted in the window."""
    capacity = source.increases(FAMILIES["capacity"], ("pool", "product", "state"), window)
    if not capacity:
        raise NoUsageData(f"no accelerator counters between {window.start.isoformat()} and "
                          f"{window.end.isoformat()}: {FAMILIES['capacity']}_total has fewer than two "
                          f"samples in the window (is the controller scraped, and was it leading then?)")
    idle = source.increases(FAMILIES["idle"], ("pool", "product", "state"), window)
    by_queue = source.increases(FAMILIES["charged"], ("namespace", "pool", "product", "view", "clusterqueue"),
                                window)   # one query of the largest counter serves both sections
    charged = _sum(by_queue, lambda k: k[:4])
    report = UsageReport(window)
    report.charged = sorted(ChargeRow(_name(ns), _name(pool), product, view, s / HOUR)
                            for (ns, pool, product, view), s in charged.items())
    pools: dict[tuple[str, str], dict[str, float]] = {}

    def pool(key: tuple[str, str]) -> dict[str, float]:
        return pools.setdefault(key, {"installed": 0.0, "charged": 0.0, "idle": 0.0, "oos": 0.0})
    for (name, product, state), s in capacity.items():
        pool((name, product))["installed"] += s
        pool((name, product))["oos"] += s if state == OUT_OF_SERVICE else 0.0
    for (name, product, _state), s in idle.items():
        pool((name, product))["idle"] += s
    for (_ns, name, product, _view), s in charged.items():
        pool((name, product))["charged"] += s
    figures = ("installed", "charged", "idle", "oos")
    report.pools = [PoolRow(_name(name), product, *(r[k] / HOUR for k in figures))
                    for (name, product), r in sorted(pools.items())]
    report.queues = _queues(source, window, _sum(by_queue, lambda k: (k[4], k[0])))
    return report


def _sum(values: dict[tuple, float], key) -> dict[tuple, float]:
    out: dict[tuple, float] = {}
    for labels, value in values.items():
        out[key(labels)] = out.get(key(labels), 0.0) + value
    return out


def _queues(source, window: Window, charged: dict[tuple, float]) -> list[QueueRow]:
    reserved = source.increases(FAMILIES["reserved"], ("clusterqueue", "namespace"), window)
    return [QueueRow(_name(q), _name(ns), reserved.get((q, ns), 0.0) / HOUR, charged.get((q, ns), 0.0) / HOUR)
            for q, ns in sorted(set(reserved) | set(charged))]


def fmt_hours(hours: float) -> str:
    return f"{hours:.3f}"


def fmt_share(share: float) -> str:
    return f"{100 * share:.1f}%"


def _table(header: list[str], rows: list[list[str]]) -> str:
    text = tabulate([header, *rows], tablefmt=KUBECTL_FORMAT, stralign="left", numalign="left",
                    disable_numparse=True)
    return "\n".join(line.rstrip() for line in text.splitlines())


def residual(report: UsageReport) -> float:
    """Installed - charged - idle over the fleet, in hours (0 when every counter covered the window)."""
    total = report.total()
    return total.installed - total.charged - total.idle


def render_table(report: UsageReport) -> str:
    """The three sections as kubectl-style tables, each under a ``# <section>`` line."""
    w = report.window
    out = [f"# accelerator-hours from {w.start.isoformat()} to {w.end.isoformat()} "
           f"({w.seconds / HOUR:.3f} h)",
           _table(["NAMESPACE", "POOL", "PRODUCT", "VIEW", "HOURS"],
                  [[r.namespace, r.pool, r.product, r.view, fmt_hours(r.hours)] for r in report.charged]), "",
           "# pools: installed = charged + idle (idle includes out of service)"]
    rows = [[p.pool, p.product, *map(fmt_hours, (p.installed, p.charged, p.idle, p.out_of_service)),
             fmt_share(p.idle_share)] for p in [*report.pools, report.total()]]
    out.append(_table(["POOL", "PRODUCT", "INSTALLED", "CHARGED", "IDLE", "OUT-OF-SERVICE", "IDLE-SHARE"],
                      rows))
    if abs(residual(report)) >= 0.0005:
        out.append(f"# residual installed - charged - idle: {fmt_hours(residual(report))} h (counters that "
                   f"started or stopped inside the window)")
    out += ["", "# fairness: quota hours held by admitted Workloads vs hours charged, per ClusterQueue",
            _table(["CLUSTERQUEUE", "NAMESPACE", "QUOTA-HELD", "CHARGED", "HELD-UNUSED"],
                   [[q.clusterqueue, q.namespace, *map(fmt_hours, (q.reserved, q.charged, q.unused))]
                    for q in report.queues]) if report.queues else "No ClusterQueue usage in the window"]
    return "\n".join(out)


def as_dict(report: UsageReport) -> dict:
    """The report as JSON-ready data (hours; the window in RFC 3339)."""
    return {"window": {"from": report.window.start.isoformat(), "to": report.window.end.isoformat(),
                       "hours": report.window.seconds / HOUR},
            "charged": [asdict(r) for r in report.charged],
            "pools": [{**asdict(p), "idleShare": p.idle_share} for p in report.pools],
            "total": {**asdict(report.total()), "idleShare": report.total().idle_share,
                      "residual": residual(report)},
            "fairness": [{**asdict(q), "unused": q.unused} for q in report.queues]}


def render_json(report: UsageReport) -> str:
    return json.dumps(as_dict(report), indent=2)


CSV_COLUMNS = ("section", "namespace", "pool", "product", "view", "clusterqueue", "figure", "hours")


def render_csv(report: UsageReport) -> str:
    """One row per figure: ``charged`` rows (namespace, pool, product, view), ``pool`` and ``total`` rows
    (figure installed, charged, idle, outOfService), ``fairness`` rows (clusterqueue, namespace; figure
    quotaHeld, charged, heldUnused)."""
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(CSV_COLUMNS)
    for r in report.charged:
        out.writerow(["charged", r.namespace, r.pool, r.product, r.view, "", "charged", fmt_hours(r.hours)])
    for section, p in [*(("pool", p) for p in report.pools), ("total", report.total())]:
        for figure, hours in (("installed", p.installed), ("charged", p.charged), ("idle", p.idle),
                              ("outOfService", p.out_of_service)):
            pool = "" if section == "total" else p.pool
            out.writerow([section, "", pool, p.product, "", "", figure, fmt_hours(hours)])
    for q in report.queues:
        for figure, hours in (("quotaHeld", q.reserved), ("charged", q.charged), ("heldUnused", q.unused)):
            out.writerow(["fairness", q.namespace, "", "", "", q.clusterqueue, figure, fmt_hours(hours)])
    return buf.getvalue().rstrip("\n")
