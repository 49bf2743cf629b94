"""Pool derivation: from a Snapshot to the DesiredState the controller would make the cluster hold.

One pure function, :func:`derive`, serves the CLI (``get``/``derive``), the controller and tests.
Spec: docs/concepts/pools-and-flavors.md "Pools and flavors" (whole file), docs/concepts/four-views.md "The
four views", docs/tasks/add-manufacturer-or-preset.md "Add a manufacturer or preset". Order of work:

1. settings from the ``gpustack-settings`` Secret (rules/settings.yaml);
   2. Nodes with NodeFeature labels propagated; managed nodes contribute ResourceFlavors;
   3. derived InstanceTypes for pools that have none (create-only, docs/tasks/add-manufacturer-or-preset.md
   "Change a preset (and see the effect in a minute)"), defaulted as the webhook would;
   4. one ClusterQueue per InstanceType not being deleted, its LocalQueues, the AdmissionCheck
   (docs/concepts/pools-and-flavors.md "Queues and the entrance" and "The AdmissionCheck
   `gpustack-node-devices`");
   5. InstanceType status for every type (docs/concepts/pools-and-flavors.md "InstanceType status"), the
   InstanceTypeFlavor catalog (docs/concepts/pools-and-flavors.md "The catalog: InstanceTypeFlavor").

Sources: docs/concepts/pools-and-flavors.md "InstanceType admission".
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from functools import partial

from runtime.engine.pools import catalog as catalog_mod
from runtime.engine.pools import instancetypes as its
from runtime.engine.pools import queues
from runtime.engine.pools import reach
from runtime.engine.pools.flavors import FlavorPlan, plan_flavors, render_flavor
from runtime.engine.pools.instancetypes import devices_selector, matches
from runtime.engine.pools.closednodes import closed_nodes
from runtime.engine.pools.deviceset import read_devices
from runtime.engine.pools.incremental import DeriveMemo
from runtime.engine.pools.kept import as_kept
from runtime.engine.devices.factcheck import FactProblem
from runtime.engine.pools.nodes import effective_node_labels, node_views, trusted_node_features
from runtime.engine.policy import Policy
from runtime.engine.settings import Settings, settings_of
from runtime.engine.snapshot import Snapshot, is_deleting, labels_of, name_of



@dataclass
class DesiredState:
    """What the cluster should hold after one reconcile of a snapshot; lists in name order. The objects are
    shared with the snapshot where nothing changed: treat them as read-only."""

    settings: Settings  # the settings in force (the settings Secret read, defaults where unset)
    resource_flavors: list[dict] = field(default_factory=list)  # our ResourceFlavors, rendered
    flavor_deletes: list[str] = field(default_factory=list)  # our flavors left without contributors
    cluster_queues: list[dict] = field(default_factory=list)
    local_queues: list[dict] = field(default_factory=list)
    admission_checks: list[dict] = field(default_factory=list)
    # every InstanceType after the reconcile: the snapshot's (only ``status`` changed) and the created ones
    instance_types: list[dict] = field(default_factory=list)
    created_instance_types: list[str] = field(default_factory=list)  # derived ones authored now (create-only)
    # existing ones whose empty descriptors the defaulting fills now that a flavor matches: the only spec
    # update the controller makes
    enriched_instance_types: list[str] = field(default_factory=list)
    instance_type_flavors: list[dict] = field(default_factory=list)
    devices: list[dict] = field(default_factory=list)  # the snapshot's Devices, managed label from their Node
    # Nodes managed by their effective labels: the only ones given fit labels (docs/agent.md "Capacity and
    # fit labels")
    managed_nodes: list[str] = field(default_factory=list)
    # node -> the ResourceFlavors it contributes to (name order; none: absent), what pool Events compare
    node_flavors: dict[str, list[str]] = field(default_factory=dict)
    # input skipped or read as zero (unknown kinds, bad counts or ledgers, untrusted NodeFeatures, settings)
    warnings: list[str] = field(default_factory=list)
    # refused node facts as data for the audit, each also a warning (docs/node-facts-robustness.md "A
    # malformed fact costs only its node (decision 19)")
    fact_problems: list[FactProblem] = field(default_factory=list)
    # node -> accelerator key -> healthy accelerators of its Devices (nodes whose Devices count); a device
    # flavor's quota counts these, never more than its labels (runtime.engine.pools.reach.usable_quota)
    usable_accelerators: dict[str, dict[str, int]] = field(default_factory=dict)
    shortfalls: list[reach.Shortfall] = field(default_factory=list)  # nodes whose labels count more than that
    # device flavor -> (accelerators its labels count, accelerators its quota counts)
    flavor_accelerators: dict[str, tuple[int, int]] = field(default_factory=dict)
    # node -> why it takes no new Pod (docs/concepts/out-of-service.md "Cordoned and tainted nodes"): its
    # accelerators count as capacity and quota, never as remaining or once-max
    closed_nodes: dict[str, str] = field(default_factory=dict)

    def view(self, policy: Policy, kind: str, snapshot: Snapshot) -> list[dict]:
        """What ``kubectl get <kind>`` lists once this state is applied to ``snapshot``'s cluster:
        the objects accelpolicy keeps, with the labels and annotations others added to them
        (:func:`runtime.engine.pools.kept.as_kept`), plus same-kind objects it does not own (name order)."""
        ours = {
            "ResourceFlavor": self.resource_flavors, "ClusterQueue": self.cluster_queues,
            "LocalQueue": self.local_queues, "AdmissionCheck": self.admission_checks,
            "InstanceType": self.instance_types, "InstanceTypeFlavor": self.instance_type_flavors,
            "Devices": self.devices,
        }.get(kind)
        if ours is None:
            return snapshot.list(kind)
        if kind in ("InstanceType", "Devices"):
            return list(ours)
        ours = [as_kept(policy, kind, o, snapshot.get(kind, name_of(o), o["metadata"].get("namespace") or ""))
                for o in ours]  # labels others added stay (docs/node-facts-robustness.md)
        if kind == "InstanceTypeFlavor":
            return ours
        keep = {(o["metadata"].get("namespace", ""), name_of(o)) for o in ours}
        deleted = set(self.flavor_deletes) if kind == "ResourceFlavor" else set()
        foreign = [o for o in snapshot.list(kind)
                   if ((o["metadata"].get("namespace") or ""), name_of(o)) not in keep
                   and name_of(o) not in deleted
                   and not _owned(policy, o, kind)]
        merged = list(ours) + foreign
        return sorted(merged, key=lambda o: ((o["metadata"].get("namespace") or ""), name_of(o)))

    def objects(self) -> list[dict]:
        """Every object accelpolicy writes, for ``kubectl apply -f -`` (status included)."""
        created = set(self.created_instance_types) | set(self.enriched_instance_types)
        return (self.resource_flavors + self.admission_checks
                + [it for it in self.instance_types if name_of(it) in created]
                + self.cluster_queues + self.local_queues + self.instance_type_flavors)


def _owned(policy: Policy, obj: dict, kind: str) -> bool:
    """Queues of ours that this state no longer keeps (the queue of a deleted type, its LocalQueues)."""
    if kind == "ClusterQueue":
        return labels_of(obj).get(policy.key("resourceType")) == policy.derivation.resourceTypes["queue"]
    if kind == "LocalQueue":
        return policy.key("queueAnnotation") in ((obj.get("metadata") or {}).get("annotations") or {})
    return False


def derive(policy: Policy, snapshot: Snapshot, *, live: bool = False,
           settings_namespace: str | None = None, memo: DeriveMemo | None = None) -> DesiredState:
    """Compute the DesiredState of ``snapshot`` under ``policy`` (pure: no I/O, clock or env).

    ``live=False`` (snapshot mode, the CLI and the seed replays): a queue without a Kueue status
    reads as Kueue would soon report it, ``Active``. ``live=True`` (the controller): the phase shows
    what Kueue reports now, so a queue without an ``Active`` condition, or one this reconcile
    creates, reads ``Activating``.
    ``settings_namespace``: see :func:`runtime.engine.settings.settings_of`. ``memo``: a
    :class:`runtime.engine.pools.incremental.DeriveMemo` kept between calls (the controller's): the
    parts that depend on one node or one pool are reused while the objects they were computed from
    are the same; the result equals a derive without it.
    """
    if memo is not None:
        memo.begin(policy)
    settings = settings_of(policy, snapshot, settings_namespace)
    state = DesiredState(settings=settings, warnings=list(snapshot.warnings))
    for name in settings.invalid:
        state.warnings.append(f"setting {name}: stored value does not parse; using its default")
    aware = settings.flag(policy.setting("awareCpuManufacturer"))

    untrusted, effective, nodes = _nodes(policy, snapshot, settings_namespace, memo)
    state.warnings.extend(untrusted)
    state.managed_nodes = [node.name for node in nodes if node.managed]
    for node in nodes:
        if node.managed and (not node.os or not node.arch):
            state.warnings.append(
                f"Node {node.name}: no {policy.key('os')}/{policy.key('arch')} label; it contributes no "
                f"flavor")
        if node.managed:
            state.fact_problems.extend(node.problems)
    plans, rendered, node_flavors = _flavors(policy, snapshot, nodes,
                                             settings.flag(policy.setting("mixedOnNode")), memo)
    state.resource_flavors = list(rendered.values())
    state.node_flavors = {name: list(flavors) for name, flavors in node_flavors.items()}
    flavor_type = policy.derivation.resourceTypes["flavor"]
    state.flavor_deletes = [name_of(f) for f in snapshot.list("ResourceFlavor")
                            if labels_of(f).get(policy.key("resourceType")) == flavor_type
                            and name_of(f) not in rendered]

    types = _instance_types(policy, snapshot, state, plans, aware)
    _queues_and_status(policy, snapshot, state, types, plans, rendered, effective, aware, live, memo)
    state.admission_checks = [queues.admission_check(policy)]
    state.instance_type_flavors = catalog_mod.catalog(policy, plans, aware)
    return state


def _nodes(policy: Policy, snapshot: Snapshot, settings_namespace: str | None,
           memo: DeriveMemo | None) -> tuple[list[str], dict[str, dict[str, str]], list]:
    """(warnings for untrusted NodeFeatures (decision 20), node name -> effective labels, NodeViews in
    name order); with a memo, updated from the Nodes and NodeFeatures that changed since its last derive."""
    if memo is not None:
        return memo.node_set(policy, snapshot, settings_namespace)
    trusted, untrusted = trusted_node_features(policy, snapshot, settings_namespace)
    effective = effective_node_labels(policy, snapshot, settings_namespace, trusted)
    return untrusted, effective, node_views(policy, snapshot, effective)


def _flavors(policy: Policy, snapshot: Snapshot, nodes: list, mixed: bool,
             memo: DeriveMemo | None) -> tuple[dict[str, FlavorPlan], dict[str, dict], dict[str, list[str]]]:
    """(flavor name -> plan, flavor name -> rendered ResourceFlavor, node name -> its flavors in name
    order) of the managed ``nodes`` (docs/concepts/pools-and-flavors.md "ResourceFlavors: what each node
    contributes"); with a memo, reused while the nodes and ``mixed`` are the same and the Devices ``spec`` of
    each flavor's first contributor (its notes read it) equal."""
    def compute():
        reused = (memo.contributions, memo.notes) if memo is not None else (None, None)
        plans = plan_flavors(policy, snapshot, nodes, mixed, *reused)
        node_flavors: dict[str, list[str]] = {}
        for name, flavor in plans.items():  # name order, so each node's list is too
            for node_name in flavor.contributors:
                node_flavors.setdefault(node_name, []).append(name)
        firsts = tuple(sorted({plan.contributors[0] for plan in plans.values()}))
        return plans, {
            name: render_flavor(policy, plan) for name, plan in plans.items()}, node_flavors, firsts
    if memo is None:
        return compute()[:3]
    # the specs by value: every event parses a new one
    def key(firsts: tuple[str, ...]) -> tuple[tuple, tuple]:
        devices = [snapshot.get("Devices", name) for name in firsts]
        return (nodes,), (mixed, firsts, tuple((d is None, (d or {}).get("spec")) for d in devices))
    # the first contributors are the last result's while the nodes are the same (else it is a miss anyway)
    last = memo.state("flavorfirsts", dict)
    firsts = last.get("firsts", ()) if last.get("nodes") is nodes else ()
    result = memo.whole("flavorset", *key(firsts), compute, carry=("flavors", "notes"))
    if result[3] != firsts:  # computed afresh: kept under the key of its own first contributors
        memo.whole("flavorset", *key(result[3]), lambda: result, carry=("flavors", "notes"))
    last.update(nodes=nodes, firsts=result[3])
    return result[:3]


def _instance_types(policy: Policy, snapshot: Snapshot, state: DesiredState, plans: dict[str, FlavorPlan],
                    aware: bool) -> dict[str, dict]:
    """Every InstanceType by name: the snapshot's, the derived ones this pass creates (create-only,
    docs/concepts/pools-and-flavors.md "Pools: InstanceType + ClusterQueue of one name") and the enriched
    ones; records the created and enriched names in ``state``."""
    existing = {name_of(it): it for it in snapshot.list("InstanceType")}
    types = dict(existing)
    if state.settings.flag(policy.setting("derivedFromNode")):
        first_plan: dict[str, FlavorPlan] = {}
        for name, plan in plans.items():  # name order: the first flavor of a pool gives its preset
            variables = {"namePrefix": policy.derivation.namePrefix, "gKey": plan.gkey, "aKey": plan.akey,
                         "os": plan.os, "arch": plan.arch, "aware": aware}
            pool = (
                policy.derivation.pools.device if plan.kind == "device"
                else policy.derivation.pools.cpu).evaluate(variables)
            first_plan.setdefault(pool, plan)
        for pool, plan in first_plan.items():
            if pool in types:
                continue
            created = its.derived_type(policy, pool, plan, aware)
            types[pool] = its.default_instance_type(policy, created, aware, state.resource_flavors)
            state.created_instance_types.append(pool)

    # Types whose descriptors are still empty get the defaulting again once a flavor matches
    for name, it in existing.items():
        if its.needs_enrichment(it):
            defaulted = its.default_instance_type(policy, it, aware, state.resource_flavors)
            if not its.needs_enrichment(defaulted):
                types[name] = defaulted
                state.enriched_instance_types.append(name)
    return types


def _queues_and_status(policy: Policy, snapshot: Snapshot, state: DesiredState, types: dict[str, dict],
                       plans: dict[str, FlavorPlan], rendered: dict[str, dict], effective, aware: bool,
                       live: bool, memo: DeriveMemo | None = None) -> None:
    """Per InstanceType in name order: its ClusterQueue and LocalQueues (unless it is being deleted)
    and its status; fills ``state``."""
    settings = state.settings
    namespaces = [name_of(ns) for ns in snapshot.list("Namespace")
                  if not is_deleting(ns) and name_of(ns) not in policy.controller.reservedNamespaces
                  and (ns.get("status") or {}).get("phase") != "Terminating"]
    every, refused, devices, by_label = read_devices(policy, snapshot, effective, state.fact_problems, memo)
    state.devices = list(every)
    state.fact_problems.extend(refused)  # decision 19: their Devices count in no view
    state.warnings.extend(p.message for p in state.fact_problems)
    state.usable_accelerators = _usable(devices, memo)
    device_plans = [(p.name, p.akey, p.count, p.contributors) for p in plans.values() if p.kind == "device"]
    state.shortfalls = reach.shortfalls(snapshot, device_plans, state.usable_accelerators)
    quotas = {name: reach.usable_quota(count, akey, nodes, state.usable_accelerators)
              for name, akey, count, nodes in device_plans}
    state.flavor_accelerators = {
        name: (count * len(nodes), quotas[name]) for name, _, count, nodes in device_plans}
    pod_cpu = its.running_instance_pod_cpu(policy, snapshot.list("Pod"))
    state.closed_nodes = closed_nodes(policy, snapshot)
    for name in sorted(types):
        it = copy.deepcopy(types[name])
        labels = queues.queue_labels(policy, it, aware)
        flavors = queues.queue_flavors(policy, labels, plans, rendered)
        old_queue = snapshot.get("ClusterQueue", name)
        queue = None
        phase_message = ""
        if not is_deleting(it):
            queue, phase_message = queues.cluster_queue(policy, settings, it, labels, flavors, old_queue,
                                                        quotas)
            state.cluster_queues.append(queue)
            state.local_queues.extend(queues.local_queues(policy, queue, namespaces))
        queue_state = _queue_state(queue, old_queue, phase_message, live)
        queue_state["instancePodCpuMillis"] = pod_cpu.get(its.entrance(policy, name), [])
        selector = devices_selector(policy, labels)
        if memo is None:
            pool_devices = _select(selector, devices, by_label)
        else:
            pool_devices = memo.keep("select", name,
                                     (None if selector is None else tuple(sorted(selector.items())),
                                      id(devices)), devices, partial(_select, selector, devices, by_label))
        closed = {n: state.closed_nodes[n] for n in map(name_of, pool_devices) if n in state.closed_nodes}
        if memo is None:
            it["status"] = its.instance_type_status(policy, settings, it, queue, flavors, pool_devices,
                                                    queue_state, closed)
        else:
            it["status"] = memo.status(it, queue, flavors, pool_devices, queue_state, settings.values,
                                       partial(its.instance_type_status, policy, settings, it, queue,
                                               flavors, pool_devices, queue_state, closed), closed)
        state.instance_types.append(it)


def _usable(devices: list[dict], memo: DeriveMemo | None) -> dict[str, dict[str, int]]:
    """node -> aKey -> healthy accelerators, for the Devices that count in the views (``devices``: the
    sound ones); with a memo, each kept while its ``spec`` is the same object."""
    out = {}
    for obj in devices:
        spec = obj.get("spec")
        compute = partial(reach.usable_accelerators, obj)
        counts = compute() if memo is None else memo.keep("usable", name_of(obj), id(spec), spec, compute)
        out[name_of(obj)] = {akey: counts[0] for akey, counts in counts.items()}
    return out


def _select(selector: dict[str, str] | None, objects: list[dict],
            index: dict[tuple[str, str], list[int]]) -> list[dict]:
    """The objects matching ``selector`` in their order, as ``[o for o in objects if matches(...)]``
    but scanning only the candidates of the selector's rarest label (pools x Devices was the
    largest cost of derive with CPU awareness on: 41 pools x 3,500 Devices)."""
    if selector is None:
        return []
    if not selector:
        return list(objects)
    candidates = min((index.get(item, []) for item in selector.items()), key=len)
    return [objects[i] for i in candidates if matches(selector, labels_of(objects[i]))]


def _queue_state(queue: dict | None, old: dict | None, phase_message: str, live: bool = False) -> dict:
    """Facts for the phase table: the desired stop policy, reservations and Active condition.

    A queue the snapshot already holds reports its own ``Active`` condition and reservations. A
    queue without that condition (or created by this reconcile) is read, in snapshot mode, as Kueue
    would report it: Active, since every flavor it references exists and the AdmissionCheck is kept
    Active by the controller; in live mode as it is now: ``Missing`` (not created yet) or
    ``Unknown`` (no condition), both ``Activating``.
    """
    if queue is None:
        stop = ((old or {}).get("spec") or {}).get("stopPolicy", "HoldAndDrain") if old else "None"
        return {"stopPolicy": stop, "active": "Missing", "reserved": _reserved(old), "message": "",
                "reservedCpuMillis": its.reserved_cpu_millis(old), "phaseMessage": phase_message}
    active, message = "True", ""
    if live:
        active = "Missing" if old is None else "Unknown"
    for cond in ((old or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Active":
            active, message = str(cond.get("status", "Unknown")), cond.get("message", "")
    return {"stopPolicy": queue["spec"].get("stopPolicy", "None"), "active": active, "message": message,
            "reserved": _reserved(old), "reservedCpuMillis": its.reserved_cpu_millis(old),
            "phaseMessage": phase_message}


_reserved = queues.holds_reservations
