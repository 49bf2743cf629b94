"""The admission check's side of a Kueue Workload's status: which Workloads are ours to answer, when an
answer is due, and the server-side apply body of the answer (docs/concepts/pools-and-flavors.md "The
AdmissionCheck `gpustack-node-devices`"). Pure: ``now`` is passed in."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Mapping

from runtime.engine.policy import Policy
from runtime.engine.snapshot import name_of
from runtime.model.rfc3339 import format_time

# Kueue v1beta2 API terms (kueue.x-k8s.io/v1beta2 Workload): check states and condition types.
PENDING, READY, RETRY = "Pending", "Ready", "Retry"
QUOTA_RESERVED, EVICTED, FINISHED = "QuotaReserved", "Evicted", "Finished"
WORKLOAD_API = "kueue.x-k8s.io/v1beta2"


@dataclass(frozen=True)
class Placement:
    """Where one PodSet fits: ``node`` and the accelerator ids that hold its demand (in order)."""

    pod_set: str
    node: str
    accelerators: tuple[str, ...] = ()


@dataclass(frozen=True)
class Verdict:
    """The answer for one Workload: ``state`` ``Ready`` or ``Retry``, the rendered ``message``,
    ``placements`` (one per PodSet when Ready), ``flavor``/``pod_set`` of the first PodSet that does
    not fit (Retry), ``requeue_after_seconds`` (Retry only, rules ``retryAfterSeconds``)."""

    state: str
    message: str
    placements: tuple[Placement, ...] = ()
    flavor: str = ""
    pod_set: str = ""
    requeue_after_seconds: int | None = None


# --- which Workloads are ours to answer ------------------------------------------------------------------
def _condition_true(workload: Mapping, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in (workload.get("status") or {}).get("conditions") or [])


def check_entry(policy: Policy, workload: Mapping) -> dict | None:
    """The Workload's ``status.admissionChecks`` entry of this check (rules ``admissionCheck.name``)."""
    name = policy.queues.admissionCheck.name
    for entry in (workload.get("status") or {}).get("admissionChecks") or []:
        if entry.get("name") == name:
            return entry
    return None


def quota_reserved(workload: Mapping) -> bool:
    """Kueue holds quota for it: condition ``QuotaReserved`` True, ``status.admission`` set, and it is
    neither ``Evicted`` nor ``Finished`` (Kueue's own check controllers skip those too)."""
    return bool((workload.get("status") or {}).get("admission")) \
        and _condition_true(workload, QUOTA_RESERVED) \
        and not _condition_true(workload, EVICTED) and not _condition_true(workload, FINISHED)


def parse_time(text: str | None) -> datetime | None:
    """RFC 3339 ``2026-11-29T21:00:00Z`` -> aware datetime; None when absent or unreadable."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None


def seconds_until_due(policy: Policy, workload: Mapping, now: datetime) -> float | None:
    """When this Workload wants an answer: ``0`` now (check ``Pending``, or ``Retry`` for at least
    ``retryAfterSeconds`` while Kueue still holds the quota), the seconds left of a younger ``Retry``,
    or None (no entry, answered ``Ready``, no quota reservation)."""
    entry = check_entry(policy, workload)
    if entry is None or not quota_reserved(workload):
        return None
    state = entry.get("state")
    if state == PENDING:
        return 0.0
    if state == RETRY:
        since = parse_time(entry.get("lastTransitionTime"))
        if since is None:
            return 0.0
        left = since.timestamp() + policy.queues.admissionCheck.retryAfterSeconds - now.timestamp()
        return max(left, 0.0)
    return None


def pod_state(policy: Policy, snapshot, workload: Mapping) -> str:
    """Where the Pod that owns ``workload`` (Kueue's Pod integration) stands: ``started`` (its allocation is
    recorded, the annotation the ledger charges, docs/agent.md "The Devices object and its ledger", or it
    runs or ran), ``waiting``, ``gone`` (the owner Pod is not in ``snapshot``) or ``none`` (no owner Pod is
    named, e.g. a Job's Workload)."""
    meta = workload.get("metadata") or {}
    owners = [o for o in meta.get("ownerReferences") or [] if o.get("kind") == "Pod"]
    if not owners:
        return "none"
    pods = [p for p in (snapshot.get("Pod", o.get("name", ""), meta.get("namespace") or "") for o in owners)
            if p is not None]
    if not pods:
        return "gone"
    for pod in pods:
        if policy.key("allocation") in ((pod.get("metadata") or {}).get("annotations") or {}) or \
                (pod.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed"):
            return "started"
    return "waiting"


def promised(policy: Policy, snapshot, now: datetime) -> list[Mapping]:
    """The Workloads this check promised a node that still wait for it (docs/concepts/out-of-service.md
    "Promises"), oldest answer first: entry ``Ready``, Kueue still holds their quota (not evicted, not
    finished), answered less than ``promiseSeconds`` before ``now``, and their Pod neither started nor gone
    (a Workload no Pod owns counts until that bound)."""
    bound = policy.queues.admissionCheck.promiseSeconds
    out = []
    for workload in snapshot.list("Workload"):
        entry = check_entry(policy, workload)
        if entry is None or entry.get("state") != READY or not quota_reserved(workload):
            continue
        since = parse_time(entry.get("lastTransitionTime"))
        if since is None or now.timestamp() - since.timestamp() >= bound:
            continue
        if pod_state(policy, snapshot, workload) in ("started", "gone"):
            continue
        out.append((since.timestamp(), name_of(workload), workload))
    return [w for _, _, w in sorted(out, key=lambda t: t[:2])]


# --- the status write -----------------------------------------------------------------------------------
def check_state_apply(policy: Policy, workload: Mapping, verdict: Verdict, now: datetime) -> dict | None:
    """The server-side apply body for the Workload's ``status`` subresource, or None when the entry
    already has this state and message (idempotence).

    Shape (Kueue's ``workload.SetAdmissionCheckState`` + ``BaseSSAWorkload``, applied with field
    manager = the check's ``controllerName``, force)::

        {apiVersion: kueue.x-k8s.io/v1beta2, kind: Workload,
         metadata: {name, namespace, uid},
         status: {admissionChecks: [{name, state, message, lastTransitionTime[, requeueAfterSeconds]}]}}

    ``lastTransitionTime`` is ``now`` when the state changes, else the entry's own. Only this check's
    entry is sent: ``admissionChecks`` is a list-map keyed by ``name``, so server-side apply merges it
    and leaves the other checks' entries to their controllers. ``uid`` makes the server refuse the
    write should the Workload have been replaced meanwhile.
    """
    entry = check_entry(policy, workload) or {}
    rules = policy.queues.admissionCheck
    changed_state = entry.get("state") != verdict.state
    if not changed_state and entry.get("message") == verdict.message:
        return None  # requeueAfterSeconds is not compared: Kueue carries it over when it resets a check
    since = format_time(now) if changed_state or not entry.get("lastTransitionTime") else entry[
        "lastTransitionTime"]
    state: dict[str, Any] = {"name": rules.name, "state": verdict.state, "message": verdict.message,
                             "lastTransitionTime": since}
    if verdict.requeue_after_seconds is not None:
        state["requeueAfterSeconds"] = verdict.requeue_after_seconds
    meta = workload.get("metadata") or {}
    metadata = {"name": name_of(workload), "namespace": meta.get("namespace") or ""}
    if meta.get("uid"):
        metadata["uid"] = meta["uid"]
    return {"apiVersion": WORKLOAD_API, "kind": "Workload", "metadata": metadata,
            "status": {"admissionChecks": [state]}}
