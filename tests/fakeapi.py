"""The one in-memory API server of the unit tests: it answers ``ref``, ``call`` and ``stream`` as
:class:`runtime.kube.session.Session` does, from ``objects`` (kind -> items), without a cluster
(docs/development/testing.md "Builders and the in-memory API").

Served kinds: ``kinds`` (kind -> ``(apiVersion, plural, namespaced)``; a kind not in it is not served, 404
from ``ref`` in the Session's words), or, when None, every kind, with its apiVersion from the snapshot's
KNOWN_KINDS and the kind itself as its plural.

Reads: a list answers every item of the kind (``page`` items a page, followed by ``continue``; all at once
when None) with a new resourceVersion; a get by name answers the object or 404; every answer is a copy.
``forbidden``: kinds every call of answers 403 in the API server's words; ``fail_lists``: kinds whose
list answers 503; ``slow_lists``: kind -> seconds a list takes (``stop`` cuts it short).

Writes change the stored objects, each with a new resourceVersion, as the API server does: a patch or an
apply merges its body in (a JSON merge patch; a JSON patch leaves the object as it is), a PUT replaces
the object (409 Conflict when its resourceVersion is not the stored one), a POST of an object that exists
answers 409 AlreadyExists, a delete removes it; a write with ``dryRun`` in its query answers what it
would store and stores nothing. ``drops``: kind -> dotted field paths the server does not know (an older
Kubernetes): left out of what it stores and answers. ``writes``: ``(method, path)`` of every write.

Watches: one that idles 0.2 s and ends, or, for a kind in ``expire``, yields one 410 ``ERROR`` event.

Scripted answers, for tests of the watch-cache protocol itself: ``lists`` (the answers the lists get, in
order) and ``watches`` (per watch opened, its events or an exception to raise); once the scripted watches
are spent, ``done`` is set and a watch answers 503.

``calls``: ``(method, path, query)`` of every call; ``watch_queries``: the query of every watch opened.
"""
from __future__ import annotations

import copy
import threading
import time

from runtime.engine.snapshot import KNOWN_KINDS
from runtime.kube.session import EXTRA_KINDS, KubeApiError, ResourceRef


