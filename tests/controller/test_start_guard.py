"""The start guard (runtime/controller/startguard.py): a controller that starts on a
view without its facts takes no destructive step until they arrive (or the grace period of
rules/controller.yaml ``startGuard`` ends). Against the scripted API: the seed cluster reconciled
by one controller, then a second one started after an "uninstall" (every NodeFeature gone, NFD's labels
stripped from the Nodes), whose facts come back after its first pass."""
from __future__ import annotations

import copy

import pytest

from runtime.controller.reconciler import Controller
from runtime.controller.startguard import StartGuard, destructive, stops_or_shrinks
from runtime.engine.plan import Action, Verb
from runtime.engine.policy import Policy
from runtime.engine.snapshot import Snapshot
from runtime.rules.loader import load_rules
from tests.controller.test_pass_writes import seed_api
from tests.engine.test_policy_is_data import edit, rules_copy  # noqa: F401 - the fixture

POLICY = Policy(load_rules())
QUEUE = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "q"},
         "spec": {"stopPolicy": "None", "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
             {"name": "f1", "resources": [{"name": "cpu", "nominalQuota": "8"}]},
             {"name": "f2", "resources": [{"name": "cpu", "nominalQuota": "4"}]}]}]}}


def _spec(**change):
    return {**copy.deepcopy(QUEUE["spec"]), **change}


def test_what_counts_as_destructive():
    snapshot = Snapshot.from_objects([QUEUE], origin="test")
    groups = QUEUE["spec"]["resourceGroups"]
    fewer = [{**groups[0], "flavors": groups[0]["flavors"][:1]}]
    less = [{**groups[0], "flavors": [groups[0]["flavors"][0],
                                     {"name": "f2", "resources": [{"name": "cpu", "nominalQuota": "3500m"}]}]}]
    more = [{**groups[0], "flavors": groups[0]["flavors"] + [
        {"name": "f3", "resources": [{"name": "cpu", "nominalQuota": "2"}]}]}]
    assert stops_or_shrinks(_spec(stopPolicy="HoldAndDrain"), QUEUE) is True
    assert stops_or_shrinks(_spec(stopPolicy="Hold"), QUEUE) is True
    assert stops_or_shrinks(_spec(resourceGroups=fewer), QUEUE) is True
    assert stops_or_shrinks(_spec(resourceGroups=less), QUEUE) is True
    assert stops_or_shrinks(_spec(resourceGroups=[]), QUEUE) is True
    assert stops_or_shrinks(_spec(resourceGroups=more), QUEUE) is False
    assert stops_or_shrinks({"metadata": {"labels": {"x": None}}}.get("spec"), QUEUE) is False
    assert stops_or_shrinks(_spec(stopPolicy="HoldAndDrain"), None) is False     # a create
    cases = [
        (Action(Verb.DELETE, "ResourceFlavor", "f1", body={}), True),
        (Action(Verb.DELETE, "LocalQueue", "lq", "default", body={}), True),
        (Action(Verb.DELETE, "InstanceTypeFlavor", "x", body={}), True),
        (Action(Verb.DELETE, "Pod", "p", "default", body={}), False),
        (Action(Verb.RECREATE, "ResourceFlavor", "f1", body={}), True),
        (Action(Verb.PATCH, "Instance", "i", "default", body={"spec": {"stop": True}}), True),
        (Action(Verb.PATCH, "Instance", "i", "default", body={"spec": {"stop": False}}), False),
        (Action(Verb.APPLY, "ClusterQueue", "q", body={**QUEUE, "spec": _spec(resourceGroups=fewer)}), True),
        (Action(Verb.APPLY, "ClusterQueue", "q", body={**QUEUE, "spec": _spec(resourceGroups=more)}), False),
        (Action(Verb.PATCH, "ClusterQueue", "q", body={"spec": {"stopPolicy": "HoldAndDrain"}}), True),
        (Action(Verb.APPLY, "ResourceFlavor", "f1", body={}), False),
        (Action(Verb.APPLY_STATUS, "InstanceType", "t", body={}), False),
        (Action(Verb.PATCH, "Node", "n", body={"metadata": {"labels": {"a": None}}}), False),
    ]
    assert [(a.verb, a.kind, destructive(a, snapshot)) for a, _ in cases] == [(a.verb, a.kind, d) for a, d in cases]


