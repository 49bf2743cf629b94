"""The steady-state check: nothing loops once a cluster has settled (docs/reliability.md, "Steady state").

:func:`observe` watches a cluster through ``kubectl`` for a while (polls every ``interval`` seconds)
and counts what a settled cluster never does:

- **Workload evictions**: the sum of Kueue's per-Workload eviction counts
  (``status.schedulingStats.evictions[].count``) rose, or a Workload's ``Evicted`` condition turned
  ``True`` again (a new ``lastTransitionTime``);
- **Instance Pods replaced**: an Instance's Pod (same name) got a new uid, or disappeared;
- **container restarts**: a container's ``restartCount`` rose, in any namespace;
- **controller writes**: an object the controller writes changed (ResourceFlavors, ClusterQueues and
  LocalQueues by labels and spec, the AdmissionCheck, InstanceTypes with their status,
  InstanceTypeFlavors, Instances' status, the Nodes' labels under the fit-label and feature prefixes):
  its idle passes must write nothing;

and at the end, **Instances in no stated phase**: every Instance must be ``Ready``, ``Stopped`` with
``spec.stop``, or carry a ``status.phaseMessage`` saying what it waits for.

Used after the walkthrough (e2e/test_walkthrough.py) and in the fault suite's closing check; the
length is ``ACCELPOLICY_STEADY_SECONDS`` (default 300; CI sets 120).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Callable

#: The Node label prefixes the controller writes (fit labels) or the agents and NFD feed; any change
#: while idle is a write.
NODE_LABEL_MARKERS = (".fit.gpustack.ai/", "feature.gpustack.ai/", "gpustack.ai/")
#: kind -> the parts of each object compared (a top-level key, or "labels" for metadata.labels).
WATCHED = {
    "resourceflavors.kueue.x-k8s.io": ("labels", "spec"),
    "clusterqueues.kueue.x-k8s.io": ("labels", "spec"),
    "localqueues.kueue.x-k8s.io": ("labels", "spec"),
    "admissionchecks.kueue.x-k8s.io": ("labels", "spec"),
    "instancetypes.worker.gpustack.ai": ("labels", "spec", "status"),
    "instancetypeflavors.worker.gpustack.ai": ("labels", "spec"),
    "instances.worker.gpustack.ai": ("status",),
}


def default_seconds() -> float:
    """``$ACCELPOLICY_STEADY_SECONDS`` (seconds), default 300."""
    return float(os.environ.get("ACCELPOLICY_STEADY_SECONDS", "300"))


@dataclass
class SteadyState:
    """What :func:`observe` saw in ``seconds`` (``polls`` polls); each list names one occurrence."""

    seconds: float
    polls: int = 0
    evictions: list[str] = field(default_factory=list)
    replaced_pods: list[str] = field(default_factory=list)
    restarts: list[str] = field(default_factory=list)
    controller_writes: list[str] = field(default_factory=list)
    unstated_instances: list[str] = field(default_factory=list)

    @property
    def steady(self) -> bool:
        return not (self.evictions or self.replaced_pods or self.restarts or self.controller_writes
                    or self.unstated_instances)

    def counts(self) -> dict[str, int]:
        """The figures a report quotes: occurrences of each kind."""
        return {"evictions": len(self.evictions), "replaced Pods": len(self.replaced_pods),
                "restarts": len(self.restarts), "idle writes": len(self.controller_writes),
                "Instances in no stated phase": len(self.unstated_instances)}

    def summary(self) -> str:
        lines = [f"steady state over {self.seconds:.0f} s ({self.polls} polls): "
                 + ", ".join(f"{k} {v}" for k, v in self.counts().items())]
        for name in ("evictions", "replaced_pods", "restarts", "controller_writes", "unstated_instances"):
            lines += [f"  {name}: {item}" for item in getattr(self, name)[:20]]
        return "\n".join(lines)


def _items(get: Callable[..., dict], resource: str) -> list[dict]:
    return (get(resource, "-A") or {}).get("items") or []


def _key(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') + '/' if meta.get('namespace') else ''}{meta.get('name')}"


def _evictions(workloads: list[dict]) -> dict[str, tuple[int, str]]:
    out = {}
    for w in workloads:
        status = w.get("status") or {}
        count = sum(int(e.get("count") or 0) for e in (status.get("schedulingStats") or {}).get("evictions") or [])
        evicted = next((c.get("lastTransitionTime", "") for c in status.get("conditions") or []
                        if c.get("type") == "Evicted" and c.get("status") == "True"), "")
        out[_key(w)] = (count, evicted)
    return out


def _restarts(pods: list[dict]) -> dict[str, int]:
    return {f"{_key(p)}:{c.get('name')}": int(c.get("restartCount") or 0)
            for p in pods for c in ((p.get("status") or {}).get("containerStatuses") or [])
            + ((p.get("status") or {}).get("initContainerStatuses") or [])}


def _written(get: Callable[..., dict]) -> dict[str, str]:
    out = {}
    for resource, parts in WATCHED.items():
        for obj in _items(get, resource):
            view = {p: ((obj.get("metadata") or {}).get("labels") if p == "labels" else obj.get(p)) for p in parts}
            out[f"{resource.split('.')[0]} {_key(obj)}"] = json.dumps(view, sort_keys=True)
    for node in _items(get, "nodes"):
        labels = {k: v for k, v in ((node.get("metadata") or {}).get("labels") or {}).items()
                  if any(m in k for m in NODE_LABEL_MARKERS)}
        out[f"node {_key(node)}"] = json.dumps(labels, sort_keys=True)
    return out


def _instance_pods(get: Callable[..., dict], instances: list[dict]) -> dict[str, str]:
    pods = {_key(p): (p.get("metadata") or {}).get("uid", "") for p in _items(get, "pods")}
    return {_key(i): pods.get(_key(i), "") for i in instances}


def _unstated(instances: list[dict]) -> list[str]:
    out = []
    for inst in instances:
        status, spec = inst.get("status") or {}, inst.get("spec") or {}
        phase = status.get("phase", "")
        if phase == "Ready" or (phase == "Stopped" and spec.get("stop")) or status.get("phaseMessage"):
            continue
        out.append(f"{_key(inst)}: phase {phase or '(none)'} without a phaseMessage")
    return out


def observe(get: Callable[..., dict], seconds: float | None = None, interval: float = 5.0) -> SteadyState:
    """Watch the cluster for ``seconds`` (default :func:`default_seconds`) through ``get(resource,
    *args) -> dict`` (``kubectl get <resource> <args> -o json``, ``{}`` when absent) and return what
    moved (module docstring). Blocks for about ``seconds``."""
    seconds = default_seconds() if seconds is None else seconds
    result = SteadyState(seconds=seconds)
    instances = _items(get, "instances.worker.gpustack.ai")
    first_evictions = _evictions(_items(get, "workloads.kueue.x-k8s.io"))
    first_restarts = _restarts(_items(get, "pods"))
    first_written = _written(get)
    first_pods = _instance_pods(get, instances)
    seen: set[str] = set()
    deadline = time.monotonic() + seconds
    while True:
        result.polls += 1
        for key, (count, evicted) in _evictions(_items(get, "workloads.kueue.x-k8s.io")).items():
            before = first_evictions.get(key, (0, ""))
            if count > before[0] or (evicted and evicted != before[1]):
                _note(result.evictions, seen, f"{key}: evictions {before[0]} -> {count}, Evicted since {evicted or '-'}")
        for key, count in _restarts(_items(get, "pods")).items():
            if count > first_restarts.get(key, 0):
                _note(result.restarts, seen, f"{key}: restartCount {first_restarts.get(key, 0)} -> {count}")
        for key, view in _written(get).items():
            if first_written.get(key, view) != view:
                _note(result.controller_writes, seen, f"{key} changed")
        for key, uid in _instance_pods(get, _items(get, "instances.worker.gpustack.ai")).items():
            if key in first_pods and uid != first_pods[key]:
                _note(result.replaced_pods, seen, f"{key}: Pod uid {first_pods[key] or '(none)'} -> {uid or '(none)'}")
        if time.monotonic() >= deadline:
            break
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))
    result.unstated_instances = _unstated(_items(get, "instances.worker.gpustack.ai"))
    return result


def _note(bucket: list[str], seen: set[str], line: str) -> None:
    key = line.split(":")[0] + bucket.__class__.__name__ + str(id(bucket))
    if key not in seen:
        seen.add(key)
        bucket.append(line)
