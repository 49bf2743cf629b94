"""The controller's snapshot of its watch caches, kept up to date by the changes alone.

Each pass needs an engine :class:`Snapshot` of every cached object, as private copies (the cache's
dicts are shared with its watch thread). Building it from every cached object each pass (copy,
check, index) was most of an idle pass on a large cluster (about 40 us per node). A
:class:`CacheSnapshots` keeps, for the kinds whose copies derive and plan only read
(:data:`REUSED_COPIES`), one checked copy per cached object and takes from each cache only the keys
changed since its last look (:meth:`runtime.kube.cache.KindCache.changes`): a pass copies and
checks what changed, and the snapshot itself is a copy of the per-kind maps (the objects are shared).
The other kinds (Pods, Instances, Workloads, the settings Secret, ...) are copied afresh each pass.

The snapshot holds the same objects, and raises the same :class:`runtime.engine.snapshot.SnapshotError`
for a bad object, as ``Snapshot.from_objects`` of copies of every cached object would; a bad object
is read again on the next pass (until it is fixed or gone). Not thread-safe: the pass thread's.
"""
from __future__ import annotations

import copy
from types import MappingProxyType

from runtime.engine.snapshot import Snapshot, check_object
from runtime.kube.cache import KindCache
from runtime.kube.clustercache import ClusterCache

ORIGIN = "<watch cache>"
# Kinds whose snapshot copies are kept while the cached object is the same (the cache replaces an
# object on every event, never mutates it; derive and plan only read these kinds): the bulk of a large
# cluster, copied once per version instead of once per pass; the node kinds also key the incremental
# derive (runtime/engine/pools/incremental.py), the pool kinds were two thirds of an idle pass at
# 1,000 nodes (LocalQueues: one per pool and namespace).
REUSED_COPIES = frozenset(("Node", "NodeFeature", "Devices", "Namespace", "ResourceFlavor", "ClusterQueue",
                           "LocalQueue", "AdmissionCheck", "InstanceType", "InstanceTypeFlavor"))


class CacheSnapshots:
    """Snapshots of one :class:`ClusterCache`, each built from the last one and the changes since.

    ``copied``: how many objects the last :meth:`snapshot` copied (the changed ones of the kept
    kinds, every object of the others).
    """

    def __init__(self, cache: ClusterCache):
        self.cache = cache
        self.copied = 0
        self._seen: dict[str, int] = {}  # kind -> the cache version read last
        # kind -> cache key -> (cached, snapshot key)
        self._sources: dict[str, dict[tuple, tuple[dict, tuple]]] = {}
        self._copies: dict[str, dict[tuple, dict]] = {}  # kind -> snapshot key -> checked copy
        self._last: Snapshot | None = None  # the last snapshot (its sorted lists serve unchanged kinds)
        # kind -> the last snapshot's map (same while unchanged)
        self._frozen: dict[str, MappingProxyType] = {}

    def snapshot(self) -> Snapshot:
        """Every cached object, as copies, in an engine Snapshot.

        Raises :class:`runtime.engine.snapshot.SnapshotError` for a cached object a snapshot refuses
        (e.g. a label value that is not a string), as ``Snapshot.from_objects`` does."""
        index: dict[str, dict[tuple, dict]] = {}
        warnings: list[str] = []
        self.copied = 0
        for kind, cache in self.cache.caches.items():
            if kind in REUSED_COPIES:
                kept = self._refresh(kind, cache, warnings)
                if kept:  # an empty kind is absent, as from_objects leaves it
                    index[kind] = kept
                continue
            for obj in cache.objects():
                own = copy.deepcopy(obj)
                placed = check_object(own, ORIGIN, self.copied, warnings)
                self.copied += 1
                if placed is not None:
                    index.setdefault(placed[0], {})[placed[1]] = own
        self._last = Snapshot.from_index(index, warnings, previous=self._last)
        return self._last

    def _refresh(self, kind: str, cache: KindCache, warnings: list[str]) -> MappingProxyType:
        """The kept copies of ``kind`` after the cache's changes since the last look: the last
        snapshot's map itself when none changed."""
        sources = self._sources.setdefault(kind, {})
        copies = self._copies.setdefault(kind, {})
        version, keys = cache.changes(self._seen.get(kind, 0))
        if keys is None:  # the cache forgot what changed that long ago: look at everything
            keys = list(set(sources) | set(cache.keys()))
        for key in keys:
            obj = cache.get(key[1], key[0])
            held = sources.get(key)
            if held is not None and held[0] is obj:
                continue
            if obj is None:
                if held is not None:
                    del sources[key]
                    copies.pop(held[1], None)
                    self._frozen.pop(kind, None)
                continue
            own = copy.deepcopy(obj)
            placed = check_object(own, ORIGIN, self.copied, warnings)  # raises: this key is read again
            self.copied += 1
            self._frozen.pop(kind, None)
            if held is not None:
                copies.pop(held[1], None)
            if placed is None:
                sources.pop(key, None)
                continue
            sources[key] = (obj, placed[1])
            copies[placed[1]] = own
        self._seen[kind] = version
        if kind not in self._frozen:  # changed (or never built)
            self._frozen[kind] = MappingProxyType(dict(copies))
        return self._frozen[kind]
