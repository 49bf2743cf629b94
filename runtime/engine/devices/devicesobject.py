"""The Devices object's labels and ``spec`` (capability), and the Node capacity keys (docs/agent.md
"The Devices object and its ledger" and "Capacity and fit labels").

Shapes are the JSON the API server stores: ``spec.groups[]`` with ``accelerators[]`` whose
``status`` holds ``unhealthy``, ``logicalSliced`` and ``physicalSliced``. Capacity values are
canonical quantity strings (``1600k``, ``12800``).

Sources: docs/concepts/dra.md "Views per manufacturer", docs/agent.md "Capacity and fit labels".
"""
from __future__ import annotations

from typing import Any, Mapping

from runtime.engine.devices.nodefacts import AcceleratorGroup, agent_rules
from runtime.engine.devices.views import offered_views
from runtime.model.normalize import format_decimal_quantity, format_memory_mib, parse_quantity
from runtime.engine.policy import Policy
from runtime.model import regex
from runtime.model.facts import AcceleratorFacts, PartitionProfile


# --- profiles ----------------------------------------------------------------------------------------
def profile_spelling(policy: Policy, manufacturer: str, vendor_name: str) -> str | None:
    """``MIG 1g.10gb`` -> ``1g.10gb``; thead ``4g48gb`` -> ``4g.48gb``; None when the name cannot
    form a resource-name segment (``1g.10gb+me``)."""
    fields = vendor_name.strip().lower().split()
    if not fields:
        return None
    name = fields[-1]
    rules = agent_rules(policy)
    for rewrite in rules.profileRewrites:
        if rewrite.manufacturer == manufacturer:
            name = regex.sub(rewrite.pattern, rewrite.replacement, name)
    return name if regex.fullmatch(rules.profileSegmentPattern, name) else None


def published_profiles(policy: Policy, acc: AcceleratorFacts) -> list[dict[str, Any]]:
    """The ``physicalSliced.profiles`` of one accelerator: respelled, invalid and repeated names dropped,
    in probe order. Empty unless MIG is on and the manufacturer has a partition kind."""
    manu = policy.manufacturers[acc.manufacturer]
    if not acc.migEnabled or not manu.partitionKind:
        return []
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for prof in acc.migProfiles:
        name = profile_spelling(policy, acc.manufacturer, prof.name)
        if name is None or name in seen:
            continue
        seen.add(name)
        out.append(_profile_entry(name, prof))
    return out


def _profile_entry(name: str, prof: PartitionProfile) -> dict[str, Any]:
    return {"name": name, "memoryMib": prof.memoryMib, "computeSlices": prof.computeSlices,
            "memorySlices": prof.memorySlices, "count": prof.count,
            "placements": [{"start": p.start, "length": p.length} for p in prof.placements]}


