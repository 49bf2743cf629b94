"""Builders for the agent tests: Pods carrying the allocation annotation (docs/agent.md "The Devices object and its ledger")."""
from __future__ import annotations

import json

from tests import builders

ALLOCATED = "device.gpustack.ai/accelerator.allocated"
A10G = "GPU-e0587d2e-127c-4fb8-e2c1-6e517529f575"
H100 = "GPU-c1000000-0000-4000-8000-00000000000{}"


def entry(uuid, index, mode, allocated=None, profile=None, placements=None):
    e = {"id": uuid, "index": index, "mode": mode}
    if allocated is not None:
        e["allocated"] = allocated
    if profile is not None:
        e["allocatedPhysicalProfile"] = profile
    if placements is not None:
        e["allocatedPhysicalPlacements"] = [{"start": s, "length": n} for s, n in placements]
    return e


def pod(name, groups=None, *, raw=None, phase="Running", created="2026-01-01T00:00:00Z", container="main"):
    """A Pod on the node with ``{container: groups}`` as its annotation (or ``raw`` text), without a spec:
    the ledger reads only the annotation and the phase."""
    text = raw if raw is not None else json.dumps({container: groups})
    out = builders.pod(name, "demo", created=created, annotations={ALLOCATED: text}, phase=phase)
    del out["spec"]
    return out


def group(gid, *entries, manufacturer="nvidia"):
    return {"id": gid, "manufacturer": manufacturer, "accelerators": list(entries)}
