"""Where the one verdict per rules generation lives: annotations on the rules ConfigMap
(docs/rule-authoring.md "How a rules change goes live").

The controller's leader writes (merge patch, nothing else of the ConfigMap is touched); every other
component only reads. The keys are the ``annotations`` of rules/reload.yaml:

- ``verdict``: ``<outcome>:<generation>``, outcome ``accepted``, ``refused``, ``held`` or ``approved``
  (a held one an operator approved), generation its content hash id; the one verdict every component
  follows;
- ``status``: the leader's words on the latest generation tried (in force, why refused, why held and how
  to approve it);
- ``serving`` and ``parent``: the generation in force and the one it replaced;
- ``approve`` (and ``approvedBy``): set by an operator, ``kubectl annotate`` or ``accelpolicy approve``, to
  the id of a held generation.

Reads go through :meth:`Board.read` (at most once per ``min_seconds``: an agent on every node reads it
rarely).

**The serving copy.** The mounted rules are whatever the ConfigMap holds now, a held or refused edit
included; the generation that serves is kept apart, in the ConfigMap ``<name>-serving`` (the rule files,
one key per file, ``/`` written ``__`` as the chart writes them; its ``serving`` annotation names the
generation), written by the leader whenever a generation goes live (:meth:`Board.save_serving`). A process
that starts while the mounted rules are not the generation in force starts on that copy
(:meth:`Board.load_serving`, :func:`runtime.reload.holder.starting_rules`) and follows the verdict on the
mounted ones like any change: a restart never serves what the verdict holds or refused.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from loguru import logger

from runtime.kube.session import KubeApiError
from runtime.rules.loader import iter_rule_files

OUTCOMES = ("accepted", "refused", "held", "approved")
SERVING_SUFFIX = "-serving"   # the serving copy's name: the rules ConfigMap's and this
SERVED = ("accepted", "approved")
MAX_STATUS_LINES = 10


@dataclass(frozen=True)
class Verdict:
    """One recorded verdict: ``outcome`` (:data:`OUTCOMES`) on ``generation`` (an id)."""

    outcome: str
    generation: str

    def __str__(self) -> str:
        return f"{self.outcome}:{self.generation}"

    @property
    def served(self) -> bool:
        return self.outcome in SERVED

    @classmethod
    def parse(cls, text: Optional[str]) -> Optional["Verdict"]:
        """``accepted:3f2a9c1d0b7e`` -> Verdict; None for anything else."""
        outcome, sep, generation = (text or "").partition(":")
        return cls(outcome, generation) if sep and outcome in OUTCOMES and generation else None


@dataclass(frozen=True)
class Approval:
    """An operator's approval: the ``generation`` named, ``by`` whom and ``at`` when as far as the
    ConfigMap says (its ``approvedBy`` annotation, else the field manager that set it; the managed
    field's time)."""

    generation: str
    by: str
    at: str


def approval_of(configmap: dict, keys) -> Optional[Approval]:
    """The approval ``configmap`` carries (``keys``: the ReloadGate ``annotations``), or None."""
    meta = configmap.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    named = (annotations.get(keys.approve) or "").strip()
    if not named:
        return None
    by, at = annotations.get(keys.approvedBy) or "", ""
    field = f"f:{keys.approve}"
    for entry in meta.get("managedFields") or []:
        if field in ((entry.get("fieldsV1") or {}).get("f:metadata") or {}).get("f:annotations", {}):
            by, at = by or entry.get("manager", ""), entry.get("time", "")
    return Approval(named, by or "unknown", at or "unknown")


class Board:
    """The rules ConfigMap ``namespace``/``name`` read through ``session`` and written (the leader only)
    through ``applier`` (module docstring). ``keys()``: the ReloadGate ``annotations`` of the generation
    in force; ``min_seconds``: the least time between two reads (a read in between returns the last)."""

    def __init__(self, session, namespace: str, name: str, keys: Callable[[], object], applier=None,
                 min_seconds: float = 0.0, clock: Callable[[], float] = time.monotonic):
        self.session, self.namespace, self.name, self.keys = session, namespace, name, keys
        self.applier, self.min_seconds, self.clock = applier, min_seconds, clock
        self._last: Optional[tuple[float, dict]] = None

    def read(self) -> dict:
        """The ConfigMap (``{}`` when it does not exist); raises
        :class:`~runtime.kube.session.KubeApiError` when it cannot be read."""
        now = self.clock()
        if self._last is not None and now - self._last[0] < self.min_seconds:
            return self._last[1]
        try:
            configmap = self.session.call("get", self.session.ref("ConfigMap").path(namespace=self.namespace,
                                                                                    name=self.name))
        except KubeApiError as exc:
            if exc.status != 404:
                raise
            configmap = {}
        self._last = (now, configmap)
        return configmap

    def annotations(self, configmap: dict) -> dict[str, str]:
        return (configmap.get("metadata") or {}).get("annotations") or {}

    def verdict(self, configmap: dict) -> Optional[Verdict]:
        """The verdict recorded on ``configmap`` (a :meth:`read`), or None."""
        return Verdict.parse(self.annotations(configmap).get(self.keys().verdict))

    def approval(self, configmap: dict) -> Optional[Approval]:
        return approval_of(configmap, self.keys())

    def record(self, verdict: Optional[Verdict] = None, status: Optional[list[str]] = None,
               serving: Optional[str] = None, parent: Optional[str] = None) -> None:
        """Write what is given (the leader's job); a failed write is logged (the next decision writes
        again), never raised. ``status``: its lines, the first :data:`MAX_STATUS_LINES`."""
        keys, values = self.keys(), {}
        if verdict is not None:
            values[keys.verdict] = str(verdict)
        if status is not None:
            shown = status[:MAX_STATUS_LINES] + ([f"... and {len(status) - MAX_STATUS_LINES} more"]
                                                 if len(status) > MAX_STATUS_LINES else [])
            values[keys.status] = "\n".join(shown)
        if serving is not None:
            values[keys.serving] = serving
        if parent is not None:
            values[keys.parent] = parent
        if not values or self.applier is None:
            return
        try:
            self.applier.merge_patch("ConfigMap", self.name, {"metadata": {"annotations": values}},
                                     self.namespace)
            self._last = None
        except KubeApiError as exc:
            logger.warning("rules verdict on ConfigMap {}/{}: {}", self.namespace, self.name, exc)

    @property
    def serving_name(self) -> str:
        return self.name + SERVING_SUFFIX

    def save_serving(self, root: Path, generation: str) -> None:
        """The leader: the rule files under ``root`` (the generation ``generation`` that now serves) into the
        serving copy (server-side apply); a failure is logged (the next install writes it again)."""
        data = {str(p.relative_to(root)).replace("/", "__"): p.read_text()
                for p in iter_rule_files(Path(root))}
        body = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": self.serving_name, "namespace": self.namespace,
                             "annotations": {self.keys().serving: generation}}, "data": data}
        if self.applier is None:
            return
        try:
            self.applier.apply(body)
        except KubeApiError as exc:
            logger.warning("rules serving copy ConfigMap {}/{}: {}", self.namespace, self.serving_name, exc)

    def load_serving(self, into: Path) -> Optional[str]:
        """The serving copy's files written under ``into``; returns the generation it names, or None when
        there is no copy (or it cannot be read: logged)."""
        try:
            path = self.session.ref("ConfigMap").path(namespace=self.namespace, name=self.serving_name)
            copy = self.session.call("get", path)
        except KubeApiError as exc:
            if exc.status != 404:
                logger.warning("rules serving copy ConfigMap {}/{}: {}", self.namespace, self.serving_name,
                               exc)
            return None
        for key, text in (copy.get("data") or {}).items():
            path = Path(into) / key.replace("__", "/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        return ((copy.get("metadata") or {}).get("annotations") or {}).get(self.keys().serving)

    def approve_command(self, generation: str) -> str:
        """The command that approves ``generation``."""
        return f"accelpolicy approve {generation} --namespace {self.namespace} --configmap {self.name}"
