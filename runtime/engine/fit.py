"""Per-node fit labels from the Devices ledger (spec/node-facts.md §9).

``sliced-max-free-units.fit.gpustack.ai/<aKey>``: the largest ``remaining`` among the model's
logically sliceable accelerators in mode 0 or 3 with a free slice (``allocatedSlices`` below
``logicalSliced.count``), ``0`` when all are full. ``shared-free-cards.fit.gpustack.ai/<aKey>``: how
many whole-capable accelerators are in mode 0 or 2 with at least one free share. A label is absent
when the model has no such accelerator on the node, or the node is not managed. Key prefixes:
rules/labels.yaml; the share size: rules/constants.yaml.
"""
from __future__ import annotations

from runtime.engine.policy import Policy

FREE, SHARED, SLICED = 0, 2, 3


def fit_labels(policy: Policy, devices: dict, managed: bool) -> dict[str, str]:
    """The fit labels one node should carry, from its Devices object (spec + status ledger)."""
    if not managed:
        return {}
    d = policy.constants.creditsPerAccelerator
    share = policy.constants.share
    ledger = {}
    for group in (devices.get("status") or {}).get("groups") or []:
        for accel in group.get("accelerators") or []:
            ledger[(group.get("manufacturer"), group.get("id"), accel.get("id"))] = accel
    out: dict[str, str] = {}
    for group in (devices.get("spec") or {}).get("groups") or []:
        akey = f"{group.get('manufacturer')}-{group.get('id')}"
        sliceable = False
        best_units = 0
        whole_capable = False
        shared_free = 0
        for accel in group.get("accelerators") or []:
            status = accel.get("status") or {}
            if status.get("unhealthy"):
                continue
            entry = ledger.get((group.get("manufacturer"), group.get("id"), accel.get("id"))) or {"mode": FREE, "remaining": d}
            mode, remaining = int(entry.get("mode") or 0), int(entry.get("remaining") or 0)
            partitioned = int(((status.get("physicalSliced") or {}).get("count")) or 0) > 0
            slices = int(((status.get("logicalSliced") or {}).get("count")) or 0)
            if partitioned:
                continue
            whole_capable = True
            if mode in (FREE, SHARED) and remaining >= share:
                shared_free += 1
            if slices > 0:
                sliceable = True
                if mode in (FREE, SLICED) and int(entry.get("allocatedSlices") or 0) < slices:
                    best_units = max(best_units, remaining)
        if sliceable:
            out[f"{policy.prefix('fitSliced')}{akey}"] = str(best_units)
        if whole_capable:
            out[f"{policy.prefix('fitShared')}{akey}"] = str(shared_free)
    return out
