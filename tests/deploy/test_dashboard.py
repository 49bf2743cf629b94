"""The Grafana dashboard (deploy/chart/dashboards/accelpolicy.json): every query names metrics the
code exports (with their labels), each panel's unit is its metrics' unit, and the chart ships it
(and the ServiceMonitor/PodMonitor) only behind their values flags."""
from __future__ import annotations

import json
import re

import pytest

from docs.gen import metric_table
from tests.deploy.test_chart import CHART, by_kind, render

DASHBOARD = CHART / "dashboards" / "accelpolicy.json"
METRIC = re.compile(r"\b(accelpolicy_[a-z0-9_]+)(\{[^}]*\})?")
MATCHER = re.compile(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)")
GROUPING = re.compile(r"\bby\s*\(([^)]*)\)")
TARGET_LABELS = {"le", "instance", "job", "pod", "namespace", "container", "service", "endpoint"}
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def _series() -> dict[str, tuple[str, str, tuple]]:
    """Exposed series name -> (family, type, labels)."""
    return {family + suffix: (family, kind, labels) for family, (kind, labels, *_rest) in metric_table().items()
            for suffix in SUFFIXES[kind]}


def _panels() -> list[dict]:
    return json.loads(DASHBOARD.read_text())["panels"]


def expected_unit(expr: str, series: dict) -> str:
    """The unit a query's values have: seconds for a quantile or a plain ``_seconds`` gauge or an increase of
    a ``_seconds`` counter, a plain number for the rate of a ``_seconds`` counter (accelerator-seconds per
    second: accelerators) and a share for one such rate over another, events per second for a rate of any
    other counter (or of a histogram's count), else a plain number (views, credits, counts, modes, 0/1
    flags)."""
    names = [m.group(1) for m in METRIC.finditer(expr)]
    family, kind = series[names[0]][0], series[names[0]][1]
    if "histogram_quantile(" in expr:
        return "s" if family.endswith("_seconds") else "none"
    if re.search(r"\brate\(", expr) and kind == "counter" and family.endswith("_seconds"):
        # seconds per second: accelerators in use; one over another, a share
        return "percentunit" if " / " in expr else "none"
    if re.search(r"\brate\(", expr):
        return "ops"
    return "s" if family.endswith("_seconds") else "none"


@pytest.mark.parametrize("panel", _panels(), ids=lambda p: p["title"])
def test_every_query_names_exported_metrics_and_their_labels(panel):
    series = _series()
    for target in panel["targets"]:
        expr = target["expr"]
        found = list(METRIC.finditer(expr))
        assert found, f"{panel['title']}: {expr} names no accelpolicy metric"
        for match in found:
            assert match.group(1) in series, f"{panel['title']}: {match.group(1)} is not exported"
            _, _, labels = series[match.group(1)]
            used = set(MATCHER.findall(match.group(2) or ""))
            assert used <= set(labels) | TARGET_LABELS, f"{match.group(1)}: unknown labels {used - set(labels)}"
        for group in GROUPING.findall(expr):
            known = set().union(*(series[m.group(1)][2] for m in found)) | TARGET_LABELS
            assert {g.strip() for g in group.split(",")} <= known, f"{panel['title']}: by ({group})"


@pytest.mark.parametrize("panel", _panels(), ids=lambda p: p["title"])
def test_panel_unit_is_its_metrics_unit(panel):
    series = _series()
    units = {expected_unit(t["expr"], series) for t in panel["targets"]}
    assert units == {panel["fieldConfig"]["defaults"]["unit"]}, panel["title"]


def test_the_unit_rule_tells_seconds_from_rates_and_numbers():
    series = _series()
    assert expected_unit("histogram_quantile(0.99, sum by (le) (rate(accelpolicy_reconcile_seconds_bucket[5m])))",
                         series) == "s"
    assert expected_unit("sum(rate(accelpolicy_api_writes_total[5m]))", series) == "ops"
    assert expected_unit('accelpolicy_instancetype_remaining{view="sl"}', series) == "none"
    charged = "accelpolicy_accelerator_charged_seconds_total"
    assert expected_unit(f"sum(increase({charged}[1h]))", series) == "s"
    assert expected_unit(f"sum(rate({charged}[5m]))", series) == "none"
    assert expected_unit(f"sum(rate({charged}[5m])) / sum(rate(accelpolicy_accelerator_capacity_seconds_total[5m]))",
                         series) == "percentunit"


def test_the_dashboard_covers_the_issue_panels():
    exprs = " ".join(t["expr"] for p in _panels() for t in p["targets"])
    for family in ("accelpolicy_instancetype_capacity", "accelpolicy_instancetype_remaining",
                   "accelpolicy_admission_review_seconds_bucket", "accelpolicy_admission_rule_hits_total",
                   "accelpolicy_reconcile_seconds_bucket", "accelpolicy_agent_ledger_remaining_credits",
                   "accelpolicy_admissioncheck_answers_total", "accelpolicy_accelerator_charged_seconds_total",
                   "accelpolicy_accelerator_idle_seconds_total", "accelpolicy_accelerator_capacity_seconds_total",
                   "accelpolicy_clusterqueue_reserved_seconds_total"):
        assert family in exprs


def test_chart_ships_the_dashboard_and_monitors_only_behind_their_flags():
    assert not [k for k in by_kind(render()) if k[0] in ("ServiceMonitor", "PodMonitor")
                or k == ("ConfigMap", "accelpolicy-dashboard")]
    objects = by_kind(render("metrics.dashboard.enabled=true", "metrics.serviceMonitor.enabled=true"))
    configmap = objects[("ConfigMap", "accelpolicy-dashboard")]
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["accelpolicy.json"]) == json.loads(DASHBOARD.read_text())
    monitor = objects[("ServiceMonitor", "gpustack-operator-worker")]
    assert monitor["spec"]["endpoints"] == [{
        "port": "webhook", "path": "/metrics", "scheme": "https", "interval": "30s",
        "tlsConfig": {"serverName": "gpustack-operator-worker.gpustack-system.svc",
                      # the CA certificate the leader publishes, never the serving Secret (it holds keys)
                      "ca": {"configMap": {"name": "gpustack-operator-worker-webhook-ca", "key": "ca.crt"}}}}]
    service = objects[("Service", "gpustack-operator-worker")]
    assert [p["name"] for p in service["spec"]["ports"]] == ["webhook"]
    admission = objects[("Deployment", "gpustack-operator-worker-admission")]   # the Service's Pods (docs/availability.md "Availability: admission through faults, and a start that loses nothing")
    assert service["spec"]["selector"] == admission["spec"]["selector"]["matchLabels"]
    controller = objects[("PodMonitor", "gpustack-operator-worker")]   # the controller's own metrics
    deployment = objects[("Deployment", "gpustack-operator-worker")]
    assert [p["name"] for p in deployment["spec"]["template"]["spec"]["containers"][0]["ports"]] == ["metrics"]
    assert controller["spec"]["podMetricsEndpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "30s",
                                                           "honorLabels": True}]   # the usage counters' namespace
    assert controller["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    pods = objects[("PodMonitor", "gpustack-operator-device-manager")]
    daemonset = objects[("DaemonSet", "gpustack-operator-device-manager")]
    assert [p["name"] for p in daemonset["spec"]["template"]["spec"]["containers"][0]["ports"]] == ["health"]
    assert pods["spec"]["podMetricsEndpoints"] == [{"port": "health", "path": "/metrics", "interval": "30s"}]
    assert pods["spec"]["selector"]["matchLabels"] == daemonset["spec"]["selector"]["matchLabels"]