# --- spec --------------------------------------------------------------------------------------------
def accelerator_spec(policy: Policy, acc: AcceleratorFacts, maintenance: Mapping[str, Any] | None = None,
                     health: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One ``spec.groups[].accelerators[]`` entry. An accelerator a DRA driver published offers the
    exclusive view only: no logical slices, no partitions, and its ``dra`` reference (driver, pool, device)
    tells the readers so (no shares either). A view its manufacturer's row does not offer
    (:func:`runtime.engine.devices.views.offered_views`) has no entry either: no logical slices, no
    partitions, and for the shared view (which has no entry of its own) ``views``, the views offered, is
    written. ``maintenance``: the AcceleratorMaintenance entry in force on it; ``health``: its health
    record, whose ``unhealthy`` (judged by rules/health.yaml) takes it out as a lost device does
    (docs/concepts/out-of-service.md)."""
    manu = policy.manufacturers[acc.manufacturer]
    views = offered_views(policy, acc)
    profiles = [] if acc.dra or "partitioned" not in views else published_profiles(policy, acc)
    physical: dict[str, Any] = {"count": max((p["count"] for p in profiles), default=0)}
    if physical["count"] > 0:
        physical["profiles"] = profiles
    entry: dict[str, Any] = {"id": acc.uuid, "index": acc.index}
    if acc.minor is not None:
        entry["physicalIndexes"] = [acc.minor]
    # offers the exclusive view only; the claims name this
    # device
    if acc.dra is not None:
        entry["dra"] = acc.dra.model_dump()
    elif "shared" not in views and physical["count"] == 0:   # whole-capable, yet no shares (its row's views)
        entry["views"] = views
    record = dict(health or {})
    judged_out = bool(record.pop("unhealthy", False))
    entry["status"] = {
        "unhealthy": not acc.healthy or judged_out,
        "logicalSliced": {"count": 0 if acc.migEnabled or physical["count"] > 0 or acc.dra
                          or "sliced" not in views
                          else manu.logicalSlices,
                          "coresPercentageOvercommit": manu.coresOvercommit},
        "physicalSliced": physical,
    }
    if record:
        entry["status"]["health"] = record
    if maintenance:
        entry["status"]["maintenance"] = dict(maintenance)
    return entry


def devices_spec(policy: Policy, groups: list[AcceleratorGroup], maintenance: Mapping[str, Any] | None = None,
                 health: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``spec``: ``{"groups": [...]}`` in canonical order; empty strings and 0 cores omitted.
    ``maintenance`` / ``health``: accelerator UUID -> its maintenance entry / health record
    (:func:`accelerator_spec`)."""
    out = []
    for g in groups:
        entry: dict[str, Any] = {"id": g.id, "manufacturer": g.manufacturer, "name": g.name,
                                 "memory": g.memory}
        if g.cores:
            entry["cores"] = g.cores
        for field, value in (("driverVersion", g.driver_version), ("runtimeVersion", g.runtime_version),
                             ("computeCapability", g.compute_capability), ("family", g.family)):
            if value:
                entry[field] = value
        entry["accelerators"] = [accelerator_spec(policy, a, (maintenance or {}).get(a.uuid),
                                                  (health or {}).get(a.uuid)) for a in g.accelerators]
        out.append(entry)
    return {"groups": out}


def devices_labels(policy: Policy, node_labels: Mapping[str, str], gkey_value: str,
                   groups: list[AcceleratorGroup]) -> dict[str, str]:
    """The os and arch and the managed key copied from the Node (each only when present),
    ``general.*/<gKey>``, and ``acceleratable.*/<aKey>`` per group, healthy or not (decision 26)."""
    true = agent_rules(policy).trueValue
    labels: dict[str, str] = {}
    for role in ("os", "arch", "managed"):
        key = policy.key(role)
        if node_labels.get(key):
            labels[key] = node_labels[key]
    labels[f"{policy.prefix('general')}{gkey_value}"] = true
    for g in groups:
        labels[f"{policy.prefix('acceleratable')}{g.akey}"] = true
    return labels


# --- capability predicates on spec entries -------------------------------------------------------------
def is_partitioned(acc_spec: Mapping[str, Any]) -> bool:
    """Partitioned iff ``physicalSliced.count > 0``."""
    return acc_spec["status"]["physicalSliced"]["count"] > 0


def is_logically_sliceable(acc_spec: Mapping[str, Any]) -> bool:
    """``logicalSliced.count > 0`` and not partitioned."""
    return acc_spec["status"]["logicalSliced"]["count"] > 0 and not is_partitioned(acc_spec)


def is_healthy(acc_spec: Mapping[str, Any]) -> bool:
    return not acc_spec["status"]["unhealthy"]


def out_of_service(acc_spec: Mapping[str, Any]) -> str | None:
    """Why an accelerator (a ``spec`` entry) is out of service: ``unhealthy``, ``maintenance`` or None
    (docs/concepts/out-of-service.md). Out of service, it counts in no view, no quota, no capacity key and no
    ledger row; its labels stay (decision 26)."""
    status = acc_spec.get("status") or {}
    if status.get("unhealthy"):
        return "unhealthy"
    if status.get("maintenance"):
        return "maintenance"
    return None


def in_service(acc_spec: Mapping[str, Any]) -> bool:
    return out_of_service(acc_spec) is None


# --- node capacity -------------------------------------------------------------------------------------
def node_capacity(policy: Policy, spec: Mapping[str, Any], ledger_status: Mapping[str, Any] | None,
                  existing: Mapping[str, str] | None = None) -> dict[str, str]:
    """The extended-resource keys the agent publishes on its Node (capacity = allocatable).

    ``spec`` is the Devices spec; ``ledger_status`` the rebuilt ledger, whose allocated + remaining profile
    instances give the per-profile keys (capability counts when None). ``existing`` is the Node's current
    ``status.capacity``: keys of ours found there and not computed now are kept at ``0`` (a published key is
    never removed).
    """
    rules = agent_rules(policy)
    cap = rules.capacity
    credits = policy.constants.creditsPerAccelerator
    held = _held_profiles(ledger_status)
    values: dict[str, int] = {}
    for manu_id in sorted({g["manufacturer"] for g in spec.get("groups", [])}):
        manu = policy.manufacturers[manu_id]
        base = manu.base
        accs = [(g, a) for g in spec["groups"] if g["manufacturer"] == manu_id for a in g["accelerators"]
                if in_service(a)]
        sliceable = [(g, a) for g, a in accs if is_logically_sliceable(a)]
        # no key for a view the manufacturer never offers (rules/manufacturers.yaml)
        if not manu.offers("sliced"):
            continue
        values[cap.slicedUnits.format(base=base)] = len(sliceable) * credits
        values[cap.slicedCoresPercentage.format(base=base)] = sum(
            a["status"]["logicalSliced"]["count"] * cap.percentPerSlice if manu.coresOvercommit
            else cap.percentPerSlice for _, a in sliceable)
        values[cap.slicedMemoryPercentage.format(base=base)] = len(sliceable) * cap.percentPerSlice
        values[cap.slicedMemoryMib.format(base=base)] = sum(
            int(parse_quantity(format_memory_mib(g["memory"])) // 2**20) for g, _ in sliceable)
        if not manu.partitionKind or not manu.offers("partitioned"):
            continue
        partitioned = [(g, a) for g, a in accs if is_partitioned(a)]
        values[cap.partitionedUnits.format(base=base)] = len(partitioned) * credits
        for g, a in partitioned:
            per_acc = held.get((g["manufacturer"], g["id"], a["id"]))
            for prof in a["status"]["physicalSliced"]["profiles"]:
                key = cap.partitionedProfile.format(base=base, kind=manu.partitionKind, profile=prof["name"])
                values[key] = values.get(key, 0) + (per_acc.get(prof["name"], 0) if per_acc is not None
                                                    else prof["count"])
    for key in existing or {}:
        if key not in values and is_agent_capacity_key(policy, key):
            values[key] = 0
    return {k: format_decimal_quantity(v) for k, v in sorted(values.items())}


def _held_profiles(ledger_status: Mapping[str, Any] | None) -> dict[tuple[str, str, str], dict[str, int]]:
    """(manufacturer, group id, accelerator id) -> profile -> allocated + remaining instances."""
    out: dict[tuple[str, str, str], dict[str, int]] = {}
    for g in (ledger_status or {}).get("groups", []):
        for a in g.get("accelerators", []):
            if "remainingProfiles" not in a:
                continue
            counts = {p["name"]: p["count"] for p in a["remainingProfiles"]}
            for p in a.get("allocatedProfiles", []):
                counts[p["name"]] = counts.get(p["name"], 0) + p["count"]
            out[(g["manufacturer"], g["id"], a["id"])] = counts
    return out


def is_agent_capacity_key(policy: Policy, key: str) -> bool:
    """Whether ``key`` is one of the agent's capacity keys for some known manufacturer (never
    device-plugin keys)."""
    cap = agent_rules(policy).capacity
    for manu in policy.manufacturers.values():
        fixed = {t.format(base=manu.base) for t in (cap.slicedUnits, cap.slicedCoresPercentage,
                                                    cap.slicedMemoryPercentage, cap.slicedMemoryMib)
                 } if manu.offers("sliced") else set()
        if manu.partitionKind and manu.offers("partitioned"):
            fixed.add(cap.partitionedUnits.format(base=manu.base))
            prefix = cap.partitionedProfile.format(base=manu.base, kind=manu.partitionKind, profile="")
            if key.startswith(prefix) and len(key) > len(prefix):
                return True
        if key in fixed:
            return True
    return False
