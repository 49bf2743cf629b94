"""Four-view arithmetic (spec/four-view.md §2): EX/SH/SL/PT over a pool's Devices ledgers.

Inputs are Devices objects (``spec`` capability, ``status`` ledger) already selected for the pool
and the pool's accelerator group (aKey). Constants come from rules/constants.yaml and the SH
onceMaxRequest reading from rules/pools/fourview.yaml. All divisions are integer floor.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from runtime.engine.policy import Policy


@dataclass
class View:
    """One projection: capacity, onceMaxRequest, remaining (integers; rendered as strings)."""

    capacity: int = 0
    once_max: int = 0
    remaining: int = 0

    def render(self) -> dict:
        return {"capacity": str(self.capacity), "onceMaxRequest": str(self.once_max),
                "remaining": str(self.remaining)}

    @property
    def pair(self) -> str:
        return f"{self.once_max}/{self.remaining}"


@dataclass
class FourView:
    """EX, SH, SL, PT plus the partition profile lists ({name: count}, published spelling)."""

    ex: View = field(default_factory=View)
    sh: View = field(default_factory=View)
    sl: View = field(default_factory=View)
    pt: View = field(default_factory=View)
    allocated_profiles: dict[str, int] = field(default_factory=dict)
    remaining_profiles: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        """`<EX>/<..> <SH> <SL> <PT>` as the ACCELERATOR(EX/SH/SL/PT) column prints it."""
        return " ".join(v.pair for v in (self.ex, self.sh, self.sl, self.pt))

    def partitions(self) -> str:
        return ",".join(f"{k}={v}" for k, v in sorted(self.remaining_profiles.items()))

    def render_status(self) -> dict:
        pt = self.pt.render()
        if self.allocated_profiles:
            pt["allocatedProfiles"] = [{"name": k, "count": v} for k, v in sorted(self.allocated_profiles.items())]
        if self.remaining_profiles:
            pt["remainingProfiles"] = [{"name": k, "count": v} for k, v in sorted(self.remaining_profiles.items())]
        return {"accelerator": self.ex.render(), "acceleratorShared": self.sh.render(),
                "acceleratorSliced": self.sl.render(), "acceleratorPartitioned": pt}


def _ledger_index(devices: dict) -> dict[tuple[str, str, str], dict]:
    out = {}
    for group in (devices.get("status") or {}).get("groups") or []:
        for accel in group.get("accelerators") or []:
            out[(group.get("manufacturer"), group.get("id"), accel.get("id"))] = accel
    return out


def _partitioned(status: dict) -> bool:
    return int(((status.get("physicalSliced") or {}).get("count")) or 0) > 0


def _logically_sliceable(status: dict) -> bool:
    return int(((status.get("logicalSliced") or {}).get("count")) or 0) > 0 and not _partitioned(status)


def compute(policy: Policy, devices_list: list[dict], akey: str) -> FourView:
    """The four views of one pool: ``devices_list`` = its selected Devices (one per node)."""
    d = policy.constants.creditsPerAccelerator
    share = policy.constants.share
    pct = policy.constants.pct
    per_acc_shares = policy.constants.sharesPerAccelerator
    per_acc_pct = policy.constants.percentPerAccelerator
    share_sum = policy.fourview.sharedOnceMaxReading == "shareSum"
    fv = FourView()
    for devices in devices_list:
        ledger = _ledger_index(devices)
        node_accs = node_excl = node_shares = node_share_accs = node_logical = node_sliced = 0
        for group in (devices.get("spec") or {}).get("groups") or []:
            manu, gid = group.get("manufacturer"), group.get("id")
            if f"{manu}-{gid}" != akey:
                continue
            for accel in group.get("accelerators") or []:
                status = accel.get("status") or {}
                if status.get("unhealthy"):
                    continue
                entry = ledger.get((manu, gid, accel.get("id")))
                if _partitioned(status):
                    _pt_pass(fv, status, entry)
                    continue
                node_accs += 1
                if entry is None:
                    rem, mode = d, 0
                else:
                    rem, mode = int(entry.get("remaining") or 0), int(entry.get("mode") or 0)
                free = rem >= d
                if free:
                    node_excl += 1
                if free or mode == 2:
                    node_shares += rem // share
                    if rem >= share:
                        node_share_accs += 1
                if not _logically_sliceable(status):
                    continue
                node_logical += 1
                if free or mode == 3:
                    p = rem // pct
                    node_sliced += p
                    fv.sl.once_max = max(fv.sl.once_max, p)
        fv.ex.capacity += node_accs
        fv.ex.remaining += node_excl
        fv.ex.once_max = max(fv.ex.once_max, node_excl)
        fv.sh.capacity += node_accs * per_acc_shares
        fv.sh.remaining += node_shares
        fv.sh.once_max = max(fv.sh.once_max, node_shares if share_sum else node_share_accs)
        fv.sl.capacity += node_logical * per_acc_pct
        fv.sl.remaining += node_sliced
    return fv


def _pt_pass(fv: FourView, status: dict, entry: dict | None) -> None:
    physical = status.get("physicalSliced") or {}
    fv.pt.capacity += int(physical.get("count") or 0)
    profiles = physical.get("profiles") or []
    if entry is None:  # no ledger row yet: free, remainingProfiles = capability counts
        remaining = {p["name"]: int(p.get("count") or 0) for p in profiles}
        allocated: dict[str, int] = {}
    else:
        remaining = {p["name"]: int(p.get("count") or 0) for p in entry.get("remainingProfiles") or []}
        allocated = {p["name"]: int(p.get("count") or 0) for p in entry.get("allocatedProfiles") or []}
    acc_rem = max(remaining.values(), default=0)
    fv.pt.remaining += acc_rem
    if acc_rem > 0:
        fv.pt.once_max = 1
    for p in profiles:
        fv.remaining_profiles.setdefault(p["name"], 0)
    for name, count in remaining.items():
        fv.remaining_profiles[name] = fv.remaining_profiles.get(name, 0) + count
    for name, count in allocated.items():
        if count > 0:
            fv.allocated_profiles[name] = fv.allocated_profiles.get(name, 0) + count


def zeros() -> FourView:
    """All views 0 (HoldAndDrain queues, non-accelerated types)."""
    return FourView()
