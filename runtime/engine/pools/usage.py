"""What each accelerator is charged for now, in physical accelerators (docs/tasks/report-usage.md "What is
charged"). Pure: the controller's usage counters (:mod:`runtime.controller.usage`) add these rates times
the seconds between two looks.

For every node with a Devices object, the ledger rule (:func:`runtime.engine.devices.ledger.replay_ledger`,
the one the node agent writes ``status`` with) runs over the node's Pods, so each charge the ledger holds
is known with its Pod. A charge of ``allocated`` credits is ``allocated / creditsPerAccelerator``
accelerators (rules/constants.yaml): a whole accelerator 1, a share ``share / D`` (0.1), a 25 % slice
0.25, a MIG partition its profile's units (``3g.40gb`` on an H100: 800,000 credits, 0.5). An accelerator
whose charges add up past D (over-committed slices) charges its holders in proportion, never more than
one accelerator. What no charge holds is idle; an accelerator out of service (unhealthy) is idle in state
``outOfService`` and holds nothing. So, per pool, flavor, product and view: Σ charged + idle = capacity
of state ``usable``, at every look.

The view of a charge is its ledger mode's name (rules/agent.yaml ``ledger.modes``: exclusive, shared,
sliced, partitioned); an accelerator's capacity and idle rate carry the view it is held in, ``partitioned``
for a free partitioned one, else the free mode's name (``none``).

Where an accelerator accounts: the node's device ResourceFlavor of its accelerator group
(``DesiredState.node_flavors``) and that flavor's **accounting pool**, the first in name order of the
ClusterQueues (pools) naming the flavor; ``""`` for either when there is none (an unmanaged node). The
ClusterQueue that admitted a charge is the Pod's LocalQueue's (its ``queueName`` label,
rules/labels.yaml), ``""`` without one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from runtime.engine.devices.devicesobject import in_service, is_partitioned
from runtime.engine.devices.factcheck import ledger_sound
from runtime.engine.devices.ledger import Charge, LedgerReplay, replay_ledger
from runtime.engine.devices.nodefacts import agent_rules
from runtime.engine.pools.accelerators import walk_devices
from runtime.engine.policy import Policy
from runtime.engine.snapshot import labels_of, name_of
from runtime.model.normalize import QuantityError, parse_quantity

# Label names of each rate (and of the counters built from them), in order; ``node`` is appended
# to the first three when the counters carry it.
CHARGED_LABELS = ("namespace", "pool", "resourceflavor", "product", "view", "clusterqueue")
CAPACITY_LABELS = ("pool", "resourceflavor", "product", "view", "state")
RESERVED_LABELS = ("clusterqueue", "namespace")
USABLE, OUT_OF_SERVICE = "usable", "outOfService"   # the ``state`` of capacity and idle
WHICH = ("charged", "idle", "capacity", "reserved")   # the tables of UsageRates
# The counter family of each rate (runtime.controller.usage exports them, runtime.report.usage reads them).
FAMILIES = {"charged": "accelpolicy_accelerator_charged_seconds",
            "idle": "accelpolicy_accelerator_idle_seconds",
            "capacity": "accelpolicy_accelerator_capacity_seconds",
            "reserved": "accelpolicy_clusterqueue_reserved_seconds"}


@dataclass
class UsageRates:
    """Physical accelerators in each state now, by label values (in the order of the ``*_LABELS``).

    ``charged``: held by Pods; ``idle``: not held (usable or out of service); ``capacity``: installed
    (usable + out of service); ``reserved``: quota that admitted Kueue Workloads hold, in accelerators
    (their ``credits.gpustack.ai/*`` resource usage / D), by ClusterQueue and namespace.
    """

    charged: dict[tuple[str, ...], float] = field(default_factory=dict)
    idle: dict[tuple[str, ...], float] = field(default_factory=dict)
    capacity: dict[tuple[str, ...], float] = field(default_factory=dict)
    reserved: dict[tuple[str, ...], float] = field(default_factory=dict)

    def add(self, which: str, labels: tuple[str, ...], accelerators: float) -> None:
        table = getattr(self, which)
        table[labels] = table.get(labels, 0.0) + accelerators

    def copy(self) -> "UsageRates":
        return UsageRates(*(dict(getattr(self, which)) for which in WHICH))


@dataclass(frozen=True)
class Placement:
    """Where one node's accelerator group accounts: its device flavor, accounting pool and product."""

    pool: str
    flavor: str
    product: str


class RateTotals:
    """Rates kept as the sum of parts, each part owned by one object (a node's Devices, a Workload):
    :meth:`replace` swaps one owner's part and sums again only the labels it touches, each as
    ``math.fsum`` of its owners' values (the same total in any order). :attr:`rates` are the totals."""

    def __init__(self):
        self.parts: dict[tuple, UsageRates] = {}
        self.owners: dict[str, dict[tuple, dict[tuple, float]]] = {w: {} for w in WHICH}
        self.rates = UsageRates()

    def replace(self, owner: tuple, part: UsageRates | None) -> set[tuple[str, tuple]]:
        """``owner``'s part is ``part`` from now on (None: it has none); returns the ``(table, labels)``
        whose total it may have changed (a label no owner holds any more leaves :attr:`rates`)."""
        touched = set()
        for which_part, keep in ((self.parts.pop(owner, None), False), (part, True)):
            if which_part is None:
                continue
            for which in WHICH:
                owners = self.owners[which]
                for labels, value in getattr(which_part, which).items():
                    if keep:
                        owners.setdefault(labels, {})[owner] = value
                    else:
                        owners[labels].pop(owner, None)
                    touched.add((which, labels))
        if part is not None:
            self.parts[owner] = part
        for which, labels in touched:
            values, table = self.owners[which].get(labels), getattr(self.rates, which)
            if values:
                table[labels] = math.fsum(values.values())
            else:
                self.owners[which].pop(labels, None)
                table.pop(labels, None)
        return touched


def local_queues(objects: Iterable[dict]) -> dict[tuple[str, str], str]:
    """(namespace, LocalQueue) -> its ClusterQueue."""
    return {(obj["metadata"].get("namespace", ""), name_of(obj)): str((obj.get("spec") or {}).get(
        "clusterQueue", "")) for obj in objects}


class Placements:
    """``of(node)(akey)``: the :class:`Placement` of a node's accelerator group (module docstring);
    ``node_of(name)``: the Node object (its product labels)."""

    def __init__(self, policy, node_of, node_flavors, resource_flavors, cluster_queues):
        self.policy, self.node_of, self.node_flavors = policy, node_of, node_flavors
        self.labels = {name_of(f): labels_of(f) for f in resource_flavors}
        self.pools: dict[str, str] = {}
        for queue in sorted(cluster_queues, key=name_of, reverse=True):   # the first in name order wins
            for group in (queue.get("spec") or {}).get("resourceGroups") or []:
                for flavor in group.get("flavors") or []:
                    self.pools[flavor.get("name", "")] = name_of(queue)

    def of(self, node: str):
        acc = self.policy.prefix("acceleratable")
        node_obj = self.node_of(node)
        node_labels = labels_of(node_obj) if node_obj is not None else {}
        flavors = self.node_flavors.get(node) or []

        def place(akey: str) -> Placement:
            flavor = next((f for f in flavors if self.labels.get(f, {}).get(f"{acc}{akey}") == "true"), "")
            product = node_labels.get(f"{acc}{akey}{self.policy.suffix('product')}", "")
            return Placement(self.pools.get(flavor, ""), flavor, product)
        return place


def node_part(policy: Policy, devices: dict, pods: list[dict], place, queues: Mapping[tuple[str, str], str],
              tail: tuple[str, ...] = ()) -> UsageRates:
    """One node's rates (:func:`node_rates`) on their own; a Devices object too malformed to walk has
    none."""
    part = UsageRates()
    try:
        node_rates(policy, part, devices, pods, place, queues, tail)
    except (KeyError, TypeError, ValueError, AttributeError):
        return UsageRates()
    return part


def node_rates(policy: Policy, rates: UsageRates, devices: dict, pods: list[dict], place,
               queues: Mapping[tuple[str, str], str], tail: tuple[str, ...] = ()) -> None:
    """Add one node's rates: its charges by Pod and the idle and capacity of each accelerator
    (module docstring). ``place(akey)`` is the group's :class:`Placement`; ``queues``: (namespace,
    LocalQueue) -> ClusterQueue. A Devices object the ledger cannot read (decision 19, or a spec the
    rule cannot walk) is all out of service."""
    spec = devices.get("spec") or {}
    replay = None
    if ledger_sound(policy, devices):
        try:
            replay = replay_ledger(policy, name_of(devices), spec, pods)
        except (KeyError, TypeError, ValueError, AttributeError):
            replay = None
    d = policy.constants.creditsPerAccelerator
    names = {number: name for name, number in agent_rules(policy).ledger.modes.model_dump().items()}
    modes = agent_rules(policy).ledger.modes
    for group, accel in walk_devices(devices):
        where = place(f"{group.get('manufacturer')}-{group.get('id')}")
        base = (where.pool, where.flavor, where.product)
        key = (group.get("manufacturer"), group.get("id"), accel.get("id"))
        slot = replay.slots.get(key) if replay is not None else None
        if slot is None or not _in_service(accel):
            view = names[modes.partitioned] if _partitioned(accel) else names[modes.none]
            for which in ("capacity", "idle"):
                rates.add(which, (*base, view, OUT_OF_SERVICE, *tail), 1.0)
            continue
        view = names[slot.mode] if slot.mode != modes.none else (
            names[modes.partitioned] if is_partitioned(accel) else names[modes.none])
        held = min(slot.allocated, d)
        rates.add("capacity", (*base, view, USABLE, *tail), 1.0)
        rates.add("idle", (*base, view, USABLE, *tail), (d - held) / d)
        scale = held / slot.allocated if slot.allocated else 0.0
        for meta, charge in _held_on(replay, key):
            ns = meta.get("namespace", "")
            queue = queues.get((ns, (meta.get("labels") or {}).get(policy.key("queueName"), "")), "")
            rates.add("charged", (ns, *base, names[charge.mode], queue, *tail), charge.allocated * scale / d)


def _in_service(accel: Mapping[str, Any]) -> bool:
    """Usable: healthy and not in maintenance (docs/concepts/out-of-service.md); an unreadable record is
    not."""
    try:
        return in_service(accel)
    except (KeyError, TypeError):
        return False


def _partitioned(accel: Mapping[str, Any]) -> bool:
    try:
        return is_partitioned(accel)
    except (KeyError, TypeError):
        return False


def _held_on(replay: LedgerReplay, key: tuple[str, str, str]) -> Iterable[tuple[Mapping[str, Any], Charge]]:
    return ((meta, charge) for meta, charge in replay.held
            if (charge.manufacturer, charge.group, charge.accelerator) == key)


def workload_part(policy: Policy, wl: dict) -> UsageRates:
    """The quota one admitted Kueue Workload holds: Σ of its ``status.admission.podSetAssignments[]
    .resourceUsage`` under the credits prefix (rules/labels.yaml) / D, by its ClusterQueue and namespace,
    while its ``QuotaReserved`` condition is True and its ``Finished`` condition is not."""
    part = UsageRates()
    status = wl.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []
                  if isinstance(c, dict)}
    admission = status.get("admission") or {}
    if conditions.get("QuotaReserved") != "True" or conditions.get("Finished") == "True" \
            or not admission.get("clusterQueue"):
        return part
    prefix, credits = policy.prefix("credits"), 0
    for assignment in admission.get("podSetAssignments") or []:
        for resource, quantity in (assignment.get("resourceUsage") or {}).items():
            if resource.startswith(prefix):
                try:
                    credits += parse_quantity(quantity)
                except QuantityError:
                    continue
    if credits:
        part.add("reserved", (str(admission["clusterQueue"]), wl["metadata"].get("namespace", "")),
                 float(credits) / policy.constants.creditsPerAccelerator)
    return part
