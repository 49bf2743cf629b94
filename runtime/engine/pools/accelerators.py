"""One node's accelerators as the ledger reads them, and the per-accelerator predicates.

A Devices object (docs/agent.md "The Devices object and its ledger") splits each accelerator in two: its
capability in ``spec.groups[].accelerators[]`` and its ledger row in ``status.groups[].accelerators[]``
(joined by manufacturer, group id and accelerator id). :func:`accelerators` joins them for the healthy
accelerators; an accelerator with no ledger row yet reads as free (docs/concepts/four-views.md "The four
views": mode 0, ``remaining`` D, ``remainingProfiles`` = its capability counts).

The predicates below are the single statement of the per-accelerator rules that three readers share: the
four-view arithmetic (:mod:`runtime.engine.pools.fourview`), the fit labels
(:mod:`runtime.engine.pools.fit`, docs/agent.md "Capacity and fit labels") and the
``gpustack-node-devices`` admission check (:mod:`runtime.engine.admissioncheck`,
docs/concepts/pools-and-flavors.md "The AdmissionCheck `gpustack-node-devices`"). Constants (D, the share)
come from rules/constants.yaml; the mode numbers from rules/agent.yaml ``ledger.modes``.

Sources: docs/concepts/dra.md "Views per manufacturer".
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

from runtime.engine.devices.factcheck import ledger_sound
from runtime.engine.devices.nodefacts import agent_rules
from runtime.engine.policy import Policy


@dataclass(frozen=True)
class Accelerator:
    """One healthy accelerator: capability joined with its ledger row.

    ``mode``, ``remaining`` (credits, absent = 0), ``allocated_slices`` from the ledger;
    ``logical_count`` (``logicalSliced.count``), ``physical_count`` (``physicalSliced.count``) and
    ``offered_profiles`` (profile names of ``physicalSliced.profiles``) from the capability;
    ``remaining_profiles`` / ``allocated_profiles`` (name -> count) from the ledger, or the capability
    counts / nothing when the row is missing.
    """

    manufacturer: str
    group_id: str
    id: str
    index: int
    mode: int
    remaining: int
    allocated_slices: int
    logical_count: int
    physical_count: int
    offered_profiles: tuple[str, ...] = ()
    remaining_profiles: dict[str, int] = field(default_factory=dict)
    allocated_profiles: dict[str, int] = field(default_factory=dict)
    # published by a DRA driver (its capability's ``dra`` reference)
    dra: bool = False
    views: tuple[str, ...] | None = None   # the capability's ``views``: the views offered, when not all

    @property
    def akey(self) -> str:
        """``<manufacturer>-<group id>`` (docs/agent.md "Normalization")."""
        return f"{self.manufacturer}-{self.group_id}"

    @property
    def partitioned(self) -> bool:
        """``physicalSliced.count > 0``."""
        return self.physical_count > 0

    @property
    def logically_sliceable(self) -> bool:
        """``logicalSliced.count > 0`` and not partitioned."""
        return self.logical_count > 0 and not self.partitioned

    @property
    def whole_capable(self) -> bool:
        """Not partitioned."""
        return not self.partitioned

    @property
    def shareable(self) -> bool:
        """Whole-capable and served by the sharing device plugin: not a DRA-published accelerator,
        which offers the exclusive view only, nor one whose capability's ``views`` leave the shared
        view out (its manufacturer's row, rules/manufacturers.yaml)."""
        return self.whole_capable and not self.dra and (self.views is None or "shared" in self.views)


def _int(value) -> int:
    return int(value or 0)


def _modes(policy: Policy):
    """rules/agent.yaml ``ledger.modes``, looked up once per Policy."""
    cache = policy.__dict__.setdefault("_ledger_modes", [])
    if not cache:
        cache.append(agent_rules(policy).ledger.modes)
    return cache[0]


def walk_devices(devices: dict, section: str = "spec",
                 akey: str | None = None) -> Iterator[tuple[dict, dict]]:
    """``(group, accelerator)`` of every accelerator of one Devices object, in order: groups, then
    accelerators; unhealthy ones included (``accelerator["status"]`` says so).

    ``section``: ``spec`` (capability rows) or ``status`` (ledger rows); ``akey``: only the groups
    whose aKey (``<manufacturer>-<group id>``) it is. The one walk of Devices groups -> accelerators
    -> status that the ledger join, the flavor notes and the InstanceType detail share.
    """
    for group in (devices.get(section) or {}).get("groups") or []:
        if akey is not None and f"{group.get('manufacturer')}-{group.get('id')}" != akey:
            continue
        for accel in group.get("accelerators") or []:
            yield group, accel


def accelerators(policy: Policy, devices: dict) -> Iterator[Accelerator]:
    """The healthy accelerators of one Devices object, in spec order (groups, then accelerators).

    ``devices`` is the API object (``spec`` capability, ``status`` ledger). Accelerators out of service
    (unhealthy, in maintenance) are skipped (docs/concepts/out-of-service.md). A Devices object with an
    out-of-range number yields nothing: it counts in no view, no fit label and no admission check
    (decision 19, :func:`ledger_sound`).
    """
    if not ledger_sound(policy, devices):
        return
    ledger = {(group.get("manufacturer"), group.get("id"), row.get("id")): row
              for group, row in walk_devices(devices, "status")}
    d = policy.constants.creditsPerAccelerator
    free_mode = _modes(policy).none
    for group, accel in walk_devices(devices):
        manu, gid = group.get("manufacturer"), group.get("id")
        status = accel.get("status") or {}
        if status.get("unhealthy") or status.get("maintenance"):
            continue
        physical = status.get("physicalSliced") or {}
        profiles = physical.get("profiles") or []
        row = ledger.get((manu, gid, accel.get("id")))
        if row is None:
            mode, remaining, slices = free_mode, d, 0
            rem_profiles = {p["name"]: _int(p.get("count")) for p in profiles}
            alloc_profiles: dict[str, int] = {}
        else:
            mode, remaining, slices = _int(row.get("mode")), _int(row.get("remaining")), _int(
                row.get("allocatedSlices"))
            rem_profiles = {p["name"]: _int(p.get("count")) for p in row.get("remainingProfiles") or []}
            alloc_profiles = {p["name"]: _int(p.get("count")) for p in row.get("allocatedProfiles") or []}
        yield Accelerator(
            manufacturer=manu, group_id=gid, id=accel.get("id"), index=_int(accel.get("index")),
            mode=mode, remaining=remaining, allocated_slices=slices,
            logical_count=_int((status.get("logicalSliced") or {}).get("count")),
            physical_count=_int(physical.get("count")),
            offered_profiles=tuple(p["name"] for p in profiles),
            remaining_profiles=rem_profiles, allocated_profiles=alloc_profiles, dra=bool(accel.get("dra")),
            views=tuple(accel["views"]) if isinstance(accel.get("views"), list) else None)


# --- predicates ---------------------------------------------------------------------------------------
def exclusive_free(policy: Policy, a: Accelerator) -> bool:
    """A whole-capable accelerator with ``remaining ≥ D``: ``free`` in the four views, the admission
    check's exclusive row."""
    return a.whole_capable and a.remaining >= policy.constants.creditsPerAccelerator


def takes_shares(policy: Policy, a: Accelerator) -> bool:
    """Shareable (whole-capable, not DRA-published) and free or held in Shared mode: its remaining
    credits count as free shares."""
    return a.shareable and (exclusive_free(policy, a) or a.mode == _modes(policy).shared)


def has_free_share(policy: Policy, a: Accelerator) -> bool:
    """Shareable, mode None or Shared, ``remaining ≥`` one share (160,000): it can take one more
    shared holder (the admission check's shared row; the fit label ``shared-free-cards``)."""
    modes = _modes(policy)
    return a.shareable and a.mode in (modes.none, modes.shared) and a.remaining >= policy.constants.share


def takes_slices(policy: Policy, a: Accelerator) -> bool:
    """Logically sliceable and free or held in Sliced mode: its remaining credits count for the SL view."""
    return a.logically_sliceable and (exclusive_free(policy, a) or a.mode == _modes(policy).sliced)


def has_free_slice(policy: Policy, a: Accelerator) -> bool:
    """Logically sliceable, mode None or Sliced, and ``allocatedSlices < logicalSliced.count`` (the fit
    label ``sliced-max-free-units``; the admission check's sliced row without the units test)."""
    modes = _modes(policy)
    return a.logically_sliceable and a.mode in (modes.none, modes.sliced) \
        and a.allocated_slices < a.logical_count


def holds_slice(policy: Policy, a: Accelerator, units: int) -> bool:
    """:func:`has_free_slice` and ``remaining ≥ units`` (the admission check's sliced row)."""
    return has_free_slice(policy, a) and a.remaining >= units


def holds_partition(policy: Policy, a: Accelerator, profile: str) -> bool:
    """Partitioned, mode None or Partitioned, ``remainingProfiles[profile] > 0`` (the admission check's
    partition row)."""
    modes = _modes(policy)
    return a.partitioned and a.mode in (modes.none, modes.partitioned) \
        and a.remaining_profiles.get(profile, 0) > 0
