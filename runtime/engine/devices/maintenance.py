"""AcceleratorMaintenance objects (docs/concepts/out-of-service.md "Maintenance"): which accelerators of a
node they take out of service at a given time, and the status the controller writes on them.

An object names a node (``spec.node``) and its accelerators by UUID or index (``spec.accelerators``; absent
or empty: all of them), with a reason, an owner and an expiry (RFC 3339). It is in force from its creation
until its expiry; from then on it has no effect, without anyone acting. One that cannot be read (an expiry
that does not parse, a node missing) has no effect and its status says why: one bad object costs only
itself. The agent applies :func:`in_force` to its own Devices (the accelerators leave the views, the quota
and the ledger); the controller writes :func:`maintenance_status` on each object. Pure: ``now`` is passed in.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Iterable, Mapping

from runtime.engine.devices.nodefacts import agent_rules
from runtime.engine.policy import Policy
from runtime.engine.snapshot import name_of

IN_FORCE, EXPIRED, UNMATCHED, INVALID = "InForce", "Expired", "Unmatched", "Invalid"


def parse_time(text) -> datetime | None:
    """RFC 3339 -> an aware datetime; None when absent or unreadable (or without a zone)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo is not None else None


@dataclass(frozen=True)
class Reading:
    """One object read against one node's accelerators at ``now``: its ``state``, the ``(uuid, index)``
    pairs it takes out (``matched``), its ``entry`` (what the Devices records), the ``problem`` when it
    cannot be read (``field``, ``error``), the names it gives that match nothing (``unknown``)."""

    state: str
    matched: tuple[tuple[str, int], ...] = ()
    entry: dict = field(default_factory=dict)
    problem: tuple[str, str] | None = None
    unknown: tuple[str, ...] = ()


def read(obj: Mapping, accelerators: Iterable[tuple[str, int]], now: datetime) -> Reading:
    """``obj`` against the node's accelerators ``(uuid, index)`` at ``now`` (see the module docstring)."""
    spec = obj.get("spec") or {}
    expiry = parse_time(spec.get("expiry"))
    if expiry is None:
        return Reading(INVALID, problem=("spec.expiry", f"{spec.get('expiry')!r} is not an RFC 3339 time"))
    if not isinstance(spec.get("node"), str) or not spec["node"]:
        return Reading(INVALID, problem=("spec.node", "Required value"))
    wanted = [str(w) for w in spec.get("accelerators") or []]
    accelerators = list(accelerators)
    matched = [(uuid, index) for uuid, index in accelerators
               if not wanted or uuid in wanted or str(index) in wanted]
    known = {uuid for uuid, _ in accelerators} | {str(index) for _, index in accelerators}
    unknown = tuple(w for w in wanted if w not in known)
    entry = {"name": name_of(obj), "reason": str(spec.get("reason") or ""),
             "owner": str(spec.get("owner") or ""), "expiry": spec["expiry"]}
    if now >= expiry:
        return Reading(EXPIRED, tuple(matched), entry, unknown=unknown)
    if not matched:
        return Reading(UNMATCHED, (), entry, unknown=unknown or tuple(wanted))
    return Reading(IN_FORCE, tuple(matched), entry, unknown=unknown)


def in_force(objects: Iterable[Mapping], node: str, accelerators: Iterable[tuple[str, int]],
             now: datetime) -> tuple[dict[str, dict], datetime | None]:
    """(accelerator UUID -> the maintenance entry in force on it, the earliest expiry still ahead) for
    ``node``: of the objects naming it, those in force at ``now``; an accelerator two of them name takes the
    one that expires last (then the first by name). The expiry is when the agent looks again."""
    accelerators = list(accelerators)
    out: dict[str, dict] = {}
    wake: datetime | None = None
    for obj in sorted(objects, key=name_of):
        if (obj.get("spec") or {}).get("node") != node:
            continue
        reading = read(obj, accelerators, now)
        if reading.state != IN_FORCE:
            continue
        expiry = parse_time(reading.entry["expiry"])
        wake = expiry if wake is None else min(wake, expiry)
        for uuid, _ in reading.matched:
            held = out.get(uuid)
            if held is None or parse_time(held["expiry"]) < expiry:
                out[uuid] = dict(reading.entry)
    return out, wake


