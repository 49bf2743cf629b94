"""The start guard (docs/availability.md "The start guard"): no destructive step on a view not yet seen whole.

A controller that starts, restarts or takes over the lead may find the cluster's facts incomplete: after
an uninstall and a namespace delete the agents' NodeFeatures are gone until the agents re-create them,
and a pass run before then derives every node unmanaged, deletes the flavors, stops the accelerator
queues (Kueue evicts what runs there) and stops the Instances for good. The guard holds those steps
until the view is **whole**, as ``startGuard`` of rules/controller.yaml defines it:

* every watch cache listed once, and
* every Node (not being deleted) has the trusted NodeFeature (decision 20: in the system namespace,
  named ``<node><suffix>``) of each role in ``nodeFeatures`` for which ``expectFacts`` holds (by default:
  the worker NodeFeature of a Node the agent has described before, its CPU annotation outliving an
  uninstall; the deviceManager NodeFeature of such a Node whose Devices object lists accelerators),

or until ``graceSeconds`` after the controller began leading, whichever comes first. Once open, the
guard stays open for the process (a later loss of facts is the pools' business, as when the
controller runs).

Held (:func:`destructive`): a delete of anything but an Instance's Pod (ResourceFlavor, ClusterQueue,
LocalQueue, InstanceTypeFlavor, Setting); a flavor recreate; a write that stops a live ClusterQueue
(``stopPolicy`` Hold or HoldAndDrain) or takes a flavor or quota from it; an Instance's ``spec.stop``.
Creates, status writes, fit labels and Instance Pods are written at once.

Typical use (the reconciler)::

    guard = StartGuard(policy)
    guard.begin()                                   # when leading starts
    run, held = guard.hold(actions, snapshot, cache.never_synced())
"""
from __future__ import annotations

import time
from decimal import Decimal
from typing import Callable

from loguru import logger

from runtime.engine.devices.nodefacts import agent_rules
from runtime.engine.plan import Action, Verb
from runtime.engine.policy import Policy
from runtime.engine.pools.nodes import node_feature_judge
from runtime.engine.snapshot import Snapshot, annotations_of, is_deleting, labels_of, name_of
from runtime.model.normalize import parse_quantity

STOPPED = ("Hold", "HoldAndDrain")


