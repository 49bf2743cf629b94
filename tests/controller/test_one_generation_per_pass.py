"""One rules generation per reconcile pass: a reload that lands while a pass runs (one assignment of
``Controller.policy``, what :class:`runtime.reload.hosts.ControllerHost` does) is not
seen by that pass, by none of its steps nor by its applier; the next pass reads the new one whole.

Before, the reload set ``controller.policy`` and ``controller.applier.policy`` one after the other
from the watcher thread while a pass read ``self.policy`` about ten times: one pass could derive with
one generation and plan Instances, Workload checks and deletes with the next."""
from __future__ import annotations

from runtime.controller import passsteps, reconciler
from runtime.controller.reconciler import Controller
from runtime.engine.policy import Policy
from runtime.rules.loader import load_rules
from tests.controller.test_pass_writes import seed_api


def test_a_reload_during_a_pass_waits_for_the_next_pass(monkeypatch):
    old, new = Policy(load_rules()), Policy(load_rules())
    controller = Controller(seed_api(), old, env={}, fit_coalesce_seconds=0, tune_gc=False)
    seen: list[tuple[str, Policy]] = []
    swapped: list[bool] = []

    def watching(name, real, swap=False):
        def step(policy, *args, **kwargs):
            seen.append((name, policy))
            if swap and not swapped:
                swapped.append(True)
                controller.policy = new            # the reload's one assignment, mid-pass
            seen.append(("applier", controller.applier.policy))
            return real(policy, *args, **kwargs)
        return step

    monkeypatch.setattr(reconciler, "derive", watching("derive", reconciler.derive))
    monkeypatch.setattr(reconciler, "plan", watching("plan", reconciler.plan, swap=True))
    monkeypatch.setattr(reconciler, "plan_instances", watching("instances", reconciler.plan_instances))
    monkeypatch.setattr(reconciler, "plan_persistent_volumes", watching("volumes", reconciler.plan_persistent_volumes))
    monkeypatch.setattr(passsteps, "plan_workload_checks", watching("checks", passsteps.plan_workload_checks))
    controller.cache.start()
    try:
        assert controller.cache.wait_synced(10)
        controller.reconcile()
        first = list(seen)
        assert controller.guard.policy is old
        seen.clear()
        controller.reconcile()
    finally:
        controller.cache.stop()
    assert [name for name, _ in first if name != "applier"] == ["derive", "plan", "instances", "volumes", "checks"]
    assert {id(policy) for _, policy in first} == {id(old)}        # the whole first pass: the old generation
    assert {id(policy) for _, policy in seen} == {id(new)}         # the next pass: the new one, whole
    assert controller.policy is new and controller.applier.policy is new and controller.guard.policy is new
