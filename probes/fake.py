"""The recorded-facts backend (docs/agent.md "Probe facts"): the NVML probe's interface fed from a YAML
or JSON document, so the agent runs without a GPU.

Selected with ``--backend fake --facts FILE`` or ``ACCELPOLICY_NVML_BACKEND=fake`` +
``ACCELPOLICY_RECORDED_FACTS=FILE`` (see :func:`probes.backend.select_backend`). Recorded documents
for the seed nodes and the spec's MIG layouts live in ``probes/recorded/``. For failure tests,
:meth:`RecordedBackend.fail` makes the next probes raise like NVML would, :meth:`lose` marks a
device as fallen off the bus, :meth:`recover` undoes both.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

from probes.errors import ProbeError
from runtime.model.facts import parse_facts

RECORDED_DIR = Path(__file__).resolve().parent / "recorded"


def load_document(path: str | Path) -> dict[str, Any]:
    """Read one facts document (YAML or JSON). Raises ValueError naming the file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{p}: cannot read recorded facts: {exc.strerror or exc}") from exc
    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ValueError(f"{p}: not a YAML/JSON document: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{p}: a facts document must be a mapping")
    return data


def recorded(name: str) -> Path:
    """Path of a bundled recorded document by stem (``node-a10g`` -> probes/recorded/node-a10g.yaml)."""
    path = RECORDED_DIR / f"{name}.yaml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in RECORDED_DIR.glob("*.yaml")))
        raise ValueError(f"no recorded facts {name!r} in {RECORDED_DIR} (known: {known})")
    return path


class RecordedBackend:
    """Same interface as :class:`probes.nvml.NvmlBackend`, plus the document's CPU facts."""

    name = "fake"

    def __init__(self, path: str | Path | None = None, document: dict[str, Any] | None = None):
        if document is None:
            if path is None:
                raise ValueError(
                    "the fake backend needs recorded facts: --facts FILE or ACCELPOLICY_RECORDED_FACTS")
            document = load_document(path)
        self.source = str(path) if path is not None else "<document>"
        parse_facts(document, self.source)  # FactsError naming file and field: a wrong shape is not "no GPUs"
        self.document = document
        self._failure: ProbeError | None = None
        self._lost: set[str] = set()

    @property
    def node(self) -> str:
        return str(self.document.get("node") or "")

    def cpu(self) -> dict[str, Any] | None:
        """The recorded ``cpu`` mapping (None when the document has none)."""
        cpu = self.document.get("cpu")
        return dict(cpu) if isinstance(cpu, dict) else None

    def accelerators(self) -> list[dict[str, Any]]:
        """The recorded accelerators, lost devices marked unhealthy; raises an injected failure."""
        if self._failure is not None:
            raise self._failure
        out = copy.deepcopy(self.document.get("accelerators") or [])
        for acc in out:
            if isinstance(acc, dict) and acc.get("uuid") in self._lost:
                acc["healthy"] = False
        return out

    # -- failure injection ------------------------------------------------------------------------
    def fail(self, kind: str = "driver", message: str = "NVML_ERROR_DRIVER_NOT_LOADED") -> None:
        """Make every following probe raise ``ProbeError(kind, message)`` until :meth:`recover`."""
        self._failure = ProbeError(kind, message, RuntimeError(message))

    def lose(self, uuid: str) -> None:
        """Report device ``uuid`` as fallen off the bus (``healthy: false``) until :meth:`recover`."""
        self._lost.add(uuid)

    def recover(self) -> None:
        self._failure = None
        self._lost.clear()
