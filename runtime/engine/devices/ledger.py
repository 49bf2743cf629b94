"""The Devices ledger: allocation-annotation parsing and the rebuild rule (docs/agent.md "The Devices object
and its ledger").

:func:`rebuild_ledger` takes the Devices ``spec`` and the node's Pods (JSON dicts) and returns the
``status`` plus the Warning Events to record: ``InvalidAllocation`` on a Pod whose annotation is ignored,
``AllocationConflict`` on the Devices object for a skipped charge. Credits: D from rules/constants.yaml;
modes, phases, event reasons and messages from rules/agent.yaml.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from runtime.engine.devices.devicesobject import in_service, is_healthy, is_partitioned, out_of_service
from runtime.engine.devices.nodefacts import agent_rules
from runtime.engine.policy import Policy


@dataclass(frozen=True)
class LedgerEvent:
    """An Event to record (``type``: Warning unless said): on ``kind`` (``Pod``, ``Devices`` or ``Node``)
    ``namespace``/``name``."""

    kind: str
    namespace: str
    name: str
    reason: str
    message: str
    type: str = "Warning"


@dataclass
class Charge:
    """One validated accelerator entry of an allocation annotation."""

    container: str
    group: str
    manufacturer: str
    accelerator: str
    mode: int
    allocated: int
    profile: str = ""
    placements: tuple[tuple[int, int], ...] = ()


class AllocationError(ValueError):
    """An allocation annotation that must be ignored; the message is the Event message."""


@dataclass
class _Slot:
    """Ledger state of one healthy accelerator while rebuilding."""

    spec: Mapping[str, Any]
    mode: int = 0
    allocated: int = 0
    slices: int = 0
    held: dict[str, int] = field(default_factory=dict)
    used: set[int] = field(default_factory=set)

    @property
    def profiles(self) -> dict[str, Mapping[str, Any]]:
        return {p["name"]: p for p in self.spec["status"]["physicalSliced"].get("profiles", [])}


def _index_spec(spec: Mapping[str, Any]) -> dict[tuple[str, str], dict[str, Mapping[str, Any]]]:
    return {
        (g["manufacturer"], g["id"]): {a["id"]: a for a in g["accelerators"]} for g in spec.get("groups", [])}


def parse_allocation(policy: Policy, text: str, spec: Mapping[str, Any], node: str) -> list[Charge]:
    """Parse and validate one Pod's allocation annotation against the node's Devices spec.

    Containers are read in name order, each group checked against the spec (:func:`_index_spec`),
    each accelerator entry validated by :func:`_parse_entry`. Raises :class:`AllocationError`
    (message from rules/agent.yaml) when the annotation does not parse, names an unknown group or
    accelerator, or breaks the charge table.
    """
    msg = agent_rules(policy).ledger.messages
    key = policy.key("allocation")
    try:
        doc = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise AllocationError(msg.notJson.format(key=key, error=exc)) from None
    if not isinstance(doc, dict):
        raise AllocationError(msg.notJson.format(key=key, error="not an object"))
    index = _index_spec(spec)
    charges: list[Charge] = []
    for container in sorted(doc):
        def bad(error: str) -> AllocationError:
            return AllocationError(msg.badEntry.format(key=key, container=container, error=error))
        groups = doc[container]
        if not isinstance(groups, list):
            raise bad("allocation groups must be a list")
        for g in groups:
            if not isinstance(g, dict) or not isinstance(g.get("accelerators"), list):
                raise bad("an allocation group must be an object with id, manufacturer and accelerators[]")
            gid, manu = str(g.get("id", "")), str(g.get("manufacturer", ""))
            accs = index.get((manu, gid))
            if accs is None:
                raise AllocationError(msg.unknownGroup.format(key=key, container=container, manufacturer=manu,
                                                              group=gid, node=node))
            for a in g["accelerators"]:
                if not isinstance(a, dict):
                    raise bad("an accelerator entry must be an object")
                charges.append(_parse_entry(policy, a, container, gid, manu, accs, bad))
    return charges


def _parse_entry(policy: Policy, a: Mapping[str, Any], container: str, gid: str, manu: str,
                 accs: Mapping[str, Any], bad) -> Charge:
    """One accelerator entry of group ``gid`` (the charge table): a known accelerator, a mode the table
    knows, the implied charge of exclusive and shared, a charge in 1..D for sliced and partitioned, and a
    partition's profile and placements. Raises :class:`AllocationError`; ``bad(error)`` builds the
    generic ``badEntry`` one."""
    rules = agent_rules(policy)
    msg, modes = rules.ledger.messages, rules.ledger.modes
    credits = policy.constants.creditsPerAccelerator
    implied = {modes.exclusive: credits, modes.shared: policy.constants.share}
    aid = str(a.get("id", ""))
    fmt = dict(key=policy.key("allocation"), container=container, accelerator=aid)
    if aid not in accs:
        raise AllocationError(msg.unknownAccelerator.format(manufacturer=manu, group=gid, **fmt))
    mode, allocated = a.get("mode"), a.get("allocated")
    if isinstance(mode, bool) or mode not in (modes.exclusive, modes.shared, modes.sliced, modes.partitioned):
        raise AllocationError(msg.badMode.format(mode=mode, **fmt))
    if mode in implied:
        if allocated is not None and (isinstance(allocated, bool) or allocated != implied[mode]):
            raise AllocationError(msg.impliedCharge.format(mode=mode, expected=implied[mode],
                                                           allocated=allocated, **fmt))
        allocated = implied[mode]
    elif isinstance(allocated, bool) or not isinstance(allocated, int) or not 1 <= allocated <= credits:
        raise AllocationError(msg.chargeRange.format(mode=mode, credits=credits, allocated=allocated, **fmt))
    profile, placements = "", ()
    if mode == modes.partitioned:
        profile = a.get("allocatedPhysicalProfile")
        if not isinstance(profile, str) or not profile:
            raise AllocationError(msg.missingProfile.format(**fmt))
        try:
            placements = tuple((int(p["start"]), int(p["length"]))
                               for p in a.get("allocatedPhysicalPlacements") or [])
        except (TypeError, KeyError, ValueError):
            raise bad("allocatedPhysicalPlacements must be a list of {start, length}") from None
    return Charge(container, gid, manu, aid, mode, allocated, profile, placements)


def _span(start: int, length: int) -> set[int]:
    return set(range(start, start + length))


def _free_placement(slot: _Slot, profile: str) -> tuple[int, int] | None:
    """The lowest legal placement of ``profile`` lying entirely in free memory slices."""
    for p in sorted(slot.profiles[profile]["placements"], key=lambda p: p["start"]):
        if not _span(p["start"], p["length"]) & slot.used:
            return (p["start"], p["length"])
    return None


def remaining_profiles(profiles: Mapping[str, Mapping[str, Any]], used: set[int]) -> list[dict[str, Any]]:
    """Per profile, the most pairwise non-overlapping legal placements in free slices (greedy by
    ascending start), sorted by name, zero counts included."""
    out = []
    for name in sorted(profiles):
        taken = set(used)
        count = 0
        for p in sorted(profiles[name]["placements"], key=lambda p: p["start"]):
            span = _span(p["start"], p["length"])
            if not span & taken:
                taken |= span
                count += 1
        out.append({"name": name, "count": count})
    return out


def _conflict(slot: _Slot, charge: Charge, policy: Policy) -> tuple[str, dict[str, Any]] | None:
    """Why ``charge`` cannot land on ``slot`` (message key + fields), or None."""
    rules = agent_rules(policy)
    modes = rules.ledger.modes
    if not is_healthy(slot.spec):
        return "unhealthyConflict", {}
    if slot.mode not in (modes.none, charge.mode):
        return "modeConflict", {"held": slot.mode}
    partitioned = is_partitioned(slot.spec)
    if partitioned != (charge.mode == modes.partitioned):
        words = rules.ledger.capabilityWords
        return "capabilityConflict", {"capability": words["partitioned" if partitioned else "unpartitioned"]}
    if charge.mode == modes.partitioned:
        if charge.profile not in slot.profiles:
            return "profileConflict", {"profile": charge.profile}
        legal = {(p["start"], p["length"]) for p in slot.profiles[charge.profile]["placements"]}
        for start, length in charge.placements:
            if (start, length) not in legal or _span(start, length) & slot.used:
                return "profileConflict", {"profile": charge.profile}
        if not charge.placements and _free_placement(slot, charge.profile) is None:
            return "profileConflict", {"profile": charge.profile}
    return None


def _apply(slot: _Slot, charge: Charge, policy: Policy) -> None:
    modes = agent_rules(policy).ledger.modes
    slot.mode = charge.mode
    slot.allocated += charge.allocated
    if charge.mode == modes.sliced:
        slot.slices += 1
    if charge.mode == modes.partitioned:
        slot.held[charge.profile] = slot.held.get(charge.profile, 0) + 1
        placements = charge.placements or (_free_placement(slot, charge.profile),)
        for start, length in placements:
            slot.used |= _span(start, length)


def _pod_order(pod: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = pod.get("metadata") or {}
    return (str(meta.get("creationTimestamp") or ""), meta.get("namespace", ""), meta.get("name", ""))


@dataclass
class LedgerReplay:
    """The ledger rule run over one node's Pods (:func:`replay_ledger`): ``slots`` per
    ``(manufacturer, group id, accelerator id)``, the Warning ``events``, and ``held``: every charge
    the ledger holds, as ``(Pod metadata, Charge)`` in the order they landed."""

    slots: dict[tuple[str, str, str], _Slot]
    events: list[LedgerEvent] = field(default_factory=list)
    held: list[tuple[Mapping[str, Any], Charge]] = field(default_factory=list)


def replay_ledger(policy: Policy, node: str, spec: Mapping[str, Any],
                  pods: list[Mapping[str, Any]]) -> LedgerReplay:
    """Charge the Pods on ``node`` onto the accelerators of ``spec``, oldest Pod first (creationTimestamp,
    then namespace/name), containers by name, so a conflict always skips the later charge
    (:func:`_charge_pod`). Finished Pods (``Succeeded``/``Failed``) hold nothing. A charge on an unhealthy
    accelerator is a conflict, one on an accelerator in maintenance is not (the Pod was there first and is
    never evicted by us) and is left out with it. What :func:`rebuild_ledger` writes and what the
    controller's usage counters charge to each Pod (docs/tasks/report-usage.md "What is charged")."""
    led = agent_rules(policy).ledger
    replay = LedgerReplay(slots={(g["manufacturer"], g["id"], a["id"]): _Slot(spec=a)
                                 for g in spec.get("groups", []) for a in g["accelerators"]})
    key = policy.key("allocation")
    for pod in sorted(pods, key=_pod_order):
        meta = pod.get("metadata") or {}
        if (pod.get("status") or {}).get("phase") in led.finishedPhases:
            continue
        text = (meta.get("annotations") or {}).get(key)
        if text is not None:
            replay.events += _charge_pod(policy, node, spec, replay, meta, text)
    return replay


