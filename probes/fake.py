"""The recorded-facts backend (docs/agent.md "Probe facts"): the NVML probe's interface fed from a YAML
or JSON document, so the agent runs without a GPU.

Selected with ``--backend fake --facts FILE`` or ``ACCELPOLICY_NVML_BACKEND=fake`` +
``ACCELPOLICY_RECORDED_FACTS=FILE`` (see :func:`probes.backend.select_backend`). Recorded documents
for the seed nodes and the spec's MIG layouts live in ``probes/recorded/``. For failure tests,
:meth:`RecordedBackend.fail` makes the next probes raise like NVML would, :meth:`lose` marks a
device as fallen off the bus, :meth:`inject` adds health facts to a device (an XID event read once, an
ECC counter, a pending row remap: docs/concepts/out-of-service.md "Health"), :meth:`recover` undoes them.
A document read from a file is read again when the file changes (its modification time), so a test can
inject facts into an agent running in another process by rewriting the file (an accelerator's ``health``).
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
        self._path = Path(path) if path is not None else None
        self._stamp = self._path.stat().st_mtime_ns if self._path is not None else None
        self._failure: ProbeError | None = None
        self._lost: set[str] = set()
        self._health: dict[str, dict[str, Any]] = {}   # uuid -> injected health facts
        self._events: dict[str, list[int]] = {}        # uuid -> XIDs read once (events)

    @property
    def node(self) -> str:
        return str(self.document.get("node") or "")

    def cpu(self) -> dict[str, Any] | None:
        """The recorded ``cpu`` mapping (None when the document has none)."""
        cpu = self.document.get("cpu")
        return dict(cpu) if isinstance(cpu, dict) else None

    def accelerators(self) -> list[dict[str, Any]]:
        """The recorded accelerators (the file read again when it changed), lost devices marked unhealthy,
        injected health facts and XID events added (each event read once); raises an injected failure, or a
        ``ProbeError`` naming the file when a changed file does not read."""
        if self._failure is not None:
            raise self._failure
        self._reload()
        out = copy.deepcopy(self.document.get("accelerators") or [])
        for acc in out:
            if not isinstance(acc, dict):
                continue
            uuid = acc.get("uuid")
            if uuid in self._lost:
                acc["healthy"] = False
            if uuid in self._health or uuid in self._events:
                health = acc.setdefault("health", {})
                health.update(self._health.get(uuid, {}))
                health["xids"] = list(health.get("xids") or []) + self._events.pop(uuid, [])
        return out

    def _reload(self) -> None:
        if self._path is None:
            return
        try:
            stamp = self._path.stat().st_mtime_ns
            if stamp == self._stamp:
                return
            document = load_document(self._path)
            parse_facts(document, self.source)
        except (OSError, ValueError) as exc:
            raise ProbeError("driver", f"recorded facts {self._path}: {exc}", exc) from exc
        self.document, self._stamp = document, stamp

    # -- failure injection ------------------------------------------------------------------------
    def fail(self, kind: str = "driver", message: str = "NVML_ERROR_DRIVER_NOT_LOADED") -> None:
        """Make every following probe raise ``ProbeError(kind, message)`` until :meth:`recover`."""
        self._failure = ProbeError(kind, message, RuntimeError(message))

    def lose(self, uuid: str) -> None:
        """Report device ``uuid`` as fallen off the bus (``healthy: false``) until :meth:`recover`."""
        self._lost.add(uuid)

    def inject(self, uuid: str, xid: int | None = None, **facts: Any) -> None:
        """Add health facts to device ``uuid`` until :meth:`recover`: ``xid`` an XID event read by the next
        probe only; ``facts`` kept (``eccUncorrectableVolatile=2``, ``remappedRowsPending=True``, ...: the
        fields of runtime/model/facts.py ``HealthFacts``)."""
        if xid is not None:
            self._events.setdefault(uuid, []).append(int(xid))
        if facts:
            self._health.setdefault(uuid, {}).update(facts)

    def recover(self) -> None:
        self._failure = None
        self._lost.clear()
        self._health.clear()
        self._events.clear()
