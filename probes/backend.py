"""Choosing the accelerator backend and collecting one node's facts document (docs/agent.md "Probe facts").

``select_backend(name, facts)``: ``name`` ``real`` (default, pynvml) or ``fake`` (recorded facts);
when not given, env ``ACCELPOLICY_NVML_BACKEND`` and ``ACCELPOLICY_RECORDED_FACTS`` decide.
"""
from __future__ import annotations

import os
from typing import Any, Protocol

from probes.cpu import CPUINFO, read_cpu
from probes.fake import RecordedBackend
from probes.nvml import NvmlBackend

BACKEND_ENV = "ACCELPOLICY_NVML_BACKEND"
FACTS_ENV = "ACCELPOLICY_RECORDED_FACTS"
BACKENDS = ("real", "fake")


class AcceleratorBackend(Protocol):
    """What the agent needs from a probe backend."""

    name: str

    def cpu(self) -> dict[str, Any] | None: ...

    def accelerators(self) -> list[dict[str, Any]]: ...


def select_backend(name: str | None = None, facts: str | None = None) -> AcceleratorBackend:
    """The backend named by ``name`` (else env), fed by ``facts`` (else env) for ``fake``.

    Raises ValueError for an unknown name or a fake backend without facts.
    """
    name = name or os.environ.get(BACKEND_ENV) or "real"
    if name not in BACKENDS:
        raise ValueError(f"unknown probe backend {name!r} (known: {', '.join(BACKENDS)}; env {BACKEND_ENV})")
    if name == "fake":
        return RecordedBackend(facts or os.environ.get(FACTS_ENV) or None)
    return NvmlBackend()


def cpu_facts(backend: AcceleratorBackend, cpuinfo: str = CPUINFO) -> dict[str, Any]:
    """The backend's recorded CPU facts, else ``/proc/cpuinfo`` (path injectable)."""
    recorded = backend.cpu()
    return recorded if recorded is not None else read_cpu(cpuinfo)
