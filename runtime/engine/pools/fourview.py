"""Four-view arithmetic (docs/concepts/four-views.md "The four views"): EX/SH/SL/PT over a pool's Devices
ledgers.

Inputs are Devices objects (``spec`` capability, ``status`` ledger) already selected for the pool
and the pool's accelerator group (aKey). Constants come from rules/constants.yaml and the SH
onceMaxRequest reading from rules/pools/fourview.yaml. All divisions are integer floor.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from runtime.engine.pools.accelerators import Accelerator, accelerators, exclusive_free, takes_shares, \
    takes_slices
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
            pt["allocatedProfiles"] = [
                {"name": k, "count": v} for k, v in sorted(self.allocated_profiles.items())]
        if self.remaining_profiles:
            pt["remainingProfiles"] = [
                {"name": k, "count": v} for k, v in sorted(self.remaining_profiles.items())]
        return {"accelerator": self.ex.render(), "acceleratorShared": self.sh.render(),
                "acceleratorSliced": self.sl.render(), "acceleratorPartitioned": pt}


def compute(policy: Policy, devices_list: list[dict], akey: str) -> FourView:
    """The four views of one pool: ``devices_list`` = its selected Devices (one per node).

    Per-accelerator tests (free, takes shares, takes slices) are the shared predicates of
    :mod:`runtime.engine.pools.accelerators`.
    """
    share = policy.constants.share
    pct = policy.constants.pct
    per_acc_shares = policy.constants.sharesPerAccelerator
    per_acc_pct = policy.constants.percentPerAccelerator
    share_sum = policy.fourview.sharedOnceMaxReading == "shareSum"
    fv = FourView()
    for devices in devices_list:
        node_accs = node_shareable = node_excl = node_shares = node_share_accs = node_logical = \
            node_sliced = 0
        for a in accelerators(policy, devices):
            if a.akey != akey:
                continue
            if a.partitioned:
                _pt_pass(fv, a)
                continue
            node_accs += 1
            # a DRA-published accelerator offers no shares (docs/concepts/dra.md "Views per manufacturer")
            node_shareable += a.shareable
            if exclusive_free(policy, a):
                node_excl += 1
            if takes_shares(policy, a):
                node_shares += a.remaining // share
                if a.remaining >= share:
                    node_share_accs += 1
            if not a.logically_sliceable:
                continue
            node_logical += 1
            if takes_slices(policy, a):
                p = a.remaining // pct
                node_sliced += p
                fv.sl.once_max = max(fv.sl.once_max, p)
        fv.ex.capacity += node_accs
        fv.ex.remaining += node_excl
        fv.ex.once_max = max(fv.ex.once_max, node_excl)
        fv.sh.capacity += node_shareable * per_acc_shares
        fv.sh.remaining += node_shares
        fv.sh.once_max = max(fv.sh.once_max, node_shares if share_sum else node_share_accs)
        fv.sl.capacity += node_logical * per_acc_pct
        fv.sl.remaining += node_sliced
    return fv


def _pt_pass(fv: FourView, a: Accelerator) -> None:
    fv.pt.capacity += a.physical_count
    acc_rem = max(a.remaining_profiles.values(), default=0)
    fv.pt.remaining += acc_rem
    if acc_rem > 0:
        fv.pt.once_max = 1
    for name in a.offered_profiles:
        fv.remaining_profiles.setdefault(name, 0)
    for name, count in a.remaining_profiles.items():
        fv.remaining_profiles[name] = fv.remaining_profiles.get(name, 0) + count
    for name, count in a.allocated_profiles.items():
        if count > 0:
            fv.allocated_profiles[name] = fv.allocated_profiles.get(name, 0) + count


def zeros() -> FourView:
    """All views 0 (HoldAndDrain queues, non-accelerated types)."""
    return FourView()