def devices_accelerators(devices: Mapping | None) -> list[tuple[str, int]]:
    """``(uuid, index)`` of every accelerator of a Devices object's ``spec``."""
    groups = ((devices or {}).get("spec") or {}).get("groups") or []
    return [(str(a.get("id")), int(a.get("index") or 0)) for g in groups for a in g.get("accelerators") or []]


def pods_holding(policy: Policy, pods: Iterable[Mapping], node: str, ids: set[str]) -> list[str]:
    """``namespace/name`` (sorted) of the Pods bound to ``node``, not finished, whose allocation annotation
    (docs/agent.md "The Devices object and its ledger") names one of the accelerator ``ids``."""
    import json

    finished = set(agent_rules(policy).ledger.finishedPhases)
    key = policy.key("allocation")
    out = []
    for pod in pods:
        if (pod.get("spec") or {}).get("nodeName") != node or \
                (pod.get("status") or {}).get("phase") in finished:
            continue
        try:
            doc = json.loads(((pod.get("metadata") or {}).get("annotations") or {}).get(key) or "{}")
        except ValueError:
            continue
        held = {str(a.get("id")) for groups in (doc.values() if isinstance(doc, dict) else [])
                for g in (groups if isinstance(groups, list) else []) if isinstance(g, dict)
                for a in g.get("accelerators") or [] if isinstance(a, dict)}
        if held & ids:
            meta = pod.get("metadata") or {}
            out.append(f"{meta.get('namespace', '')}/{meta.get('name', '')}")
    return sorted(out)


def maintenance_status(policy: Policy, obj: Mapping, devices: Mapping | None, pods: Iterable[Mapping],
                       now: datetime) -> dict:
    """The ``status`` of one AcceleratorMaintenance at ``now``: ``state``, ``devices`` (the indexes it takes
    out, comma-separated), ``accelerators``, the ``pods`` still holding them, and a ``message`` in the words
    of rules/agent.yaml ``maintenance.messages``."""
    words = agent_rules(policy).maintenance.messages
    spec = obj.get("spec") or {}
    node = str(spec.get("node") or "")
    reading = read(obj, devices_accelerators(devices), now)
    if reading.state == INVALID:
        field_name, error = reading.problem
        return {"state": INVALID, "message": words.invalid.format(field=field_name, error=error)}
    if reading.state == UNMATCHED:
        wanted = ", ".join(reading.unknown) if reading.unknown else "(none: it has no Devices)"
        return {"state": UNMATCHED, "message": words.unmatched.format(node=node, wanted=wanted)}
    status: dict = {"state": reading.state,
                    "devices": ",".join(str(index) for _, index in reading.matched),
                    "accelerators": [{"id": uuid, "index": index} for uuid, index in reading.matched]}
    if reading.state == EXPIRED:
        status["message"] = words.expired.format(expiry=spec.get("expiry"))
        return status
    pods = pods_holding(policy, pods, node, {uuid for uuid, _ in reading.matched})
    if pods:
        status["pods"] = pods
    status["message"] = words.inForce.format(devices=status["devices"], node=node, expiry=spec.get("expiry"),
                                             pods=", ".join(pods) or "none")
    return status


def next_expiry(objects: Iterable[Mapping], now: datetime) -> datetime | None:
    """The earliest expiry still ahead of ``now`` among ``objects`` (when a status changes next)."""
    ahead = [t for t in (parse_time((o.get("spec") or {}).get("expiry")) for o in objects) if t and t > now]
    return min(ahead) if ahead else None
