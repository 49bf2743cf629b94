"""Per-node fit labels from the Devices ledger (docs/agent.md "Capacity and fit labels").

``sliced-max-free-units.fit.gpustack.ai/<aKey>``: the largest ``remaining`` among the model's
logically sliceable accelerators in mode 0 or 3 with a free slice (``allocatedSlices`` below
``logicalSliced.count``), ``0`` when all are full. ``shared-free-cards.fit.gpustack.ai/<aKey>``: how
many whole-capable accelerators are in mode 0 or 2 with at least one free share. A label is absent
when the model has no such accelerator on the node, or the node is not managed. Key prefixes:
rules/labels.yaml; the share size: rules/constants.yaml.
"""
from __future__ import annotations

from runtime.engine.pools.accelerators import accelerators, has_free_share, has_free_slice
from runtime.engine.policy import Policy

def fit_labels(policy: Policy, devices: dict, managed: bool) -> dict[str, str]:
    """The fit labels one node should carry, from its Devices object (spec + status ledger).

    The per-accelerator tests are :func:`runtime.engine.pools.accelerators.has_free_share` and
    :func:`runtime.engine.pools.accelerators.has_free_slice`, the same the admission check uses.
    """
    if not managed:
        return {}
    sliceable: set[str] = set()
    best_units: dict[str, int] = {}
    shareable: set[str] = set()
    shared_free: dict[str, int] = {}
    akeys: list[str] = []
    for a in accelerators(policy, devices):
        if a.akey not in akeys:
            akeys.append(a.akey)
        if a.partitioned:
            continue
        if a.shareable:   # not a DRA-published accelerator (docs/concepts/dra.md "Views per manufacturer")
            shareable.add(a.akey)
        if has_free_share(policy, a):
            shared_free[a.akey] = shared_free.get(a.akey, 0) + 1
        if a.logically_sliceable:
            sliceable.add(a.akey)
            if has_free_slice(policy, a):
                best_units[a.akey] = max(best_units.get(a.akey, 0), a.remaining)
    out: dict[str, str] = {}
    for akey in akeys:
        if akey in sliceable:
            out[f"{policy.prefix('fitSliced')}{akey}"] = str(best_units.get(akey, 0))
        if akey in shareable:
            out[f"{policy.prefix('fitShared')}{akey}"] = str(shared_free.get(akey, 0))
    return out
