"""The fault suite on kind (docs/reliability.md "Reliability: the fault suite"): faults under a steady load, each measured (e2e/chaos/).

Runs on the ``--cluster=kind`` stack after the walkthrough (and, in ``make test``, after the upgrade suite).
A load generator in its own process creates and deletes queue-labelled Pods and Instances (20 creates/s by
default) and records every answer, while each fault is injected (e2e/chaos/faults.py). Per fault the suite
asserts:

* no review failed (the fault marked ``fails_closed`` aside: every controller Pod killed), and no create
  was stored without our review, except inside the uninstall gap of ``helm-reinstall`` (from ``helm
  uninstall`` until both webhook configurations are created again: counted apart, ``gap_classes``);
* ready again, ``kubectl get instancetypes`` equal to the table before the fault, and the cluster equal to
  the state derived from its own facts (e2e/chaos/checker.py), each within 7 minutes;
* every pool object identical to before (uid and body), no duplicate or orphan Instance Pod, every Instance
  keeping its Pod, no administrator-authored object changed, no container restart beyond the injected ones
  (a stopped node's containers, restarted when it starts again, are the fault's).

Which faults: the short form (``short=True`` in faults.FAULTS) unless ``ACCELPOLICY_CHAOS=full`` (every fault,
``ACCELPOLICY_CHAOS_ROUNDS`` times, default 2: ``make chaos-kind``); ``ACCELPOLICY_CHAOS_FAULTS=a,b`` names
them. ``ACCELPOLICY_CHAOS_RATE`` sets the load's creates per second (default 20; 10 in the short form, which
runs inside `make test`). The results (``results.json``,
``table.md``, the answer log) go to ``build/chaos/<run>/``; the table is printed at the end.

The suite leaves the cluster as it found it: the load's namespace is deleted and the final state is
compared with the state before the first fault.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from chaos.faults import FAULTS

FULL = os.environ.get("ACCELPOLICY_CHAOS") == "full"
ROUNDS = int(os.environ.get("ACCELPOLICY_CHAOS_ROUNDS", "2")) if FULL else 1
NAMED = [n for n in os.environ.get("ACCELPOLICY_CHAOS_FAULTS", "").split(",") if n]
SELECTED = NAMED or [n for n, f in FAULTS.items() if FULL or f.short]
PLAN = [(name, r) for r in range(1, ROUNDS + 1) for name in SELECTED]
RATE = float(os.environ.get("ACCELPOLICY_CHAOS_RATE", "20" if FULL else "10"))   # the short form: a lighter CI


@pytest.fixture(scope="module")
def chaos(cluster, record_step):
    if cluster.stack is None:
        pytest.skip("kind backend only: faults injected into kind's nodes (--cluster=kind)")
    from chaos.faults import Target
    from chaos.suite import REPO, Suite
    from kind.stack import helm_values, tools

    stack = cluster.stack
    target = Target(stack.cluster, cluster.kubeconfig, stack.kind_node, tools(),
                    lambda image: helm_values(stack.kind_node, image), REPO / "deploy" / "chart", REPO)
    workdir = REPO / "build" / "chaos" / time.strftime("%Y%m%d-%H%M%S")
    suite = Suite(target, workdir, rate=RATE)
    t0 = time.monotonic()
    suite.start()
    yield suite
    summary = suite.stop()
    path = suite.write()
    record_step(f"fault suite ({len(suite.results)} faults, load {summary.get('created', '?')} creates): "
                f"results in {path}", time.monotonic() - t0, table=False)
    print(f"\nfault suite: {len(suite.results)} faults in {time.monotonic() - t0:.0f}s; load summary {summary}; "
          f"results {path}\n" + (workdir / "table.md").read_text())


@pytest.mark.parametrize("name, round_", PLAN, ids=[f"{n}-{r}" for n, r in PLAN])
def test_fault(chaos, name, round_, record_step):
    res = chaos.run(FAULTS[name], round_)
    record_step(f"fault {name} #{round_}: reviews {res.reviews} sent / {res.failed} failed {res.classes}, "
                f"ready {res.ready_s}s, table {res.table_s}s, converged {res.converged_s}s; {res.notes}",
                res.converged_s or 0.0, table=False)
    print(f"\n{name} #{round_}: {res}")
    assert res.problems() == []


def test_the_cluster_ends_as_it_began(chaos):
    """After every fault (and the load's objects removed): the pools, the administrator's objects and each
    Instance's Pod are those before the first fault, and the cluster equals its derivation."""
    from chaos import checker
    from chaos.faults import wait

    chaos.stop()
    final = wait("the cluster equal to its derivation and to the baseline pools", chaos.converged, timeout=300, every=2.0)
    assert checker.changed(chaos.baseline["admin"], final["admin"]) == []
    assert final["pods"] == chaos.baseline["pods"]
    assert final["duplicates"] == [] and final["orphans"] == []
    assert chaos.target.kubectl("get", "instancetypes").stdout.splitlines()[0] == chaos.baseline_table.splitlines()[0]
    assert checker.tables_match(chaos.target.kubectl("get", "instancetypes").stdout, chaos.baseline_table)
    # outside every fault window each answer is right ("skipped": the load generator's own backlog, no request;
    # "webhook-other": Kueue's webhook could not be called, e.g. Kueue's own Pod restarting after it lost its
    # leader Lease in an API server outage: counted and printed, not ours to serve)
    between = chaos.between_faults()
    print(f"\nanswers outside the fault windows: {between}")
    assert between.keys() <= {"ok", "skipped", "webhook-other"}, between
    # and then nothing loops (testing/steadystate.py): no eviction, no replaced Pod, no restart, no idle write
    from testing.steadystate import observe

    def get(*args):
        out = chaos.target.kubectl("get", *args, "-o", "json", check=False).stdout
        return json.loads(out) if out.strip() else {}
    state = observe(get)
    print(f"\n{state.summary()}")
    assert state.steady, state.summary()
