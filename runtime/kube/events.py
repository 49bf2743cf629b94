"""The one Event writer of the agent and the controller (core/v1 ``Event`` as a dict).

The agent (:meth:`runtime.agent.cluster.NodeCluster.warn`: a fact a node cannot use, an allocation it
cannot read) and the controller (``InvalidSetting`` on the settings Secret, docs/concepts/settings.md
"Settings") both build their Events here and send them with :meth:`runtime.kube.applier.Applier.create`; so do
the controller's state transitions (:mod:`runtime.controller.transitions`: a node leaving or joining a
pool, a type draining, a Workload answered Retry), its rules reload
(:func:`runtime.reload.report.rules_event`) and its background audit
(:func:`runtime.controller.backgroundaudit.failed_event`), Normal or Warning as rules/controller.yaml
``events`` (a reload's: rules/reload.yaml) says.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any, Mapping

from runtime.model.rfc3339 import format_time

INVOLVED_FIELDS = ("apiVersion", "kind", "name", "namespace", "uid")
# The controller's Events' source and reporting component (docs/observability.md "Events"); the agent's is
# its own.
CONTROLLER_COMPONENT = "accelpolicy"


def warning_event(involved: Mapping[str, Any], reason: str, message: str, component: str, now: datetime,
                  name: str | None = None) -> dict:
    """A Warning Event: :func:`event` with ``type`` ``Warning``."""
    return event(involved, "Warning", reason, message, component, now, name)


def event(involved: Mapping[str, Any], type_: str, reason: str, message: str, component: str, now: datetime,
          name: str | None = None) -> dict:
    """An Event of ``type_`` (``Normal`` or ``Warning``) on ``involved`` (``apiVersion``, ``kind``,
    ``name``, optional ``namespace`` and ``uid``; a field that is None is left out) at ``now``
    (timezone-aware). Events on cluster-scoped objects go to namespace ``default``.
    ``name``: the Event's name; without one the API server generates it from ``<involved name>.``."""
    stamp = format_time(now)
    meta: dict[str, Any] = {"namespace": involved.get("namespace") or "default"}
    if name:
        meta["name"] = name
    else:
        meta["generateName"] = f"{involved['name']}."
    return {
        "apiVersion": "v1", "kind": "Event", "type": type_, "reason": reason, "message": message,
        "metadata": meta,
        "involvedObject": {k: involved.get(k) for k in INVOLVED_FIELDS if involved.get(k) is not None},
        "source": {"component": component}, "reportingComponent": component,
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    }
