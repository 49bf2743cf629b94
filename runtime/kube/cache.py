"""List+watch caches, one thread per kind, and the engine Snapshot built from them.

Per kind (:class:`KindCache`): list (paged) to learn every object and the collection's
resourceVersion, then watch from that version with ``allowWatchBookmarks=true``; each event updates
the cache and calls the event callback ``on_event(kind, event_type, obj)``. A watch that ends (server
timeout) resumes from the last resourceVersion seen (events and bookmarks); ``410 Gone`` (an
``ERROR`` event or the HTTP status) relists. Other errors back off (up to 5 s) and retry.

Serving while relisting (docs/availability.md "Serving while a watch cache relists"): a cache keeps its
last good objects while it relists or retries; a relist replaces them in one step when its last page
arrived. How stale they may be: from
the moment the watch broke (410 Gone, a transport error, an API server restart) until the relist or
the resumed watch is current again, i.e. one list of the kind plus the retry back-off (at most 5 s
between tries) while the API server answers; unbounded while it does not answer (then it calls no
webhook either). :meth:`KindCache.age` says it (0 while watching); the metric
``accelpolicy_watch_cache_stale_seconds{kind}`` exposes it.

The controller writes through the cache (:meth:`KindCache.observe`, :meth:`KindCache.forget`) with
the server's answers, so a reconcile right after a write sees it even before its watch event
arrives; an event older than what the cache holds is not allowed to roll it back.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

from loguru import logger

from runtime.kube.held import held as held_form
from runtime.kube.session import KubeApiError

EventCallback = Callable[[str, str, dict], None]


@dataclass(frozen=True)
class WatchedKind:
    """A kind to cache, optionally narrowed to one namespace, a field selector and a label selector
    (e.g. the settings Secret: ``namespace="gpustack-system"``,
    ``field_selector="metadata.name=gpustack-settings"``; a node's NodeFeatures:
    ``label_selector="nfd.node.kubernetes.io/node-name=<node>"``)."""

    kind: str
    namespace: str | None = None
    field_selector: str | None = None
    label_selector: str | None = None


class _Gone(Exception):
    """The watch's resourceVersion is too old: relist."""


def _rv(obj: dict) -> int | None:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion"))
    except (TypeError, ValueError):
        return None


def _key(obj: dict) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta["name"]