def merge(target, patch):
    """RFC 7386 JSON merge patch of ``patch`` onto ``target`` (a new object; None deletes a key)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


class Stream:
    """A watch stream: ``events`` in order, then (``idle``) a wait of 0.2 s on ``stop``; then it ends."""

    def __init__(self, events=(), stop: threading.Event | None = None, idle: bool = False):
        self.events, self.stop, self.idle = list(events), stop, idle

    def __iter__(self):
        yield from self.events
        if self.idle and self.stop is not None:
            self.stop.wait(0.2)

    def close(self):
        pass

    def abort(self):
        pass


class FakeApi:
    """See the module docstring."""

    def __init__(self, objects: dict[str, list[dict]] | None = None, *,
                 kinds: dict[str, tuple[str, str, bool]] | None = None, page: int | None = None,
                 forbidden: tuple[str, ...] = (), drops: dict[str, list[str]] | None = None,
                 lists: list[dict] | None = None, watches: list | None = None):
        self.objects = objects if objects is not None else {}
        self.drops = drops or {}
        self.kinds, self.page, self.forbidden = kinds, page, set(forbidden)
        self.lists = None if lists is None else list(lists)
        self.watches = None if watches is None else list(watches)
        self.fail_lists: set[str] = set()
        self.slow_lists: dict[str, float] = {}
        self.expire: set[str] = set()
        self.stop = threading.Event()
        self.done = threading.Event()
        self.version = 1
        self.writes: list[tuple[str, str]] = []
        self.calls: list[tuple[str, str, dict]] = []
        self.watch_queries: list[dict] = []
        self._lock = threading.Lock()

    @property
    def list_queries(self) -> list[dict]:
        """The query of every GET, in order."""
        return [query for method, _, query in self.calls if method == "get"]

    def ref(self, kind):
        if self.kinds is None:
            api_version, namespaced = KNOWN_KINDS.get(kind, ("v1", False))
            return ResourceRef(kind, api_version, kind, namespaced)
        if kind not in self.kinds:
            api_version = EXTRA_KINDS.get(kind) or KNOWN_KINDS.get(kind, ("",))[0]
            raise KubeApiError(404, "NotFound", f"the server does not serve {kind}"
                                                + (f" ({api_version})" if api_version else ""))
        return ResourceRef(kind, *self.kinds[kind])

    def get(self, kind: str, name: str, namespace: str = "") -> dict | None:
        """The stored object itself (not a copy), for a test to read or change; None when absent."""
        return next((o for o in self.objects.get(kind, []) if o["metadata"]["name"] == name
                     and (o["metadata"].get("namespace") or "") == namespace), None)

    def _plural(self, kind: str) -> str:
        return kind if self.kinds is None else self.kinds[kind][1]

    def _parse(self, path: str) -> tuple[str, str, str | None, str | None]:
        """``(kind, namespace, name, subresource)`` of a path a :meth:`ref` built."""
        parts = path.strip("/").split("/")
        parts = parts[2:] if parts[0] == "api" else parts[3:]
        namespace = ""
        if parts[0] == "namespaces" and len(parts) > 2:
            namespace, parts = parts[1], parts[2:]
        kind = parts[0]
        if self.kinds is not None:
            kind = next(k for k, (_, plural, _) in self.kinds.items() if plural == parts[0])
        return kind, namespace, (parts[1] if len(parts) > 1 else None), (parts[2] if len(parts) > 2 else None)

    def _next(self) -> str:
        with self._lock:
            self.version += 1
            return str(self.version)

    def call(self, method, path, body=None, query=None, **_):
        self.calls.append((method, path, dict(query or {})))
        if self.lists is not None and method == "get":
            return self.lists.pop(0)
        kind, namespace, name, _sub = self._parse(path)
        if kind in self.forbidden:
            plural = self._plural(kind)
            raise KubeApiError(403, "Forbidden", f'{plural} is forbidden: User "someone" cannot list '
                                                 f'resource "{plural}" in API group "" at the cluster scope')
        if method == "get":
            return self._read(kind, namespace, name, query or {})
        self.writes.append((method, path))
        with self._lock:
            return self._write(method, kind, namespace, name, body, dry_run=bool((query or {}).get("dryRun")))

    def _read(self, kind, namespace, name, query):
        if name is not None:
            found = self.get(kind, namespace=namespace, name=name)
            if found is None:
                raise KubeApiError(404, "NotFound", f'{self._plural(kind)} "{name}" not found')
            return copy.deepcopy(found)
        if kind in self.fail_lists:
            raise KubeApiError(503, "ServiceUnavailable", "scripted")
        if kind in self.slow_lists:
            self.stop.wait(self.slow_lists[kind])
        items = self.objects.get(kind, [])
        meta = {"resourceVersion": self._next()}
        if self.page is not None:
            start = int(query.get("continue") or 0)
            if start + self.page < len(items):
                meta["continue"] = str(start + self.page)
            items = items[start:start + self.page]
        return {"apiVersion": self.ref(kind).api_version, "items": copy.deepcopy(items), "metadata": meta}

    def _write(self, method, kind, namespace, name, body, dry_run=False):
        """A write on the stored objects (see the module docstring)."""
        items = self.objects.setdefault(kind, [])
        found = self.get(kind, name or (body or {}).get("metadata", {}).get("name", ""), namespace)
        if method == "delete":
            if dry_run:
                return copy.deepcopy(found or {})
            if found is not None:
                items.remove(found)
            return found or {}
        if method == "post" and found is not None:
            raise KubeApiError(409, "AlreadyExists", f'{self._plural(kind)} "{found["metadata"]["name"]}" '
                                                     "already exists")
        if method == "put":
            stored = (found or {}).get("metadata", {}).get("resourceVersion")
            if (body.get("metadata") or {}).get("resourceVersion") != stored:
                raise KubeApiError(409, "Conflict", "the object has been modified")
            obj = copy.deepcopy(body)
        else:
            obj = copy.deepcopy(found or {"metadata": {"name": name, "namespace": namespace}})
            if isinstance(body, dict):  # merge patch, apply, create (a JSON patch: unchanged, a new version)
                obj = merge(obj, body)
        obj["metadata"].setdefault("name", name)
        if namespace:
            obj["metadata"]["namespace"] = namespace
        self._drop(kind, obj)
        if dry_run:
            return obj
        self.version += 1
        obj["metadata"].update(resourceVersion=str(self.version),
                               uid=obj["metadata"].get("uid") or f"uid-{kind}-{obj['metadata']['name']}")
        if found is not None:
            items.remove(found)
        items.append(obj)
        return copy.deepcopy(obj)

    def _drop(self, kind: str, obj: dict) -> None:
        """Take the fields of ``drops`` the server does not know out of ``obj``."""
        for field in self.drops.get(kind, []):
            *parents, last = field.split(".")
            holder = obj
            for key in parents:
                holder = holder.get(key) if isinstance(holder, dict) else None
            if isinstance(holder, dict):
                holder.pop(last, None)

    def stream(self, path, query, timeout):
        self.watch_queries.append(dict(query))
        if self.watches is not None:
            if not self.watches:
                self.done.set()
                time.sleep(0.05)
                raise KubeApiError(503, "ServiceUnavailable", "script ended")
            item = self.watches.pop(0)
            if isinstance(item, Exception):
                raise item
            return Stream(item)
        kind = self._parse(path)[0]
        if kind in self.expire:
            self.expire.discard(kind)
            return Stream([{"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}])
        return Stream(stop=self.stop, idle=True)