def _uninstalled(api) -> list[dict]:
    """What an uninstall and a namespace delete leave: no NodeFeature, no propagated label on a Node.
    Returns the NodeFeatures removed."""
    removed = api.objects.pop("NodeFeature")
    for node in api.objects["Node"]:
        labels = node["metadata"]["labels"]
        node["metadata"]["labels"] = {k: v for k, v in labels.items()
                                      if not k.startswith(tuple(POLICY.labels.propagatedPrefixes))}
    return removed


def _state(api) -> dict:
    kinds = ("ResourceFlavor", "ClusterQueue", "LocalQueue", "InstanceType", "InstanceTypeFlavor", "AdmissionCheck")
    return {(kind, o["metadata"].get("namespace", ""), o["metadata"]["name"]): (o["metadata"]["uid"], o.get("spec"))
            for kind in kinds for o in api.objects.get(kind, [])}


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def reconciled():
    """The seed cluster as one controller leaves it (two passes: the writes, then the echo)."""
    api = seed_api()
    first = Controller(api, POLICY, env={}, fit_coalesce_seconds=0, tune_gc=False).start_caches(10)
    try:
        assert first.reconcile().errors == []
        assert first.reconcile().planned == []
    finally:
        first.cache.stop()
    yield api
    api.stop.set()


def _restarted(api, clock) -> Controller:
    controller = Controller(api, POLICY, env={}, fit_coalesce_seconds=0, tune_gc=False)
    controller.guard.clock = clock
    controller.start_caches(10)
    controller.guard.begin()   # what run() does when leading starts
    return controller


def test_a_start_without_facts_holds_every_destructive_step_until_they_arrive(reconciled):
    api, clock = reconciled, Clock()
    before = _state(api)
    features = _uninstalled(api)
    controller = _restarted(api, clock)
    try:
        writes = len(api.writes)
        blind = controller.reconcile()
        held = sorted({(a.verb.value, a.kind) for a in blind.deferred})
        assert ("delete", "ResourceFlavor") in held and ("apply", "ClusterQueue") in held
        assert not [a for a in blind.planned if destructive(a, controller.last_pass.snapshot)]
        assert [w for w in api.writes[writes:] if w[0] == "delete"] == []
        assert controller.guard.missing == ["node-a10g", "node-cpu", "node-t4-a", "node-t4-b"]
        assert controller.guard.due() == 1000.0 + POLICY.controller.startGuard.graceSeconds
        assert _state(api) == before
        for nf in features:    # the agents re-create their NodeFeatures
            api.objects.setdefault("NodeFeature", []).append(nf)
            controller.cache["NodeFeature"].observe(copy.deepcopy(nf))
        clock.now += 5
        settled = controller.reconcile()
        assert controller.guard.opened == "every cache listed and every Node's facts present"
        assert settled.deferred == [] and [a for a in settled.planned if destructive(a, controller.last_pass.snapshot)] == []
        controller.reconcile()
        assert _state(api) == before
    finally:
        controller.cache.stop()


def test_the_grace_period_ends_the_hold(reconciled):
    api, clock = reconciled, Clock()
    _uninstalled(api)
    controller = _restarted(api, clock)
    try:
        assert controller.reconcile().deferred
        clock.now += POLICY.controller.startGuard.graceSeconds
        late = controller.reconcile()
        assert controller.guard.opened == ("grace period of 120s over (Nodes still without their facts: node-a10g, "
                                           "node-cpu, node-t4-a, node-t4-b)")
        assert late.deferred == [] and ("delete", "ResourceFlavor") in {(w.verb, w.kind) for w in late.writes}
    finally:
        controller.cache.stop()


def test_a_start_with_every_fact_present_holds_nothing(reconciled):
    api, clock = reconciled, Clock()
    controller = _restarted(api, clock)
    try:
        idle = controller.reconcile()
        assert (idle.planned, idle.deferred, idle.writes) == ([], [], [])
        assert controller.guard.opened == "every cache listed and every Node's facts present"
    finally:
        controller.cache.stop()