def rebuild_ledger(policy: Policy, node: str, spec: Mapping[str, Any],
                   pods: list[Mapping[str, Any]]) -> tuple[dict[str, Any], list[LedgerEvent]]:
    """Rebuild ``status`` from the Pods on ``node`` (:func:`replay_ledger`); returns ``(status,
    events)``. Accelerators out of service (unhealthy, in maintenance) are left out of ``status``
    (:func:`_status_entry`).
    """
    replay = replay_ledger(policy, node, spec, pods)
    status_groups = []
    for g in spec.get("groups", []):
        entries = [_status_entry(policy, replay.slots[(g["manufacturer"], g["id"], a["id"])], a)
                   for a in g["accelerators"] if in_service(a)]
        status_groups.append({"id": g["id"], "manufacturer": g["manufacturer"], "accelerators": entries})
    return {"groups": status_groups}, replay.events


def _charge_pod(policy: Policy, node: str, spec: Mapping[str, Any], replay: LedgerReplay,
                meta: Mapping[str, Any], text: str) -> list[LedgerEvent]:
    """Charge one Pod's allocation annotation ``text`` onto ``replay.slots`` (each landed charge appended
    to ``replay.held``); returns its Events: one ``InvalidAllocation`` on the Pod when the annotation is
    ignored, an ``AllocationConflict`` on the Devices object (named ``node``) for each charge skipped."""
    led = agent_rules(policy).ledger
    ns, name = meta.get("namespace", ""), meta.get("name", "")
    try:
        charges = parse_allocation(policy, text, spec, node)
    except AllocationError as exc:
        return [LedgerEvent("Pod", ns, name, led.events.invalidAllocation, str(exc))]
    events = []
    for charge in charges:
        slot = replay.slots[(charge.manufacturer, charge.group, charge.accelerator)]
        if out_of_service(slot.spec) == "maintenance":
            continue
        problem = _conflict(slot, charge, policy)
        if problem is not None:
            which, extra = problem
            message = getattr(led.messages, which).format(
                pod=f"{ns}/{name}", container=charge.container, accelerator=charge.accelerator,
                manufacturer=charge.manufacturer, group=charge.group, mode=charge.mode, **extra)
            events.append(LedgerEvent("Devices", "", node, led.events.allocationConflict, message))
            continue
        _apply(slot, charge, policy)
        replay.held.append((meta, charge))
    return events


def _status_entry(policy: Policy, slot: _Slot, a: Mapping[str, Any]) -> dict[str, Any]:
    """The ``status`` entry of one healthy accelerator: mode, allocated and remaining credits (zero
    ones left out), slices, and a partitioned one's held and remaining profiles."""
    credits = policy.constants.creditsPerAccelerator
    entry: dict[str, Any] = {"id": a["id"], "index": a["index"], "mode": slot.mode}
    remaining = max(credits - slot.allocated, 0)
    if slot.allocated:
        entry["allocated"] = slot.allocated
    if remaining:
        entry["remaining"] = remaining
    if slot.slices:
        entry["allocatedSlices"] = slot.slices
    if is_partitioned(a):
        if slot.held:
            entry["allocatedProfiles"] = [{"name": n, "count": c} for n, c in sorted(slot.held.items())]
        entry["remainingProfiles"] = remaining_profiles(slot.profiles, slot.used)
    return entry
