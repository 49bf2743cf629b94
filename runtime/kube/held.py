"""What a watch cache holds of each object: the object less what no reader uses, its repeated strings
shared (docs/performance.md "Fast to start, light to hold").

:func:`held` is called by :class:`runtime.kube.cache.KindCache` on every object it stores (a list's
items, a watch event's object, a write's answer). It returns a new object (the one given is not
changed) that differs from the API server's in exactly these fields, per kind:

- every kind: ``metadata.managedFields`` is dropped. It is the API server's record of which field
  manager set which field: about half of every object's bytes (each field's path written again),
  read by no code here and by no rule (server-side apply keeps it on the server; a PUT without it
  keeps the server's).
- ``Node``: ``status.images`` is dropped: the kubelet's list of the container images on the node,
  the largest part of a real Node (tens of entries of digests and sizes), which no code or rule reads.
  Everything else of a Node is kept: its labels and annotations (the facts), ``status.capacity`` and
  ``allocatable`` (the derivation, the agent), ``addresses`` (an Instance's access address),
  ``conditions`` and ``nodeInfo`` (rules may read them: admission lookups see whole Nodes).
- every other kind (NodeFeature, Devices, Pods, Instances, Kueue's and accelpolicy's own objects, ...)
  is kept whole: their fields are the facts, ledgers and specs the engine and the rules read, and the
  planner compares the published status of the kinds it writes.

Strings are shared: every mapping key and every string value of at most :data:`SHARED_MAX` characters
is interned (``sys.intern``), so the label keys, label values, field names and enum values that
thousands of objects repeat are held once. A held object is a plain ``dict`` of plain ``dict``,
``list``, ``str``, ``int``, ``float``, ``bool`` and ``None``, equal to the original less the fields
above.

:func:`held_bytes` estimates what one held object costs (its containers and numbers, and its strings
longer than :data:`SHARED_MAX`; the shared strings are held once for all objects and not counted);
:class:`CacheBytesCollector` publishes it per kind as ``accelpolicy_watch_cache_bytes{kind}``, kept
current at each scrape from the cache's changes since the last one.
"""
from __future__ import annotations

import sys
import threading
from typing import Any, Callable, Iterator, Optional

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

SHARED_MAX = 64
_intern = sys.intern

# kind -> (field path, ...) dropped besides metadata.managedFields; see the module docstring.
DROPPED: dict[str, tuple[tuple[str, ...], ...]] = {
    "Node": (("status", "images"),),
}


def _shared(value: Any) -> Any:
    """``value`` rebuilt with its mapping keys and short strings interned (containers copied)."""
    kind = type(value)
    if kind is dict:
        return {(_intern(k) if type(k) is str else k): _shared(v) for k, v in value.items()}
    if kind is list:
        return [_shared(v) for v in value]
    if kind is str and len(value) <= SHARED_MAX:
        return _intern(value)
    return value


def held(kind: str, obj: dict) -> dict:
    """The form a watch cache holds of ``obj`` (of ``kind``): a new object, ``metadata.managedFields``
    and the :data:`DROPPED` fields of its kind left out, strings shared (module docstring)."""
    if type(obj) is not dict:
        return obj
    out = {}
    for key, value in obj.items():
        if key == "metadata" and type(value) is dict:
            value = {k: v for k, v in value.items() if k != "managedFields"}
        out[_intern(key) if type(key) is str else key] = _shared(value)
    for path in DROPPED.get(kind, ()):
        parent = out
        for part in path[:-1]:
            parent = parent.get(part) if type(parent) is dict else None
        if type(parent) is dict:
            parent.pop(path[-1], None)
    return out


_SMALL_INTS = range(-5, 257)


def held_bytes(obj: Any) -> int:
    """Bytes ``obj`` (as :func:`held` returns it) holds of its own: ``sys.getsizeof`` of each dict and
    list, of each number outside CPython's shared small ints, and of each string longer than
    :data:`SHARED_MAX` (shorter ones are shared by every object that has them)."""
    size = sys.getsizeof(obj)
    kind = type(obj)
    if kind is dict:
        for k, v in obj.items():
            if type(k) is str and len(k) > SHARED_MAX:
                size += sys.getsizeof(k)
            size += _child(v)
    elif kind is list:
        for v in obj:
            size += _child(v)
    return size


def _child(value: Any) -> int:
    kind = type(value)
    if kind is dict or kind is list:
        return held_bytes(value)
    if kind is str:
        return sys.getsizeof(value) if len(value) > SHARED_MAX else 0
    if kind is int:
        return 0 if value in _SMALL_INTS else sys.getsizeof(value)
    if kind is float:
        return sys.getsizeof(value)
    return 0


class CacheBytes:
    """Per kind, the :func:`held_bytes` of every object a :class:`runtime.kube.clustercache.ClusterCache`
    holds, updated from each cache's changes since the last look (an object is measured once per
    version it is held in)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._seen: dict[str, int] = {}
        self._sizes: dict[str, dict[tuple[str, str], tuple[int, int]]] = {}  # kind -> key -> (id(obj), bytes)

    def totals(self, caches: dict) -> dict[str, int]:
        """Kind -> bytes held now, for ``caches`` (kind -> KindCache)."""
        out = {}
        with self._lock:
            for kind, cache in caches.items():
                sizes = self._sizes.setdefault(kind, {})
                version, keys = cache.changes(self._seen.get(kind, 0))
                if keys is None:
                    keys = list(set(sizes) | set(cache.keys()))
                for key in keys:
                    obj = cache.get(key[1], key[0])
                    if obj is None:
                        sizes.pop(key, None)
                    elif sizes.get(key, (None,))[0] != id(obj):
                        sizes[key] = (id(obj), held_bytes(obj))
                self._seen[kind] = version
                out[kind] = sum(size for _, size in sizes.values())
        return out


class CacheBytesCollector(Collector):
    """``accelpolicy_watch_cache_bytes{kind}`` of the caches ``caches()`` returns (kind -> KindCache;
    None or an empty dict: no samples), read at scrape time."""

    def __init__(self, caches: Callable[[], Optional[dict]]):
        self.caches = caches
        self.bytes = CacheBytes()

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily("accelpolicy_watch_cache_bytes",
                                 "Bytes the watch cache of a kind holds of its objects (their maps, lists, "
                                 "numbers and long strings; strings of at most 64 characters are shared by "
                                 "all objects and not counted); managedFields and a Node's status.images are "
                                 "not held",
                                 labels=["kind"])

    def describe(self) -> list:
        return [self._family()]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = self._family()
        caches = self.caches() or {}
        for kind, total in self.bytes.totals(caches).items():
            family.add_metric([kind], total)
        yield family
