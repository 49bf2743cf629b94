"""The one Warning Event writer of the agent and the controller (core/v1 ``Event`` as a dict).

The agent (:meth:`runtime.agent.cluster.NodeCluster.warn`: a fact a node cannot use, an allocation it
cannot read) and the controller (``InvalidSetting`` on the settings Secret, spec/settings.md §1)
both build their Events here and send them with :meth:`runtime.kube.applier.Applier.create`.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any, Mapping

INVOLVED_FIELDS = ("apiVersion", "kind", "name", "namespace", "uid")


def warning_event(involved: Mapping[str, Any], reason: str, message: str, component: str, now: datetime,
                  name: str | None = None) -> dict:
    """A Warning Event on ``involved`` (``apiVersion``, ``kind``, ``name``, optional ``namespace`` and
    ``uid``) at ``now`` (timezone-aware). Events on cluster-scoped objects go to namespace ``default``.
    ``name``: the Event's name; without one the API server generates it from ``<involved name>.``."""
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    meta: dict[str, Any] = {"namespace": involved.get("namespace") or "default"}
    if name:
        meta["name"] = name
    else:
        meta["generateName"] = f"{involved['name']}."
    return {
        "apiVersion": "v1", "kind": "Event", "type": "Warning", "reason": reason, "message": message,
        "metadata": meta,
        "involvedObject": {k: involved.get(k) for k in INVOLVED_FIELDS if involved.get(k) is not None},
        "source": {"component": component}, "reportingComponent": component,
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    }
