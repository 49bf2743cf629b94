"""The live controller at a small scale (issue 16, item 4): benchmarks/scale.py's run at 100 nodes.

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
    figures = run(100, churn=6)
    print(json.dumps(figures))
    assert figures["errors"] == 0
    assert figures["first_reconcile"]["errors"] == 0 and figures["first_reconcile"]["writes"] > 0
    assert [f["to"] for f in figures["flips"]] == ["false", "true"]
    assert figures["idle"]["writes"] == 0
    assert figures["partial_observed"] == 0, figures["partial_examples"]
    assert figures["kubectl_matches"] is True
    assert figures["kubectl_rows"] >= 5
