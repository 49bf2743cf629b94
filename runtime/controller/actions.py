"""The controller's writes: one handler per plan :class:`~runtime.engine.plan.Verb` (the dispatch table).

:class:`ActionWriter` runs a planned :class:`~runtime.engine.plan.Action` through an
:class:`runtime.kube.applier.Applier`: apply, status apply, the Workload check state (server-side apply
as the check's ``controllerName``), create (a LocalQueue with its ClusterQueue owner reference,
docs/concepts/pools-and-flavors.md "Queues and the entrance"), merge patch, delete, recreate, and the
finalizers of :data:`FINALIZER_ROLES` (JSON patches guarded by a ``test`` op); and it records Events.
A new Verb needs its handler in ``_handlers`` here.
"""
from __future__ import annotations

from typing import Callable

from loguru import logger

from runtime.engine.plan import Action, Verb
from runtime.engine.policy import Policy
from runtime.engine.snapshot import name_of
from runtime.kube.applier import Applier
from runtime.kube.clustercache import ClusterCache
from runtime.kube.session import KubeApiError

# Which finalizer (label-catalog key role) the controller keeps on each kind.
FINALIZER_ROLES = {"InstanceType": "finalizer", "Instance": "instanceFinalizer"}


class ActionWriter:
    """Runs planned Actions through ``applier``; ``cache`` gives the live objects a handler reads (the
    ClusterQueue a LocalQueue is owned by, the object a recreate deletes); ``policy_source`` the rules
    generation in force (the finalizer names, the check's field manager).

    A handler raises :class:`runtime.kube.session.KubeApiError` or ``RuntimeError`` on failure (the
    pass records it and retries); an unknown verb is a ``RuntimeError``.
    """

    def __init__(self, applier: Applier, cache: ClusterCache, policy_source: Callable[[], Policy]):
        self.applier = applier
        self.cache = cache
        self._policy_source = policy_source

    @property
    def policy(self) -> Policy:
        """The rules generation in force (the pass's while one runs)."""
        return self._policy_source()

    def execute(self, action: Action) -> None:
        """Run one planned write through the handler of its :class:`Verb` (the dispatch table)."""
        handler = self._handlers.get(action.verb)
        if handler is None:
            raise RuntimeError(f"unknown action verb {action.verb}")
        handler(self, action)

    def create_event(self, event: dict) -> None:
        """Record one Event; a refused write is logged, never raised (an Event never fails a pass)."""
        try:
            self.applier.create(event)
        except KubeApiError as exc:
            logger.warning("{} event on {} {}: {}", event["reason"], event["involvedObject"]["kind"],
                           event["involvedObject"]["name"], exc)

    def _apply_check_state(self, action: Action) -> None:
        """Server-side apply of one Workload's check entry on its ``status`` subresource, field manager
        = the check's ``controllerName`` (as Kueue's admission-check controllers write)."""
        self.applier.apply_status(action.body,
                                  field_manager=self.policy.queues.admissionCheck.controllerName,
                                  keep_uid=True)

    def _do_apply(self, action: Action) -> None:
        self.applier.apply(action.body)

    def _do_apply_status(self, action: Action) -> None:
        self.applier.apply_status(action.body)

    def _do_create(self, action: Action) -> None:
        self.applier.create(self._with_owner(action.body) if action.kind == "LocalQueue" else action.body)

    def _do_patch(self, action: Action) -> None:
        self.applier.merge_patch(action.kind, action.name, action.body, action.namespace)

    def _do_delete(self, action: Action) -> None:
        self.applier.delete(action.body)

    def _do_recreate(self, action: Action) -> None:
        live = self.cache.get(action.kind, action.name)
        if live is not None:
            self.applier.delete(live)
        if self.applier.get(action.kind, action.name) is None:
            self.applier.apply(action.body)
        # else: still held by a finalizer; its DELETED event brings the next reconcile.

    def _do_remove_finalizer(self, action: Action) -> None:
        finalizers = action.body["metadata"].get("finalizers") or []
        index = finalizers.index(self.policy.key(FINALIZER_ROLES[action.kind]))
        self.applier.json_patch(action.kind, action.name, [
            {"op": "test", "path": f"/metadata/finalizers/{index}", "value": finalizers[index]},
            {"op": "remove", "path": f"/metadata/finalizers/{index}"}], action.namespace)

    def _do_add_finalizer(self, action: Action) -> None:
        finalizers = action.body["metadata"].get("finalizers")
        finalizer = self.policy.key(FINALIZER_ROLES[action.kind])
        ops = [{"op": "test", "path": "/metadata/finalizers", "value": finalizers},
               {"op": "add", "path": "/metadata/finalizers/-", "value": finalizer}] if finalizers else \
            [{"op": "add", "path": "/metadata/finalizers", "value": [finalizer]}]
        self.applier.json_patch(action.kind, action.name, ops, action.namespace)

    _handlers = {
        Verb.APPLY: _do_apply, Verb.APPLY_STATUS: _do_apply_status,
        Verb.APPLY_CHECK_STATE: _apply_check_state, Verb.CREATE: _do_create, Verb.PATCH: _do_patch,
        Verb.DELETE: _do_delete, Verb.RECREATE: _do_recreate, Verb.REMOVE_FINALIZER: _do_remove_finalizer,
        Verb.ADD_FINALIZER: _do_add_finalizer,
    }

    def _with_owner(self, lq: dict) -> dict:
        """A LocalQueue with the controller owner reference to its ClusterQueue."""
        queue_name = lq["spec"]["clusterQueue"]
        queue = self.cache.get("ClusterQueue", queue_name)
        uid = (queue or {}).get("metadata", {}).get("uid")
        if not uid:
            raise RuntimeError(f"LocalQueue {name_of(lq)}: ClusterQueue {queue_name} has no uid yet")
        body = {**lq, "metadata": {**lq["metadata"], "ownerReferences": [{
            "apiVersion": queue.get("apiVersion", "kueue.x-k8s.io/v1beta2"), "kind": "ClusterQueue",
            "name": queue_name, "uid": uid, "controller": True, "blockOwnerDeletion": True}]}}
        return body