def _quotas(spec: dict | None) -> dict[tuple[str, str], Decimal]:
    """(flavor, resource) -> nominalQuota of a ClusterQueue spec's resourceGroups."""
    out = {}
    for group in (spec or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for resource in flavor.get("resources") or []:
                try:
                    out[(flavor.get("name"), resource.get("name"))] = parse_quantity(
                        resource.get("nominalQuota", 0))
                except (ValueError, ArithmeticError):
                    out[(flavor.get("name"), resource.get("name"))] = Decimal(0)
    return out


def stops_or_shrinks(desired: dict | None, live: dict | None) -> bool:
    """Whether writing ``desired`` (a ClusterQueue ``spec``, or the part a merge patch sends) over the
    ``live`` queue stops it (``stopPolicy`` Hold/HoldAndDrain where it was not) or takes a flavor or
    quota from it. False when there is no live queue (a create)."""
    if live is None or desired is None:
        return False
    live_spec = live.get("spec") or {}
    stop = desired.get("stopPolicy")
    if stop in STOPPED and live_spec.get("stopPolicy", "None") != stop:
        return True
    if "resourceGroups" not in desired:
        return False
    want = _quotas(desired)
    return any(key not in want or want[key] < quota for key, quota in _quotas(live_spec).items())


def destructive(action: Action, snapshot: Snapshot) -> bool:
    """Whether the start guard holds ``action`` (see the module docstring); ``snapshot``: the pass's."""
    if action.verb == Verb.DELETE:
        return action.kind != "Pod"
    if action.verb == Verb.RECREATE:
        return True
    if action.kind == "Instance" and action.verb == Verb.PATCH:
        return bool(((action.body or {}).get("spec") or {}).get("stop"))
    if action.kind == "ClusterQueue" and action.verb in (Verb.APPLY, Verb.PATCH):
        return stops_or_shrinks((action.body or {}).get("spec"), snapshot.get("ClusterQueue", action.name))
    return False


class StartGuard:
    """Holds destructive steps until the view is whole (see the module docstring).

    ``namespace``: where the agents' NodeFeatures live (the settings namespace; None: ``systemNamespace``);
    ``clock``: monotonic seconds (tests pass their own). ``since``: when :meth:`begin` ran (None
    before); ``opened``: why the guard opened (None while it holds or before it was asked);
    ``missing``: the Nodes without their facts at the last look; ``held``: the actions held at the last
    look.
    """

    def __init__(self, policy: Policy, namespace: str | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.policy = policy
        self.namespace = namespace
        self.clock = clock
        self.since: float | None = None
        self.opened: str | None = None
        self.missing: list[str] = []
        self.held: list[Action] = []
        self._logged: tuple | None = None

    @property
    def grace_seconds(self) -> float:
        return self.policy.controller.startGuard.graceSeconds

    def begin(self) -> None:
        """The controller began leading: the grace period runs from now (once; later calls do nothing)."""
        if self.since is None:
            self.since = self.clock()

    def remaining(self) -> float:
        """Seconds of the grace period left (the full period before :meth:`begin`)."""
        if self.since is None:
            return self.grace_seconds
        return max(0.0, self.since + self.grace_seconds - self.clock())

    def nodes_without_facts(self, snapshot: Snapshot) -> list[str]:
        """The Nodes (not being deleted) lacking a trusted NodeFeature of a role in ``nodeFeatures`` for
        which ``expectFacts`` holds (variables: the Node's ``labels``, ``annotations``, its Devices'
        ``devices`` spec, the ``role``, ``keys``), in name order."""
        rules = self.policy.controller.startGuard
        nf_rules = agent_rules(self.policy).nodeFeature
        devices_kind = agent_rules(self.policy).devices.kind
        suffixes = {role: getattr(nf_rules, role).nameSuffix for role in rules.nodeFeatures}
        judge = node_feature_judge(self.policy, self.namespace)
        present: dict[str, set[str]] = {}
        for nf in snapshot.list("NodeFeature"):
            node, trusted, _ = judge(nf)
            if trusted:
                present.setdefault(node, set()).add(name_of(nf)[len(node):])
        missing = []
        keys = dict(self.policy.labels.keys)
        for node in snapshot.list("Node"):
            name = name_of(node)
            lacking = [role for role, suffix in suffixes.items() if suffix not in present.get(name, set())]
            if is_deleting(node) or not lacking:
                continue
            devices = (snapshot.get(devices_kind, name) or {}).get("spec") or {}
            facts = {"labels": labels_of(node), "annotations": annotations_of(node), "devices": devices,
                     "keys": keys}
            if any(rules.expectFacts.evaluate({**facts, "role": role}) for role in lacking):
                missing.append(name)
        return sorted(missing)

    def whole(self, snapshot: Snapshot, never_synced: list[str]) -> str | None:
        """Why the view counts as whole now (the guard then opens for good), or None while it does not."""
        if self.opened is not None:
            return self.opened
        self.begin()
        self.missing = self.nodes_without_facts(snapshot) if not never_synced else []
        if not never_synced and not self.missing:
            return "every cache listed and every Node's facts present"
        if self.remaining() <= 0:
            what = f"caches never listed: {', '.join(never_synced)}" if never_synced else \
                f"Nodes still without their facts: {_names(self.missing)}"
            return f"grace period of {self.grace_seconds:g}s over ({what})"
        return None

    def hold(self, actions: list[Action], snapshot: Snapshot, never_synced: list[str]
             ) -> tuple[list[Action], list[Action]]:
        """``(actions to run, actions held)``; nothing is held once the view was whole. Logs when the
        guard holds something new and when it opens."""
        if self.opened is None:
            why = self.whole(snapshot, never_synced)
            if why is not None:
                self.opened = why
                waited = self.clock() - self.since if self.since is not None else 0.0
                logger.info("start guard open after {:.1f}s: {}", waited, why)
        if self.opened is not None:
            self.held = []
            return actions, []
        run = [a for a in actions if not destructive(a, snapshot)]
        self.held = [a for a in actions if destructive(a, snapshot)]
        key = (tuple((a.verb, a.kind, a.namespace, a.name) for a in self.held), tuple(self.missing),
               tuple(never_synced))
        if self.held and key != self._logged:
            self._logged = key
            why = f"caches never listed: {', '.join(never_synced)}" if never_synced else \
                f"{len(self.missing)} Node(s) without their facts: {_names(self.missing)}"
            logger.warning("start guard: holding {} destructive step(s) ({}) until the view is whole ({}); "
                           "at most {:.0f}s more", len(self.held),
                           _names([f"{a.verb} {a.kind} {a.name}" for a in self.held]), why, self.remaining())
        return run, self.held

    def due(self) -> float | None:
        """The monotonic time the guard opens by itself (the grace period's end) while it holds steps;
        None otherwise (the pass to run then)."""
        if self.opened is not None or not self.held or self.since is None:
            return None
        return self.since + self.grace_seconds


def _names(items: list[str], limit: int = 5) -> str:
    return ", ".join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")
