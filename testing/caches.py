"""Watch caches without a server, holding given objects as the controller's hold them (each stored through
:meth:`runtime.kube.cache.KindCache.observe`, so its change feed names it): for the tests and benchmarks
of what the controller reads from its caches (docs/tasks/report-usage.md "Cost and cardinality")."""
from __future__ import annotations

from typing import Iterable

from runtime.kube.cache import KindCache, WatchedKind

USAGE_KINDS = ("Devices", "Node", "Pod", "LocalQueue", "Workload")   # what the usage counters read


def caches_of(objects: Iterable[dict], kinds: Iterable[str] = USAGE_KINDS) -> dict[str, KindCache]:
    """``kind -> KindCache`` of ``kinds``, each holding the ``objects`` of its kind (others left out)."""
    caches = {kind: KindCache(None, WatchedKind(kind)) for kind in kinds}
    for obj in objects:
        if obj["kind"] in caches:
            caches[obj["kind"]].observe(obj)
    return caches