def test_the_guard_is_policy_data(rules_copy):
    """graceSeconds, the NodeFeature roles and which Nodes are expected come from the rules."""
    edit(rules_copy / "controller.yaml", "    graceSeconds: 120\n", "    graceSeconds: 30\n")
    edit(rules_copy / "controller.yaml", """    expectFacts: >-
      keys.cpuNameAnnotation in annotations &&
      (role == "worker" || ("groups" in devices && size(devices.groups) > 0))""",
         "    expectFacts: '!(\"node-role.kubernetes.io/control-plane\" in labels)'")
    policy = Policy(load_rules(rules_copy))
    api = seed_api()
    api.objects["Node"].append({"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": "cp", "labels": {"node-role.kubernetes.io/control-plane": ""}}})
    snapshot = Snapshot.from_objects([o for items in api.objects.values() for o in items], origin="test")
    guard = StartGuard(policy, clock=Clock())
    assert guard.nodes_without_facts(snapshot) == ["node-cpu"]   # no device-manager NodeFeature; cp not expected
    guard.begin()
    assert guard.remaining() == 30.0


def test_by_default_a_node_no_agent_ever_described_is_not_waited_for():
    """expectFacts of the shipped rules: the Nodes carrying the agent's CPU annotation (which outlives an
    uninstall, unlike NFD's labels) are waited for; a control-plane Node no agent runs on is not."""
    api = seed_api()
    removed = _uninstalled(api)
    assert removed
    api.objects["Node"].append({"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": "accelpolicy-control-plane", "labels": {"node-role.kubernetes.io/control-plane": ""}}})
    snapshot = Snapshot.from_objects([o for items in api.objects.values() for o in items], origin="test")
    assert StartGuard(POLICY).nodes_without_facts(snapshot) == ["node-a10g", "node-cpu", "node-t4-a", "node-t4-b"]
    with_facts = Snapshot.from_objects([o for items in api.objects.values() for o in items] + removed, origin="test")
    guard = StartGuard(POLICY, clock=Clock())
    assert guard.nodes_without_facts(with_facts) == []
    assert guard.whole(with_facts, []) == "every cache listed and every Node's facts present"


def test_a_node_with_accelerators_is_waited_for_until_its_device_manager_facts_arrive():
    """The CI failure of test_start_guard_live: the agents' NodeFeatures came back one by one, the guard
    opened once every worker NodeFeature was there, and a pass before node-t4-b's deviceManager NodeFeature
    saw its T4s gone and recreated the T4 flavor. By default a Node whose Devices (cluster-scoped, owned by
    the Node: it outlives an uninstall) lists accelerators is waited for until its deviceManager
    NodeFeature is there too; a Node without accelerators (node-cpu: no Devices) needs its worker only."""
    api = seed_api()
    removed = _uninstalled(api)
    late = [nf for nf in removed if nf["metadata"]["name"] == "node-t4-b-gpustack-device-manager"]
    assert len(late) == 1
    partial = Snapshot.from_objects([o for items in api.objects.values() for o in items]
                                    + [nf for nf in removed if nf not in late], origin="test")
    guard = StartGuard(POLICY, clock=Clock())
    assert guard.nodes_without_facts(partial) == ["node-t4-b"]
    assert guard.whole(partial, []) is None
    devices = [o for o in api.objects["Devices"] if o["metadata"]["name"] == "node-t4-b"]
    assert devices and devices[0]["spec"]["groups"]
    no_accelerators = copy.deepcopy(devices[0])
    no_accelerators["spec"]["groups"] = []
    without = Snapshot.from_objects([o for items in api.objects.values() for o in items if o is not devices[0]]
                                    + [no_accelerators] + [nf for nf in removed if nf not in late], origin="test")
    assert guard.nodes_without_facts(without) == []
    whole = Snapshot.from_objects([o for items in api.objects.values() for o in items] + removed, origin="test")
    assert guard.whole(whole, []) == "every cache listed and every Node's facts present"
