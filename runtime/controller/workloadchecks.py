"""Answers of the ``gpustack-node-devices`` AdmissionCheck, planned per reconcile
(docs/concepts/pools-and-flavors.md "The AdmissionCheck `gpustack-node-devices`").

Pure, like :mod:`runtime.engine.plan`: :func:`plan_workload_checks` reads the watch cache's
:class:`Snapshot` (Workloads, Nodes, NodeFeatures, Devices, ResourceFlavors) and ``now`` and returns
one ``apply-check-state`` :class:`Action` per Workload whose entry must change:

* a Workload is judged when Kueue holds its quota (``QuotaReserved`` True, ``status.admission`` set,
  not ``Evicted``/``Finished``) and its entry for the check is ``Pending`` — or ``Retry`` for at least
  ``retryAfterSeconds`` (rules/pools/queues.yaml) while the quota is still held (a real
  Kueue evicts a Retry at once and resets the check to ``Pending``; without it the controller looks
  again itself);
* the verdict is :func:`runtime.engine.admissioncheck.check_workload`'s, against the nodes less what
  the check promised and is not started yet (:func:`runtime.engine.admissioncheck.promised`, charged oldest
  first) and less what earlier Ready answers of this pass placed (docs/concepts/out-of-service.md
  "Promises"); the write is
  :func:`runtime.engine.admissioncheck.check_state_apply`'s body, planned only when the entry
  differs, so a second reconcile plans nothing;
* ``requeue``: seconds until the youngest ``Retry`` falls due (None when none waits), so the
  reconcile loop comes back without an event.

The controller executes the action as a server-side apply of the ``status`` subresource with field
manager = the check's ``controllerName`` (``worker.gpustack.ai/node-devices``), force — as Kueue's
own admission-check controllers write (``workload.PatchStatus``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from runtime.engine import admissioncheck as ac
from runtime.engine.plan import Action, Verb
from runtime.engine.policy import Policy
from runtime.engine.snapshot import Snapshot, name_of, object_ref

VERB = Verb.APPLY_CHECK_STATE


@dataclass
class WorkloadCheckPlan:
    """``actions`` (one per Workload to answer), ``verdicts`` by ``(namespace, name)`` for every
    Workload judged this pass, ``requeue`` seconds (None: nothing waits), ``errors`` (Workloads that
    could not be read, one line each)."""

    actions: list[Action] = field(default_factory=list)
    verdicts: dict[tuple[str, str], ac.Verdict] = field(default_factory=dict)
    requeue: float | None = None
    errors: list[str] = field(default_factory=list)


def plan_workload_checks(policy: Policy, snapshot: Snapshot, now: datetime,
                         namespace: str | None = None) -> WorkloadCheckPlan:
    """The check answers to write for ``snapshot``'s Workloads at time ``now`` (aware datetime).
    ``namespace``: the system namespace whose NodeFeatures count (decision 20; None: the rules')."""
    out = WorkloadCheckPlan()
    retry = policy.queues.admissionCheck.retryAfterSeconds
    nodes = None
    for workload in snapshot.list("Workload"):
        due = ac.seconds_until_due(policy, workload, now)
        if due is None:
            continue
        if due > 0:
            out.requeue = due if out.requeue is None else min(out.requeue, due)
            continue
        if nodes is None:
            nodes = _promised_nodes(policy, snapshot, now, namespace)
        try:
            verdict = ac.check_workload(policy, snapshot, workload, nodes)
        except ac.AdmissionCheckError as exc:
            out.errors.append(str(exc))
            continue
        key = ((workload.get("metadata") or {}).get("namespace") or "", name_of(workload))
        out.verdicts[key] = verdict
        if verdict.state == ac.READY:
            ac.charge(policy, snapshot, nodes, workload, verdict)
        if verdict.state == ac.RETRY:
            out.requeue = retry if out.requeue is None else min(out.requeue, retry)
        body = ac.check_state_apply(policy, workload, verdict, now)
        if body is not None:
            out.actions.append(Action(VERB, "Workload", key[1], key[0], body=body,
                                      reason=f"{object_ref(workload)}: {verdict.state}: {verdict.message}"))
    return out


def _promised_nodes(policy: Policy, snapshot: Snapshot, now: datetime, namespace: str | None):
    """The managed nodes less what the check promised and is not started yet: each promised Workload
    placed again, oldest answer first, and what it places charged. A promise that no longer fits (its
    node filled meanwhile) holds nothing."""
    nodes = ac.managed_nodes(policy, snapshot, namespace)
    for workload in ac.promised(policy, snapshot, now):
        try:
            verdict = ac.check_workload(policy, snapshot, workload, nodes)
        except ac.AdmissionCheckError:
            continue
        if verdict.state == ac.READY:
            ac.charge(policy, snapshot, nodes, workload, verdict)
    return nodes
