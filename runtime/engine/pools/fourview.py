"""Four-view arithmetic (docs/concepts/four-views.md "The four views"): EX/SH/SL/PT over a pool's Devices
ledgers.

Inputs are Devices objects (``spec`` capability, ``status`` ledger) already selected for the pool
and the pool's accelerator group (aKey). Constants come from rules/constants.yaml and the SH
onceMaxRequest reading from rules/pools/fourview.yaml. All divisions are integer floor.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from runtime.engine.pools.accelerators import Accelerator, accelerators, exclusive_free, takes_shares, \
    takes_slices
from runtime.engine.policy import Policy
from runtime.engine.snapshot import name_of


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


def compute(policy: Policy, devices_list: list[dict], akey: str,
            closed: Mapping[str, str] | None = None) -> FourView:
    """The four views of one pool: ``devices_list`` = its selected Devices (one per node).

    Per-accelerator tests (free, takes shares, takes slices) are the shared predicates of
    :mod:`runtime.engine.pools.accelerators`. ``closed``: node name -> why it takes no new Pod
    (:mod:`runtime.engine.pools.closednodes`): such a node's accelerators count as capacity, never as
    remaining or once-max (docs/concepts/out-of-service.md "Cordoned and tainted nodes").
    """
    fv = FourView()
    for devices in devices_list:
        node = _node_views(policy, fv, devices, akey, bool(closed) and name_of(devices) in closed)
        fv.ex.capacity += node.accs
        fv.ex.remaining += node.excl
        fv.ex.once_max = max(fv.ex.once_max, node.excl)
        fv.sh.capacity += node.shareable * policy.constants.sharesPerAccelerator
        fv.sh.remaining += node.shares
        share_sum = policy.fourview.sharedOnceMaxReading == "shareSum"
        fv.sh.once_max = max(fv.sh.once_max, node.shares if share_sum else node.share_accs)
        fv.sl.capacity += node.logical * policy.constants.percentPerAccelerator
        fv.sl.remaining += node.sliced
        fv.sl.once_max = max(fv.sl.once_max, node.sliced_once)
    return fv


@dataclass
class _Node:
    """One node's part of the views (accelerators of the pool's aKey, unpartitioned)."""

    accs: int = 0
    shareable: int = 0
    excl: int = 0
    shares: int = 0
    share_accs: int = 0
    logical: int = 0
    sliced: int = 0
    sliced_once: int = 0


def _node_views(policy: Policy, fv: FourView, devices: dict, akey: str, closed: bool) -> _Node:
    """One node's counts; partitioned accelerators go to ``fv``'s PT view directly. A ``closed`` node
    counts its capacity only."""
    share = policy.constants.share
    node = _Node()
    for a in accelerators(policy, devices):
        if a.akey != akey:
            continue
        if a.partitioned:
            _pt_pass(fv, a, closed)
            continue
        node.accs += 1
        # a DRA-published accelerator offers no shares (docs/concepts/dra.md "Views per manufacturer")
        node.shareable += a.shareable
        if a.logically_sliceable:
            node.logical += 1
        if closed:
            continue
        if exclusive_free(policy, a):
            node.excl += 1
        if takes_shares(policy, a):
            node.shares += a.remaining // share
            if a.remaining >= share:
                node.share_accs += 1
        if a.logically_sliceable and takes_slices(policy, a):
            p = a.remaining // policy.constants.pct
            node.sliced += p
            node.sliced_once = max(node.sliced_once, p)
    return node


def _pt_pass(fv: FourView, a: Accelerator, closed: bool = False) -> None:
    fv.pt.capacity += a.physical_count
    for name in a.offered_profiles:
        fv.remaining_profiles.setdefault(name, 0)
    for name, count in a.allocated_profiles.items():
        if count > 0:
            fv.allocated_profiles[name] = fv.allocated_profiles.get(name, 0) + count
    if closed:
        return
    acc_rem = max(a.remaining_profiles.values(), default=0)
    fv.pt.remaining += acc_rem
    if acc_rem > 0:
        fv.pt.once_max = 1
    for name, count in a.remaining_profiles.items():
        fv.remaining_profiles[name] = fv.remaining_profiles.get(name, 0) + count


def zeros() -> FourView:
    """All views 0 (HoldAndDrain queues, non-accelerated types)."""
    return FourView()
