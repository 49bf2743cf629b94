"""Probe failures (docs/agent.md "Probe facts"; failure handling: docs/agent.md "Choices where the spec leaves
room").

``ProbeError.kind`` says what failed: ``library`` (no NVIDIA management library: a CPU-only node or
a broken install), ``driver`` (NVML present but failing as a whole); per-device failures (a GPU off
the bus) are not errors: the probe reports that device with ``healthy: false``.
"""
from __future__ import annotations


class ProbeError(RuntimeError):
    """An accelerator probe that could not run. ``kind`` is ``library`` or ``driver``; ``cause`` the
    underlying exception (also chained as ``__cause__``)."""

    def __init__(self, kind: str, message: str, cause: BaseException | None = None):
        super().__init__(message)
        self.kind = kind
        self.cause = cause
