"""The accelerator-seconds counters (runtime/controller/usage.py) read back as `accelpolicy usage` reads them
(runtime/report/usage.py over runtime/report/usagesource.py): scrapes every 15 s of a meter on a test clock,
written as the OpenMetrics snapshot a Prometheus holds, then the report of a window
(docs/tasks/report-usage.md)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from runtime.controller.metrics import ControllerMetrics
from runtime.controller.reconciler import ReconcileResult
from runtime.controller.usage import UsageMeter
from runtime.engine.pools.usage import UsageRates
from tests.usagecluster import (A10G, A10G_POOL, SCRAPE, T4, T4_POOL, Clock, Scraped, base_objects, caches_of, holder,
                                observe, rates_of)

def _meter(policy, objects, clock) -> UsageMeter:
    meter = UsageMeter(clock=clock)
    observe(meter, policy, objects)
    return meter


def _hours(report, **match) -> float:
    return sum(r.hours for r in report.charged if all(getattr(r, k) == v for k, v in match.items()))


def _quarters(policy):
    return [holder(policy, f"slice-{i}", f"team-{'ab'[i % 2]}", "node-a10g", [(0, 3, 400_000)],
                   created=f"2026-01-01T00:00:0{i}Z") for i in range(4)]


def test_four_quarter_slices_for_an_hour_are_one_accelerator_hour_sliced(policy, tmp_path):
    clock, scraped = Clock(), Scraped()
    scraped.run(_meter(policy, _quarters(policy), clock), clock, 3600)
    report = scraped.report(tmp_path, 0, 3600)
    assert _hours(report, view="sliced") == pytest.approx(1.0, rel=1e-9)
    assert [(r.namespace, r.pool, r.product, r.view, round(r.hours, 9)) for r in report.charged] == [
        ("team-a", A10G_POOL, A10G, "sliced", 0.5), ("team-b", A10G_POOL, A10G, "sliced", 0.5)]
    a10g = next(p for p in report.pools if p.pool == A10G_POOL)
    assert (a10g.installed, a10g.charged, a10g.idle) == pytest.approx((1.0, 1.0, 0.0))


def test_a_whole_t4_and_two_shares_for_half_an_hour(policy, tmp_path):
    pods = [holder(policy, "whole", "team-a", "node-t4-b", [(0, 1, None)]),
            holder(policy, "share-1", "team-b", "node-t4-b", [(1, 2, None)], created="2026-01-01T00:00:01Z"),
            holder(policy, "share-2", "team-b", "node-t4-b", [(1, 2, None)], created="2026-01-01T00:00:02Z")]
    clock, scraped = Clock(), Scraped()
    scraped.run(_meter(policy, pods, clock), clock, 1800)
    report = scraped.report(tmp_path, 0, 1800)
    shares = 2 * policy.constants.share / policy.constants.creditsPerAccelerator
    assert _hours(report, pool=T4_POOL, view="exclusive") == pytest.approx(0.5)
    assert _hours(report, pool=T4_POOL, view="shared") == pytest.approx(0.5 * shares)
    assert _hours(report, product=T4) == pytest.approx(0.5 + 0.5 * shares) == pytest.approx(0.6)


def test_charged_plus_idle_is_installed_in_every_pool_at_every_scrape(policy, tmp_path):
    clock, scraped = Clock(), Scraped()
    meter = _meter(policy, _quarters(policy)[:3], clock)
    scraped.run(meter, clock, 600)
    clock.now += 7.0   # a pass between two scrapes changes the rates
    observe(meter, policy, _quarters(policy)[:3] + [holder(policy, "whole", "team-c", "node-t4-a", [(0, 1, None)])])
    clock.now += SCRAPE - 7.0
    scraped.run(meter, clock, 1200)
    times = sorted({t for points in scraped.series.values() for t, _ in points})
    for t in times:
        per_pool: dict[str, list[float]] = {}
        for (name, labels), points in scraped.series.items():
            value = dict(points).get(t)
            if value is not None:
                sums = per_pool.setdefault(dict(labels).get("pool", ""), [0.0, 0.0, 0.0])
                sums[["accelpolicy_accelerator_charged_seconds_total", "accelpolicy_accelerator_idle_seconds_total",
                      "accelpolicy_accelerator_capacity_seconds_total"].index(name)] += value \
                    if "reserved" not in name else 0.0
        for pool, (charged, idle, capacity) in per_pool.items():
            assert charged + idle == pytest.approx(capacity, abs=1e-6), (t, pool)
    report = scraped.report(tmp_path, 0, 1200)
    for pool in report.pools:
        assert pool.charged + pool.idle == pytest.approx(pool.installed, rel=1e-9), pool.pool
    assert _hours(report, pool=A10G_POOL) == pytest.approx(0.75 * 1200 / 3600)
    assert _hours(report, namespace="team-c") == pytest.approx((1200 - 607) / 3600)


def test_a_restart_of_the_controller_loses_no_hours(policy, tmp_path):
    """The old process is scraped last at 1800 s and stops; the new one counts from its first pass at
    1800 s: its counters start from 0 again, and increase() adds what the old ones held."""
    clock, scraped = Clock(), Scraped()
    scraped.run(_meter(policy, _quarters(policy), clock), clock, 1800)
    clock.now = 1800.0
    restarted = _meter(policy, _quarters(policy), clock)
    clock.now += SCRAPE
    scraped.run(restarted, clock, 3600)
    values = [v for (name, labels), points in scraped.series.items() if dict(labels).get("namespace") == "team-a"
              for _, v in points]
    assert min(values[1:]) < max(values)   # the counter reset
    assert _hours(scraped.report(tmp_path, 0, 3600), view="sliced") == pytest.approx(1.0, rel=1e-9)


def test_a_restart_gap_is_the_only_loss(policy, tmp_path):
    """Between the old process's last scrape and the new one's first pass nothing counts: 30 s here."""
    clock, scraped = Clock(), Scraped()
    scraped.run(_meter(policy, _quarters(policy), clock), clock, 1800)
    clock.now = 1830.0
    restarted = _meter(policy, _quarters(policy), clock)
    clock.now = 1845.0
    scraped.run(restarted, clock, 3600)
    assert _hours(scraped.report(tmp_path, 0, 3600), view="sliced") == pytest.approx((3600 - 30) / 3600, rel=1e-9)


def test_pause_stops_counting_and_an_old_series_is_dropped(policy):
    clock = Clock()
    meter = UsageMeter(clock=clock, retain_seconds=100)
    meter.update(UsageRates(charged={("ns", "p", "f", "x", "sliced", ""): 0.25}))
    clock.now = 40.0
    meter.pause()
    clock.now = 90.0
    assert meter.totals()["accelpolicy_accelerator_charged_seconds"] == {("ns", "p", "f", "x", "sliced", ""): 10.0}
    clock.now = 141.0   # 101 s after its rate was last above 0
    assert meter.totals()["accelpolicy_accelerator_charged_seconds"] == {}


def test_a_pass_that_cannot_be_read_keeps_the_rates(policy):
    clock = Clock()
    meter = UsageMeter(clock=clock)
    meter.update(UsageRates(capacity={("p", "f", "x", "none", "usable"): 2.0}))
    meter.observe(policy, None, {})   # no state to read
    clock.now = 10.0
    assert meter.totals()["accelpolicy_accelerator_capacity_seconds"] == {("p", "f", "x", "none", "usable"): 20.0}


def test_the_controller_metrics_count_each_pass(policy):
    clock = Clock()
    snapshot, state, _ = rates_of(policy, _quarters(policy))
    caches = caches_of(base_objects() + _quarters(policy))
    controller = SimpleNamespace(cache=SimpleNamespace(caches=caches), applier=SimpleNamespace(writes=[]), observers=[],
                                 last_pass=SimpleNamespace(policy=policy, snapshot=snapshot), clock=lambda: None)
    metrics = ControllerMetrics(CollectorRegistry()).bind(controller)
    metrics.usage.clock = clock
    metrics.observe(ReconcileResult(state=state))
    clock.now = 3600.0
    text = generate_latest(metrics.registry).decode()
    assert "# TYPE accelpolicy_accelerator_charged_seconds_total counter" in text
    assert ('accelpolicy_accelerator_charged_seconds_total{clusterqueue="",namespace="team-a",pool="'
            f'{A10G_POOL}",product="{A10G}",resourceflavor="gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d",'
            'view="sliced"} 1800.0') in text
