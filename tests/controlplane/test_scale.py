"""The live controller at a small scale (docs/performance.md "The live controller at 1,000 nodes"): benchmarks/scale.py's run at 100 nodes.

Its own local control plane (the session cluster's objects would change the expected tables), 100
synthetic nodes written directly, ``accelpolicy controller`` as a subprocess. Asserts values, never
timings (the figures are printed with ``-s``; goals live in benchmarks/scale.py): the table equals
an offline derive of the same objects, both NodeFeature flips reach the right rows, an idle
reconcile writes nothing, no partial status is ever polled through a churn of flips, and
``kubectl get instancetypes`` shows what the API holds.
"""
from __future__ import annotations

import json

import pytest

from benchmarks.scale import partial, run


def test_partial_detects_empty_cells():
    assert not partial(("q", "8/64Gi/100Gi", "1/1 10/10 100/100 0/0", "0/0"))
    assert partial(("q", "8/64Gi/100Gi", "/1 10/10 100/100 0/0", "0/0"))
    assert partial(("q", "8/64Gi/100Gi", "1/1 10/10 100/100", "0/0"))
    assert partial(("", "8/64Gi/100Gi", "1/1 10/10 100/100 0/0", "0/0"))
    assert partial((None, None, None, None))


@pytest.mark.controlplane
@pytest.mark.slow
def test_controller_at_100_nodes():
    figures = run(100, churn=6, rounds=1)
    print(json.dumps(figures))
    assert figures["errors"] == 0
    assert figures["first_reconcile"]["errors"] == 0 and figures["first_reconcile"]["writes"] > 0
    assert [f["to"] for f in figures["flips"]] == ["false", "true"]
    assert figures["idle"]["writes"] == 0
    assert figures["partial_observed"] == 0, figures["partial_examples"]
    assert figures["kubectl_matches"] is True
    assert figures["kubectl_rows"] >= 5


@pytest.mark.controlplane
@pytest.mark.slow
def test_instances_through_the_api_server_at_20_nodes():
    """benchmarks/instances_live.py at a small size: every Instance created through the API server
    (both webhooks called by it) is admitted and gets its Pod (the run waits for all of them); the
    webhook histogram counts each create's two reviews."""
    from benchmarks.instances_live import run as run_instances

    figures = run_instances(nodes=20, rate=10, seconds=1, samples=2)
    print(json.dumps(figures))
    assert figures["load"]["sent"] == 10 and figures["load"]["errors"] == {}
    assert figures["apply_to_pod_s"]["samples"] == 2
    hooks = figures["webhook_during_load"]
    assert hooks["instances-mutation"]["reviews"] >= 10 and hooks["instances-validation"]["reviews"] >= 10
