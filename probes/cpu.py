"""CPU probe: the raw facts of docs/agent.md "Probe facts" from ``/proc/cpuinfo``.

Returns the ``cpu`` mapping of the recorded-facts document; normalization to the gKey and the CPU detail is
the engine's (runtime.engine.devices.nodefacts.gkey), because probes never import the engine (import-linter
contract).
"""
from __future__ import annotations

import os
from pathlib import Path

CPUINFO = "/proc/cpuinfo"

# /proc/cpuinfo field -> recorded-facts field. Kernel spellings, not policy.
_FIELDS = {"vendor_id": "vendorId", "CPU implementer": "implementer", "model name": "modelName",
           "cpu family": "family", "model": "model"}


def parse_cpuinfo(text: str) -> dict[str, str]:
    """The first processor block of a ``/proc/cpuinfo`` text as ``{vendorId, implementer, modelName,
    family, model}`` (missing fields are ""). arm64 kernels print ``CPU implementer`` and no
    ``vendor_id``/``model name``."""
    out = {v: "" for v in _FIELDS.values()}
    seen_processor = False
    for line in text.splitlines():
        if not line.strip():
            if seen_processor and any(out.values()):
                break
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "processor":
            if seen_processor and any(out.values()):
                break
            seen_processor = True
        field = _FIELDS.get(key)
        if field and not out[field]:
            out[field] = value
    return out


def read_cpu(path: str | os.PathLike = CPUINFO) -> dict[str, str]:
    """Read and parse ``path`` (default ``/proc/cpuinfo``). Raises OSError naming the path."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise OSError(f"cannot read CPU facts from {path}: {exc.strerror or exc}") from exc
    return parse_cpuinfo(text)