class KindCache:
    """The cached objects of one :class:`WatchedKind`, kept by a daemon thread.

    ``synced`` is set after the first complete list (and stays set: the objects are served from
    then on, also while relisting). Counters for tests and reports: ``lists``, ``events``,
    ``relists`` (410 Gone), ``errors``; ``stale_since``: the monotonic time the cache stopped being
    current (its watch broke), None while it is (:meth:`age`).
    """

    def __init__(self, session, watched: WatchedKind, on_event: EventCallback | None = None,
                 watch_timeout: int = 300, page_size: int = 500):
        self.session = session
        self.watched = watched
        self.kind = watched.kind
        self.on_event = on_event
        self.watch_timeout = watch_timeout
        self.page_size = page_size
        self.synced = threading.Event()
        self.lists = self.events = self.relists = self.errors = 0
        # why the last list or watch failed (a 403 names the verb); None once listed
        self.last_error: str | None = None
        self.stale_since: float | None = None
        self._broke_at: float | None = None  # a reopened watch's outage start, until its first event
        self._items: dict[tuple[str, str], dict] = {}
        self._tombstones: dict[tuple[str, str], int] = {}  # key -> resourceVersion of its DELETED event
        # key -> the cache version at which its object was last stored, replaced or dropped (oldest
        # first): what changed since a reader's last look (:meth:`changes`)
        self._touched: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._seq = 0  # the cache version: +1 per touch
        self._floor = 0  # touches at or before this version were forgotten
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stream = None
        self._thread: threading.Thread | None = None
        self._version: str | None = None
        self._ref = None

    # -- reading ----------------------------------------------------------------------------------
    @property
    def in_sync(self) -> bool:
        """Listed at least once and not waiting for a relist (a 410 Gone drops the list version)."""
        return self.synced.is_set() and self._version is not None

    def age(self, now: float | None = None) -> float | None:
        """Seconds the served objects may lag the server: 0.0 while the cache is current (listed and
        watching, or resuming a watch that ended in time), the time since its watch broke while it
        relists or retries, None before its first list (nothing to serve)."""
        if not self.synced.is_set():
            return None
        since = self.stale_since
        return 0.0 if since is None else max(0.0, (time.monotonic() if now is None else now) - since)

    def objects(self) -> list[dict]:
        """Every cached object (the dicts are shared: do not mutate them)."""
        with self._lock:
            return list(self._items.values())

    def get(self, name: str, namespace: str = "") -> dict | None:
        """One cached object (namespace "" for cluster-scoped kinds), or None."""
        with self._lock:
            return self._items.get((namespace, name))

    def changes(self, since: int) -> tuple[int, list[tuple[str, str]] | None]:
        """``(version, keys)``: the cache's version now and the ``(namespace, name)`` keys whose object
        was stored, replaced or dropped after version ``since`` (0: every key ever held), newest
        first. ``keys`` is None when they are no longer known (``since`` predates what is kept): read
        every object then. Any number of readers, each keeping its own ``since``; nothing is drained."""
        with self._lock:
            if since < self._floor:
                return self._seq, None
            keys = []
            for key in reversed(self._touched):
                if self._touched[key] <= since:
                    break
                keys.append(key)
            return self._seq, keys

    def keys(self) -> list[tuple[str, str]]:
        """The ``(namespace, name)`` of every cached object."""
        with self._lock:
            return list(self._items)

    def _touch(self, key: tuple[str, str]) -> None:
        """Record a change of ``key`` (lock held); keys of objects long gone are forgotten when they
        outnumber the held ones (readers older than that read everything)."""
        self._seq += 1
        self._touched[key] = self._seq
        self._touched.move_to_end(key)
        if len(self._touched) > 2 * len(self._items) + 1024:
            for gone in [k for k in self._touched if k not in self._items]:
                self._floor = max(self._floor, self._touched.pop(gone))

    # -- write-through ------------------------------------------------------------------------------
    def observe(self, obj: dict) -> None:
        """Record an object the server just returned (unless the cache already holds a newer one)."""
        self._store(obj)

    def forget(self, name: str, namespace: str = "") -> None:
        """Drop an object the server just deleted."""
        with self._lock:
            if self._items.pop((namespace, name), None) is not None:
                self._touch((namespace, name))

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> "KindCache":
        """Start the list+watch thread (a daemon); returns self."""
        self._thread = threading.Thread(target=self._run, name=f"cache-{self.kind}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Ask the thread to end; an open watch is aborted at once."""
        self._stop.set()
        stream = self._stream
        if stream is not None:
            stream.abort()

    def join(self, timeout: float | None = None) -> None:
        """Wait up to ``timeout`` seconds for the thread to end."""
        if self._thread is not None:
            self._thread.join(timeout)

    # -- the loop -----------------------------------------------------------------------------------
    def _run(self) -> None:
        backoff = 0.2
        while not self._stop.is_set():
            try:
                if self._version is None:
                    self._list()
                self._watch()
                backoff = 0.2
            except Exception as exc:  # noqa: BLE001 - any transport error: back off and retry
                if self._stop.is_set():
                    break
                self._went_stale()
                if isinstance(exc, _Gone) or (isinstance(exc, KubeApiError) and exc.status == 410):
                    # the same expiry whether the open watch sent an ERROR event or the request was
                    # answered 410 (a resume from a version the API server's new watch cache lacks)
                    logger.info("{} watch expired (410 Gone): relisting (serving the {} objects held "
                                "meanwhile)",
                                self.kind, len(self._items))
                    self.relists += 1
                    self._version = None
                    continue
                self.errors += 1
                self.last_error = str(exc)
                logger.warning("{} cache: {}; retrying in {:.1f}s", self.kind, exc, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)

    def _went_stale(self) -> None:
        """The watch broke: the objects held are served on, aging from now (until current again)."""
        if self.stale_since is None and self.synced.is_set():
            # a watch that failed before its first event continues the outage it was opened after
            self.stale_since = self._broke_at or time.monotonic()
        self._broke_at = None

    def _path(self) -> str:
        if self._ref is None:
            self._ref = self.session.ref(self.kind)
        return self._ref.path(namespace=self.watched.namespace)

    def _query(self) -> dict:
        query = {}
        if self.watched.field_selector:
            query["fieldSelector"] = self.watched.field_selector
        if self.watched.label_selector:
            query["labelSelector"] = self.watched.label_selector
        return query

    def _list(self) -> None:
        path = self._path()
        items: dict[tuple[str, str], dict] = {}
        cont = None
        while True:
            query = {**self._query(), "limit": self.page_size}
            if cont:
                query["continue"] = cont
            page = self.session.call("get", path, query=query)
            api_version = page.get("apiVersion", "v1")
            for obj in page.get("items") or []:
                obj.setdefault("kind", self.kind)
                obj.setdefault("apiVersion", api_version)
                # runtime/kube/held.py: what is kept of each kind
                items[_key(obj)] = held_form(self.kind, obj)
            meta = page.get("metadata") or {}
            cont = meta.get("continue")
            if not cont:
                version = meta.get("resourceVersion")
                break
        with self._lock:
            old = self._items
            self._items = items
            for key in set(old) | set(items):
                self._touch(key)
        self.lists += 1
        self.last_error = None
        self.stale_since = self._broke_at = None  # current as of the list; the watch resumes from its version
        self._version = version
        first = not self.synced.is_set()
        self.synced.set()
        if not first and self.on_event and old != items:
            self.on_event(self.kind, "RELIST", {})

    def _watch(self) -> None:
        query = {**self._query(), "watch": "true", "allowWatchBookmarks": "true",
                 "resourceVersion": self._version, "timeoutSeconds": self.watch_timeout}
        stream = self.session.stream(self._path(), query, timeout=self.watch_timeout + 30)
        self._stream = stream
        # a resumed watch delivers what happened since the version held: current again
        self._broke_at, self.stale_since = self.stale_since, None
        try:
            if self._stop.is_set():  # stop() ran before the stream was visible to it
                return
            for event in stream:
                if self._stop.is_set():
                    return
                self._handle(event)
            self._broke_at = None
        finally:
            self._stream = None
            stream.close()

    def _handle(self, event: dict) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Gone()
            raise KubeApiError(int(obj.get("code") or 0), obj.get("reason", ""), obj.get("message", ""))
        self._broke_at = None
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind == "BOOKMARK":
            if version:
                self._version = version
            return
        obj.setdefault("kind", self.kind)
        self.events += 1
        if kind == "DELETED":
            with self._lock:
                held = self._items.get(_key(obj))
                if held is None or (_rv(held) or 0) <= (_rv(obj) or 0):
                    if self._items.pop(_key(obj), None) is not None:
                        self._touch(_key(obj))
                    self._tombstones[_key(obj)] = _rv(obj) or 0
        else:
            self._store(obj)
        if version:
            self._version = version
        if self.on_event:
            self.on_event(self.kind, kind, obj)

    def _store(self, obj: dict) -> None:
        obj = held_form(self.kind, obj)  # runtime/kube/held.py: what is kept of each kind
        key, version = _key(obj), _rv(obj)
        with self._lock:
            held = self._items.get(key)
            if held is not None and _rv(held) is not None and version is not None and _rv(held) > version:
                return
            if version is not None and version <= self._tombstones.get(key, -1):
                return  # a write-through answer arriving after the object's DELETED event
            meta = obj.get("metadata") or {}
            if meta.get("deletionTimestamp") and not meta.get("finalizers") \
                    and not meta.get("deletionGracePeriodSeconds"):
                # the server removes it now; its DELETED event follows. A Pod in graceful deletion
                # (grace period > 0) stays until its kubelet confirms: it is still there.
                if self._items.pop(key, None) is not None:
                    self._touch(key)
                return
            self._tombstones.pop(key, None)
            self._items[key] = obj
            self._touch(key)
