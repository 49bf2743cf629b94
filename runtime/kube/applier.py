"""Writes to the API server on behalf of the controller, counted and guarded.

* :meth:`Applier.apply`: server-side apply (field manager ``accelpolicy``, ``force=true`` so our
  fields are ours even where another manager set them). Fields we applied before and leave out
  are removed by the server; fields of other managers stay.
* :meth:`Applier.apply_status`: the same through the ``status`` subresource.
* :meth:`Applier.create`: create-only objects (derived InstanceTypes, LocalQueues): POST, and
  ``AlreadyExists`` is not an error (returns None).
* :meth:`Applier.merge_patch` / :meth:`Applier.json_patch`: pruning keys other managers own,
  finalizer removal and the Node fit labels (docs/agent.md "Capacity and fit labels"; only those keys are
  sent); the agent's Node annotations, Node capacity (``subresource="status"``) and Pod allocation
  annotations.
* :meth:`Applier.update` / :meth:`Applier.update_status`: the agent's objects (NodeFeatures, Devices,
  docs/agent.md "Labels, annotations and NodeFeatures" and "The Devices object and its ledger"): create, or
  replace labels, ownerReferences and the named fields wholesale (PUT, keeping the resourceVersion), so keys
  another writer added are removed too.
* :meth:`Applier.delete`: only objects accelpolicy owns (:func:`owned`): ResourceFlavors labelled
  ``resource.gpustack.ai/type: nodes``, InstanceTypeFlavors, ClusterQueues labelled
  ``resource.gpustack.ai/type: instancetypes``, LocalQueues annotated ``schedule.gpustack.ai/queue``,
  Pods whose controller ownerReference is an Instance (docs/concepts/instances.md "The Instance's Pod"; the
  Instance reconciler also checks it is *that* Instance). InstanceTypes are never deleted
  (docs/concepts/pools-and-flavors.md "Pools: InstanceType + ClusterQueue of one name"). Anything else raises
  :class:`NotOwnedError`. With ``owner`` (the agent's Node): only an object whose controller ownerReference is
  that owner (:func:`runtime.engine.ownership.owned_by`).

``409 Conflict`` (a stale resourceVersion), ``429`` and ``5xx`` answers are retried with tenacity
(5 attempts, exponential wait). Every successful write is appended to :attr:`Applier.writes` (the
process's log: every thread's writes) and, when a cache is given, written through to it;
:meth:`Applier.recording` also collects the writes of chosen threads (one reconcile pass's, apart from
the background audit's or a rules reload's made meanwhile).
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential

from runtime.engine.ownership import owned, owned_by
from runtime.engine.policy import Policy
from runtime.kube.session import APPLY_PATCH, JSON_PATCH, MERGE_PATCH, KubeApiError, Session

FIELD_MANAGER = "accelpolicy"


class NotOwnedError(RuntimeError):
    """A delete of an object accelpolicy does not own was refused (a bug in the caller)."""


@dataclass(frozen=True)
class Write:
    """One successful mutating request: ``verb`` (apply, apply-status, create, patch, delete)."""

    verb: str
    kind: str
    name: str
    namespace: str = ""


def _transient(exc: BaseException) -> bool:
    if not isinstance(exc, KubeApiError):
        return False
    if exc.status == 409:
        return exc.reason != "AlreadyExists"
    return exc.status in (429, 500, 502, 503, 504)


_retry = retry(retry=retry_if_exception(_transient), stop=stop_after_attempt(5),
               wait=wait_exponential(multiplier=0.1, max=2.0), reraise=True)
# update(): AlreadyExists too (a create raced with another writer): the retry reads the object again
_retry_update = retry(retry=retry_if_exception(lambda exc: _transient(exc) or (
    isinstance(exc, KubeApiError) and exc.status == 409)), stop=stop_after_attempt(5),
    wait=wait_exponential(multiplier=0.1, max=2.0), reraise=True)
# update(reread_on_conflict=False): a 409 is the caller's (it planned from ``current``); only 429/5xx retried
_retry_unavailable = retry(retry=retry_if_exception(lambda exc: isinstance(exc, KubeApiError) and
                                                    exc.status in (429, 500, 502, 503, 504)),
                           stop=stop_after_attempt(5), wait=wait_exponential(multiplier=0.1, max=2.0),
                           reraise=True)
UNREAD = object()   # update(current=UNREAD): read the object from the server


class Applier:
    """Mutating calls for one :class:`Session`; ``cache`` (a ClusterCache) receives the answers.

    ``policy``: the rules generation deciding what accelpolicy owns (:meth:`delete`); or
    ``policy_source``, a callable asked at each use (the controller's: the generation of the pass in
    progress, so a reload never swaps it under a pass)."""

    def __init__(self, session: Session, policy: Policy, cache=None, field_manager: str = FIELD_MANAGER,
                 policy_source: Optional[Callable[[], Policy]] = None):
        self.session = session
        self._policy = policy
        self._policy_source = policy_source
        self.cache = cache
        self.field_manager = field_manager
        self.writes: list[Write] = []
        self._lock = threading.Lock()
        self._local = threading.local()  # .logs: the recording() lists of this thread

    @property
    def policy(self) -> Policy:
        """The rules generation in force for this applier (see the class docstring)."""
        return self._policy_source() if self._policy_source is not None else self._policy

    @policy.setter
    def policy(self, policy: Policy) -> None:
        self._policy, self._policy_source = policy, None

    @contextmanager
    def recording(self, log: list[Write] | None = None) -> Iterator[list[Write]]:
        """Within the block, also append this thread's successful writes to ``log`` (a new list when
        None), which the block receives. Pass the same ``log`` from worker threads to gather one
        job's writes made on several threads; writes of other threads are not in it."""
        log = [] if log is None else log
        logs = self._local.__dict__.setdefault("logs", [])
        logs.append(log)
        try:
            yield log
        finally:
            del logs[next(i for i in range(len(logs) - 1, -1, -1) if logs[i] is log)]

    # -- helpers -------------------------------------------------------------------------------------
    def _path(self, kind: str, name: str, namespace: str = "", subresource: str | None = None) -> str:
        return self.session.ref(kind).path(namespace=namespace or None, name=name, subresource=subresource)

    def _record(self, verb: str, kind: str, name: str, namespace: str, result: dict | None) -> None:
        write = Write(verb, kind, name, namespace or "")
        with self._lock:
            self.writes.append(write)
            for log in getattr(self._local, "logs", ()):
                log.append(write)
        if self.cache is None or kind not in getattr(self.cache, "caches", {}):
            return
        if verb == "delete":
            if ((result or {}).get("metadata") or {}).get("deletionGracePeriodSeconds"):
                result.setdefault("kind", kind)   # graceful (a bound Pod): still there until confirmed
                self.cache[kind].observe(result)
            else:
                self.cache[kind].forget(name, namespace or "")
        elif result and result.get("metadata"):
            result.setdefault("kind", kind)
            self.cache[kind].observe(result)

    @staticmethod
    def _ident(obj: dict) -> tuple[str, str, str]:
        meta = obj["metadata"]
        return obj["kind"], meta.get("name") or meta["generateName"], meta.get("namespace") or ""

    # -- writes --------------------------------------------------------------------------------------
    @_retry
    def apply(self, obj: dict) -> dict:
        """Server-side apply ``obj`` (apiVersion, kind, metadata.name[, namespace] required)."""
        kind, name, ns = self._ident(obj)
        result = self.session.call("patch", self._path(kind, name, ns), body=obj, content_type=APPLY_PATCH,
                                   query={"fieldManager": self.field_manager, "force": "true"})
        self._record("apply", kind, name, ns, result)
        return result

    @_retry
    def apply_status(self, obj: dict, field_manager: str | None = None, keep_uid: bool = False) -> dict:
        """Server-side apply ``obj["status"]`` through the status subresource.

        ``field_manager``: another manager than the applier's (the Workload check answers are applied
        as the AdmissionCheck's ``controllerName``); ``keep_uid``: send ``metadata.uid`` too, so the
        server refuses (409) a write to a same-named replacement object.
        """
        kind, name, ns = self._ident(obj)
        meta = {"name": name, **({"namespace": ns} if ns else {})}
        if keep_uid and obj["metadata"].get("uid"):
            meta["uid"] = obj["metadata"]["uid"]
        body = {"apiVersion": obj["apiVersion"], "kind": kind, "metadata": meta, "status": obj["status"]}
        result = self.session.call("patch", self._path(kind, name, ns, "status"), body=body,
                                   content_type=APPLY_PATCH,
                                   query={"fieldManager": field_manager or self.field_manager,
                                          "force": "true"})
        self._record("apply-status", kind, name, ns, result)
        return result

    @_retry
    def create(self, obj: dict) -> dict | None:
        """Create ``obj`` (its ``status``, if any, is not sent); None when it already exists."""
        kind, name, ns = self._ident(obj)
        body = {k: v for k, v in obj.items() if k != "status"}
        path = self.session.ref(kind).path(namespace=ns or None)
        try:
            result = self.session.call("post", path, body=body, query={"fieldManager": self.field_manager})
        except KubeApiError as exc:
            if exc.status == 409 and exc.reason == "AlreadyExists":
                return None
            raise
        self._record("create", kind, name, ns, result)
        return result

    @_retry
    def merge_patch(self, kind: str, name: str, patch: dict, namespace: str = "",
                    subresource: str | None = None) -> dict:
        """JSON merge patch (``None`` values delete keys), of the object or of its ``subresource``
        (``status``: a Node's capacity)."""
        result = self.session.call("patch", self._path(kind, name, namespace, subresource), body=patch,
                                   content_type=MERGE_PATCH, query={"fieldManager": self.field_manager})
        self._record("patch", kind, name, namespace, result)
        return result

    @_retry
    def json_patch(self, kind: str, name: str, ops: list[dict], namespace: str = "") -> dict:
        """RFC 6902 JSON patch (use a ``test`` op to guard against concurrent changes)."""
        result = self.session.call("patch", self._path(kind, name, namespace), body=ops,
                                   content_type=JSON_PATCH, query={"fieldManager": self.field_manager})
        self._record("patch", kind, name, namespace, result)
        return result

    def update(self, desired: dict, fields: tuple[str, ...] = ("spec",),
               current: dict | None | object = UNREAD, reread_on_conflict: bool = True) -> tuple[str, dict]:
        """Create ``desired`` (without ``status``) or make the existing object's labels,
        ownerReferences and ``fields`` equal to it, keeping its resourceVersion (PUT).

        ``current``: the object as last seen (the cache; None: absent); left out, it is read from the
        server. A conflict (409) re-reads it from the server before the retry; with
        ``reread_on_conflict=False`` it raises :class:`KubeApiError` instead (``desired`` was computed
        from ``current``, so someone else's newer write must not be overwritten with it). Returns
        ``(action, object)``, action ``created``, ``replaced`` or ``unchanged`` (nothing sent).
        """
        seen = [current]

        def attempt() -> tuple[str, dict]:
            known, seen[0] = seen[0], UNREAD
            return self._update_once(desired, fields, known)
        if not reread_on_conflict:
            return _retry_unavailable(lambda: self._update_once(desired, fields, current))()
        return _retry_update(attempt)()

    def _update_once(self, desired: dict, fields: tuple[str, ...], current) -> tuple[str, dict]:
        """One try of :meth:`update`: read (when ``current`` is :data:`UNREAD`), compare, create or PUT."""
        kind, name, ns = self._ident(desired)
        meta = desired["metadata"]
        if current is UNREAD:
            try:
                current = self.session.call("get", self._path(kind, name, ns))
            except KubeApiError as exc:
                if exc.status != 404:
                    raise
                current = None
        if current is None:
            return "created", self.create_or_fail(desired)
        cur_meta = current.get("metadata") or {}
        if (cur_meta.get("labels") or {}) == (meta.get("labels") or {}) \
                and (cur_meta.get("ownerReferences") or []) == (meta.get("ownerReferences") or []) \
                and all(current.get(f) == desired.get(f) for f in fields):
            return "unchanged", current
        body = {**current, "metadata": {**cur_meta, "labels": dict(meta.get("labels") or {}),
                                         "ownerReferences": list(meta.get("ownerReferences") or [])}}
        body.update({f: desired.get(f) for f in fields})
        result = self.session.call("put", self._path(kind, name, ns), body=body,
                                   query={"fieldManager": self.field_manager})
        self._record("update", kind, name, ns, result)
        return "replaced", result

    def create_or_fail(self, obj: dict) -> dict:
        """POST ``obj`` without its ``status``; ``AlreadyExists`` (409) is raised (and retried by
        :meth:`update` with a fresh read)."""
        kind, name, ns = self._ident(obj)
        body = {k: v for k, v in obj.items() if k != "status"}
        result = self.session.call("post", self.session.ref(kind).path(namespace=ns or None), body=body,
                                   query={"fieldManager": self.field_manager})
        self._record("create", kind, name, ns, result)
        return result

    @_retry
    def update_status(self, desired: dict) -> bool:
        """Make the object's ``status`` equal to ``desired["status"]`` through the status subresource
        (PUT of the object as read now); False when the object is missing or already equal."""
        kind, name, ns = self._ident(desired)
        try:
            current = self.session.call("get", self._path(kind, name, ns))
        except KubeApiError as exc:
            if exc.status == 404:
                return False
            raise
        if current.get("status") == desired["status"]:
            return False
        result = self.session.call("put", self._path(kind, name, ns, "status"),
                                   body={**current, "status": desired["status"]},
                                   query={"fieldManager": self.field_manager})
        self._record("update-status", kind, name, ns, result)
        return True

    @_retry
    def delete(self, obj: dict, owner: dict | None = None) -> bool:
        """Delete ``obj`` if accelpolicy owns it (else :class:`NotOwnedError`); False when it was
        already gone. The delete is preconditioned on the object's uid when known. ``owner`` (an
        object): the rule is "its controller ownerReference is ``owner``" instead (the agent's)."""
        kind, name, ns = self._ident(obj)
        if owner is not None:
            owner_meta = owner.get("metadata") or {}
            if not owned_by(obj, owner_meta.get("uid", ""), owner_meta.get("name", "")):
                raise NotOwnedError(
                    f"refusing to delete {kind} {name}: not owned by {owner_meta.get('name')}")
        elif not owned(self.policy, obj):
            raise NotOwnedError(f"refusing to delete {kind} {name}: not owned by accelpolicy")
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        uid = obj["metadata"].get("uid")
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            result = self.session.call("delete", self._path(kind, name, ns), body=body)
        except KubeApiError as exc:
            if exc.status == 404:
                if self.cache is not None and kind in getattr(self.cache, "caches", {}):
                    self.cache[kind].forget(name, ns)
                return False
            raise
        self._record("delete", kind, name, ns, result if isinstance(result, dict) else None)
        return True

    def get(self, kind: str, name: str, namespace: str = "") -> dict | None:
        """Read one object from the server (None when absent)."""
        try:
            return self.session.call("get", self._path(kind, name, namespace))
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            raise
