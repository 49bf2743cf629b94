"""Events on the objects whose state the controller changed, once per transition (docs/observability.md
"Events").

Reasons, types and message templates are ``events`` of rules/controller.yaml
(:class:`runtime.model.stateevents.StateEvents`); this module only decides when and on what:

* ``nodeLeftPool`` / ``nodeJoinedPool`` on the Node: the ResourceFlavors a node contributes to
  (``DesiredState.node_flavors``, docs/concepts/pools-and-flavors.md "ResourceFlavors: what each node
  contributes") lost or gained names since the previous pass (e.g. the seed's step 2
  ``gpustack.ai/managed=false`` flip and back). The first pass of a process only records the baseline: a
  restart does not repeat the Events of transitions already recorded.
* ``typeDraining`` on the InstanceType: the type is being deleted and the delete of its ClusterQueue
  was written (docs/concepts/pools-and-flavors.md "Queues and the entrance", seed step 4; the queue then
  drains, ``HoldAndDrain``, while Kueue's finalizer holds it); the plan holds that delete only until the queue
  is deleting.
* ``workloadRetry`` on the Workload: the ``gpustack-node-devices`` answer ``Retry`` was written
  (docs/concepts/pools-and-flavors.md "The AdmissionCheck `gpustack-node-devices`"); the message is the one
  the check gave.

Typical use (the reconciler)::

    events = TransitionEvents()
    for event in events.pool_events(policy, state.node_flavors, snapshot, now):  # after derive()
        applier.create(event)
    event = events.after_action(policy, action, snapshot, verdicts, now)  # after each written action
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Mapping

from runtime.engine import admissioncheck as ac
from runtime.engine.plan import Action, Verb
from runtime.engine.policy import Policy
from runtime.engine.snapshot import KNOWN_KINDS, Snapshot, is_deleting
from runtime.kube.events import CONTROLLER_COMPONENT, event
from runtime.model.stateevents import StateEvent



def involved(obj: Mapping, kind: str) -> dict:
    """The ``involvedObject`` fields of ``obj`` (a cluster object as a dict) of ``kind`` (one of
    :data:`runtime.engine.snapshot.KNOWN_KINDS`, whose apiVersion it takes)."""
    meta = obj.get("metadata") or {}
    return {"apiVersion": KNOWN_KINDS[kind][0], "kind": kind, "name": meta.get("name"),
            "namespace": meta.get("namespace"), "uid": meta.get("uid")}


def state_event(template: StateEvent, obj: Mapping, kind: str, now: datetime, **variables: str) -> dict:
    """The core/v1 Event of ``template`` (type, reason; message formatted with ``variables``) on
    ``obj`` of ``kind`` at ``now`` (aware datetime), reported by ``accelpolicy``; named
    ``<object>.<reason, lower case>.<now in microseconds, hex>``."""
    name = (f"{(obj.get('metadata') or {}).get('name')}.{template.reason.lower()}."
            f"{int(now.timestamp() * 1e6):x}")
    return event(involved(obj, kind), template.type, template.reason, template.message.format(**variables),
                 CONTROLLER_COMPONENT, now, name=name)


def pool_changes(before: Mapping[str, list[str]], after: Mapping[str, list[str]]
                 ) -> list[tuple[str, list[str], list[str]]]:
    """``(node, flavors left, flavors joined)`` for each node whose contribution changed between two
    ``DesiredState.node_flavors`` maps, in node-name order; both lists in name order."""
    out = []
    for node in sorted(set(before) | set(after)):
        was, now = set(before.get(node, ())), set(after.get(node, ()))
        if was != now:
            out.append((node, sorted(was - now), sorted(now - was)))
    return out


@dataclass
class TransitionEvents:
    """Remembers the previous pass's pool membership and each Workload's run of Retry answers, and
    builds the transition Events of a policy. ``retry_loops``: (namespace, name) -> pool of every
    Workload reported looping (:meth:`loop_event`) and not answered Ready since."""

    node_flavors: dict[str, list[str]] | None = None  # None until the first pass (the baseline)
    # Workload uid -> (flavor, Retries in a row)
    retries: dict[str, tuple[str, int]] = field(default_factory=dict)
    retry_loops: dict[tuple[str, str], str] = field(default_factory=dict)

    def pool_events(self, policy: Policy, node_flavors: Mapping[str, list[str]], snapshot: Snapshot,
                    now: datetime) -> list[dict]:
        """The ``nodeLeftPool`` / ``nodeJoinedPool`` Events since the previous call (none on the
        first); a Node no longer in ``snapshot`` (deleted) gets none."""
        before, self.node_flavors = self.node_flavors, dict(node_flavors)  # each pass derives new lists
        if before is None or before == node_flavors:  # the common pass: one dict comparison
            return []
        templates = policy.controller.events
        out = []
        for name, left, joined in pool_changes(before, node_flavors):
            node = snapshot.get("Node", name)
            if node is None:
                continue
            for template, flavors in ((templates.nodeLeftPool, left), (templates.nodeJoinedPool, joined)):
                if flavors:
                    out.append(state_event(template, node, "Node", now, node=name,
                                           flavors=", ".join(flavors)))
        return out

    def after_action(self, policy: Policy, action: Action, snapshot: Snapshot, verdicts: Mapping,
                     now: datetime) -> dict | None:
        """The Event a written ``action`` is a transition of, or None: the delete of the ClusterQueue of
        a deleting InstanceType (same name; the queue drains, ``HoldAndDrain`` while Kueue holds it), on
        the type; a Workload's ``Retry`` answer (``verdicts``: (namespace, name) ->
        :class:`runtime.engine.admissioncheck.Verdict`), on the Workload. ``snapshot``: the pass's."""
        templates = policy.controller.events
        if action.kind == "ClusterQueue" and action.verb == Verb.DELETE:
            typ = snapshot.get("InstanceType", action.name)
            if typ is None or not is_deleting(typ):
                return None
            return state_event(templates.typeDraining, typ, "InstanceType", now, type=action.name,
                               queue=action.name)
        if action.kind == "Workload":
            verdict = verdicts.get((action.namespace, action.name))
            workload = snapshot.get("Workload", action.name, action.namespace)
            if verdict is None or workload is None or verdict.state != ac.RETRY:
                return None
            return state_event(templates.workloadRetry, workload, "Workload", now,
                               check=policy.queues.admissionCheck.name, message=verdict.message)
        return None

    def loop_event(self, policy: Policy, action: Action, snapshot: Snapshot, verdicts: Mapping,
                   now: datetime) -> dict | None:
        """After a written Workload answer: counts the Retries on one flavor in a row (a Ready or another
        flavor starts again), and at ``admissionCheck.retryLoopAfter`` of them, when another flavor of
        the pool holds a node that can take the Workload
        (:func:`runtime.engine.admissioncheck.flavor_that_holds`), the ``workloadRetryLoop`` Event on
        the Workload, once per run. None otherwise."""
        if action.kind != "Workload":
            return None
        key = (action.namespace, action.name)
        verdict, workload = verdicts.get(key), snapshot.get("Workload", action.name, action.namespace)
        if verdict is None or workload is None:
            return None
        uid = (workload.get("metadata") or {}).get("uid") or f"{key}"
        if verdict.state != ac.RETRY:
            self.retries.pop(uid, None)
            self.retry_loops.pop(key, None)
            return None
        flavor, count = self.retries.get(uid, ("", 0))
        count = count + 1 if flavor == verdict.flavor else 1
        self.retries[uid] = (verdict.flavor, count)
        check = policy.queues.admissionCheck
        if count != check.retryLoopAfter:
            return None
        held = ac.flavor_that_holds(policy, snapshot, workload, verdict)
        if held is None:
            return None
        pool = ((workload.get("status") or {}).get("admission") or {}).get("clusterQueue", "")
        self.retry_loops[key] = pool
        return state_event(policy.controller.events.workloadRetryLoop, workload, "Workload", now,
                           check=check.name, flavor=verdict.flavor, count=str(count), other=held[0],
                           pool=pool, node=held[1])
