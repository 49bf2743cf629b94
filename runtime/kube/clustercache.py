"""The watch caches of several kinds together (:class:`ClusterCache`): started, synced and stopped as
one, their ages, and the engine :class:`~runtime.engine.snapshot.Snapshot` built from them. One kind's
list+watch cache, and how stale it may be while it relists: :mod:`runtime.kube.cache`."""
from __future__ import annotations

import copy
import time
from typing import Iterable

from loguru import logger

from runtime.engine.snapshot import Snapshot
from runtime.kube.cache import EventCallback, KindCache, WatchedKind
from runtime.kube.session import KubeApiError


class ClusterCache:
    """One :class:`KindCache` per watched kind, sharing an event callback.

    Kinds the server does not serve (a CRD not installed) are left out with a warning; they read
    as empty.
    """

    def __init__(self, session, watched: Iterable[WatchedKind], on_event: EventCallback | None = None,
                 watch_timeout: int = 300):
        self.session = session
        self.caches: dict[str, KindCache] = {}
        self.missing: list[str] = []
        self.started = False
        for w in watched:
            try:
                session.ref(w.kind)
            except KubeApiError as exc:
                logger.warning("not watching {}: {}", w.kind, exc)
                self.missing.append(w.kind)
                continue
            self.caches[w.kind] = KindCache(session, w, on_event, watch_timeout=watch_timeout)

    def start(self) -> "ClusterCache":
        """Start every kind's thread (once: a second call does nothing); returns self."""
        if self.started:
            return self
        self.started = True
        for cache in self.caches.values():
            cache.start()
        return self

    def wait_synced(self, timeout: float = 60.0) -> bool:
        """Block until every cache listed once; False on timeout."""
        deadline = time.monotonic() + timeout
        for cache in self.caches.values():
            if not cache.synced.wait(max(0.0, deadline - time.monotonic())):
                return False
        return True

    def unsynced(self) -> list[str]:
        """Kinds whose cache does not hold a current list (never listed, or relisting after its watch
        expired), in watch order; [] when every cache is in sync."""
        return [kind for kind, cache in self.caches.items() if not cache.in_sync]

    def never_synced(self) -> list[str]:
        """Kinds whose cache never completed a list (nothing to serve yet), in watch order; [] once
        every cache listed once (the webhooks' ``/readyz``: a relisting cache serves its last objects)."""
        return [kind for kind, cache in self.caches.items() if not cache.synced.is_set()]

    def stop(self) -> None:
        """Stop every kind's thread (each joined up to 2 s)."""
        for cache in self.caches.values():
            cache.stop()
        for cache in self.caches.values():
            cache.join(2.0)

    def __getitem__(self, kind: str) -> KindCache:
        return self.caches[kind]

    def get(self, kind: str, name: str, namespace: str = "") -> dict | None:
        """One cached object of ``kind``, or None (also for a kind not watched)."""
        cache = self.caches.get(kind)
        return cache.get(name, namespace) if cache else None

    def snapshot(self, kinds: Iterable[str] | None = None) -> Snapshot:
        """Every cached object (of ``kinds`` only, when given) as an engine :class:`Snapshot` (deep
        copies)."""
        wanted = None if kinds is None else set(kinds)
        objects = [copy.deepcopy(o) for kind, cache in self.caches.items() if wanted is None or kind in wanted
                   for o in cache.objects()]
        return Snapshot.from_objects(objects, origin="<watch cache>")
