"""An immutable snapshot of cluster objects, indexed by kind and name.

Objects are JSON-shaped dicts exactly as the API server returns them. The snapshot is what every
engine call reads; where it came from (a watch cache, files) is the caller's business. Source of the
kinds: docs/reference/crds.md "CRD fields".
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from collections.abc import Iterable, Iterator, Mapping  # not typing's: its isinstance is slow

# kind -> (apiVersion, namespaced)
KNOWN_KINDS: dict[str, tuple[str, bool]] = {
    "Namespace": ("v1", False),
    "Node": ("v1", False),
    "Secret": ("v1", True),
    "Pod": ("v1", True),
    "ConfigMap": ("v1", True),
    "PersistentVolumeClaim": ("v1", True),
    "PersistentVolume": ("v1", False),
    "StorageClass": ("storage.k8s.io/v1", False),
    "RuntimeClass": ("node.k8s.io/v1", False),
    "Service": ("v1", True),
    "NodeFeature": ("nfd.k8s-sigs.io/v1alpha1", True),
    "ResourceFlavor": ("kueue.x-k8s.io/v1beta2", False),
    "ClusterQueue": ("kueue.x-k8s.io/v1beta2", False),
    "LocalQueue": ("kueue.x-k8s.io/v1beta2", True),
    "AdmissionCheck": ("kueue.x-k8s.io/v1beta2", False),
    "Workload": ("kueue.x-k8s.io/v1beta2", True),
    "InstanceType": ("worker.gpustack.ai/v1", False),
    "InstanceTypeFlavor": ("worker.gpustack.ai/v1", False),
    "Instance": ("worker.gpustack.ai/v1", True),
    "Devices": ("worker.gpustack.ai/v1", False),
    "AcceleratorMaintenance": ("worker.gpustack.ai/v1", False),
    "InstancePersistentVolume": ("worker.gpustack.ai/v1", True),
    "Setting": ("gpustack.ai/v1", True),
    # validations of an AdmissionPolicy lifted for the objects it matches (docs/concepts/exceptions.md)
    "PolicyException": ("worker.gpustack.ai/v1", True),
    # Dynamic Resource Allocation (docs/concepts/dra.md "Accelerators from DRA drivers"): the slices a node's
    # accelerators may come from, the claims that charge them, the DeviceClasses the controller derives
    "ResourceSlice": ("resource.k8s.io/v1", False),
    "ResourceClaim": ("resource.k8s.io/v1", True),
    "DeviceClass": ("resource.k8s.io/v1", False),
}


class Required:
    """A field that must be present (in a shape table below)."""

    def __init__(self, kind: type):
        self.kind = kind


_PROFILE_COUNT = [{"name": Required(str), "count": int}]
# The fields the engine reads from a Devices object (docs/agent.md "The Devices object and its ledger"), by
# type. Fields not listed are not checked; absent or null fields read as their zero value.
DEVICES_SHAPE: dict = {
    "spec": {"groups": [{"id": str, "manufacturer": str, "accelerators": [{
        "id": str, "index": int,
        "status": {"unhealthy": bool, "logicalSliced": {"count": int, "coresPercentageOvercommit": bool},
                   "maintenance": {"name": str, "reason": str, "owner": str, "expiry": str},
                   "health": {"fact": str, "rule": str, "lastFailure": str, "until": str, "strikes": int},
                   "physicalSliced": {"count": int, "profiles": [
                       {"name": Required(str), "count": int, "memoryMib": int}]}}}]}]},
    "status": {"groups": [{"id": str, "manufacturer": str, "accelerators": [{
        "id": str, "index": int, "mode": int, "allocated": int, "remaining": int, "allocatedSlices": int,
        "allocatedProfiles": _PROFILE_COUNT, "remainingProfiles": _PROFILE_COUNT}]}]},
}
_TYPE_NAMES = {int: "an integer", str: "a string", bool: "a boolean"}


def _dotted(path: tuple) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def _shape_problem(value, shape, path: tuple) -> str | None:
    """The first place where ``value`` does not fit ``shape`` (a dict of fields, a one-item list
    for "list of", or a type), as ``field.path: must be ...``; None when it fits."""
    if isinstance(shape, Required):
        if value is None:
            return f"{_dotted(path)}: required"
        shape = shape.kind
    if value is None:
        return None
    if isinstance(shape, dict):
        if not isinstance(value, Mapping):
            return f"{_dotted(path) or '<object>'}: must be a map, got {value!r}"
        for key, sub in shape.items():
            problem = _shape_problem(value.get(key), sub, path + (key,))
            if problem:
                return problem
        return None
    if isinstance(shape, list):
        if not isinstance(value, list):
            return f"{_dotted(path)}: must be a list, got {value!r}"
        for i, item in enumerate(value):
            problem = _shape_problem(item, shape[0], path + (i,))
            if problem:
                return problem
        return None
    if not isinstance(value, shape) or (shape is int and isinstance(value, bool)):
        return f"{_dotted(path)}: must be {_TYPE_NAMES[shape]}, got {value!r}"
    return None


def _fits(value, kind: type) -> bool:
    return value is None or type(value) is kind


def _items(value) -> list:
    """``value`` when it is a list of maps; raises _Misfit otherwise (absent reads as empty)."""
    if value is None:
        return []
    if type(value) is not list or not all(isinstance(v, dict) for v in value):
        raise _Misfit
    return value


class _Misfit(Exception):
    pass


def _devices_fit(obj) -> bool:
    """Fast path of ``_shape_problem(obj, DEVICES_SHAPE)``: True when the object certainly fits
    (explicit loops: the generic walk made loading 5,000 nodes 3x slower). False sends the object
    to the generic walk, which names the field."""
    try:
        for side, acc_ints, profile_lists in (("spec", ("index",), ()),
                                              ("status",
                                               ("index", "mode", "allocated", "remaining", "allocatedSlices"),
                                               ("allocatedProfiles", "remainingProfiles"))):
            part = obj.get(side)
            if part is None:
                continue
            if not isinstance(part, dict):
                return False
            for group in _items(part.get("groups")):
                if not (_fits(group.get("id"), str) and _fits(group.get("manufacturer"), str)):
                    return False
                for acc in _items(group.get("accelerators")):
                    if not _fits(acc.get("id"), str) or not all(_fits(acc.get(k), int) for k in acc_ints):
                        return False
                    for key in profile_lists:
                        for p in _items(acc.get(key)):
                            if type(p.get("name")) is not str or not _fits(p.get("count"), int):
                                return False
                    if side == "spec" and not _status_fits(acc.get("status")):
                        return False
    except _Misfit:
        return False
    return True


def _status_fits(status) -> bool:
    if status is None:
        return True
    if not isinstance(status, dict) or not _fits(status.get("unhealthy"), bool):
        return False
    if not all(status.get(key) is None or isinstance(status[key], dict) for key in ("maintenance", "health")):
        return False
    logical, physical = status.get("logicalSliced"), status.get("physicalSliced")
    if logical is not None and not (isinstance(logical, dict) and _fits(logical.get("count"), int)
                                    and _fits(logical.get("coresPercentageOvercommit"), bool)):
        return False
    if physical is None:
        return True
    if not isinstance(physical, dict) or not _fits(physical.get("count"), int):
        return False
    return all(type(p.get("name")) is str and _fits(p.get("count"), int) and _fits(p.get("memoryMib"), int)
               for p in _items(physical.get("profiles")))


class SnapshotError(ValueError):
    """An object that cannot enter a snapshot (no kind, no name, not a mapping)."""


def object_ref(obj: Mapping) -> str:
    """`Kind namespace/name` or `Kind name`, for messages."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    name = meta.get("name", "<unnamed>")
    return f"{obj.get('kind', '<no kind>')} {ns + '/' if ns else ''}{name}"


def name_of(obj: Mapping) -> str:
    return obj["metadata"]["name"]


def labels_of(obj: Mapping) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def annotations_of(obj: Mapping) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def is_deleting(obj: Mapping) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def _placed(obj: Mapping) -> tuple[str, tuple[str, str]]:
    """(kind, (namespace, name)) of an object with a known kind and a name."""
    kind, meta = obj["kind"], obj["metadata"]
    if not KNOWN_KINDS[kind][1]:
        return kind, ("", meta["name"])
    return kind, (meta.get("namespace") or "default", meta["name"])


def check_object(obj, origin: str, i: int, warnings: list[str]) -> tuple[str, tuple[str, str]] | None:
    """Where ``obj`` (item ``i`` of ``origin``) goes in a snapshot: ``(kind, (namespace, name))``;
    None for a kind accelpolicy does not use (a warning is appended to ``warnings``). Namespaced
    kinds without ``metadata.namespace`` get ``default``, as kubectl does.

    Raises :class:`SnapshotError` for what :meth:`Snapshot.from_objects` refuses (see there).
    """
    if not isinstance(obj, Mapping):
        raise SnapshotError(f"{origin}: item {i} is not an object (got {type(obj).__name__})")
    kind = obj.get("kind")
    if not kind or not isinstance(kind, str):
        name = (obj.get("metadata") or {}).get("name") if isinstance(obj.get("metadata"), Mapping) else None
        raise SnapshotError(f"{origin}: item {i}{f' (metadata.name {name})' if name else ''} has no kind")
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not meta.get("name"):
        raise SnapshotError(f"{origin}: {kind} at item {i} has no metadata.name")
    if kind not in KNOWN_KINDS:
        warnings.append(f"{origin}: skipped {object_ref(obj)}: kind {kind} is not used by accelpolicy")
        return None
    maps = [("metadata.labels", "label", meta.get("labels")),
            ("metadata.annotations", "annotation", meta.get("annotations"))]
    # propagated to the Node as labels (docs/agent.md "Labels, annotations and NodeFeatures")
    if kind == "NodeFeature":
        maps.append(("spec.labels", "label", (obj.get("spec") or {}).get("labels")))
    for field_path, what, values in maps:
        if values is not None and not isinstance(values, Mapping):
            raise SnapshotError(f"{origin}: {object_ref(obj)}: {field_path} must be a map")
        for key, value in (values or {}).items():
            if not isinstance(value, str):
                raise SnapshotError(f"{origin}: {object_ref(obj)}: {field_path}: {what} {key} must be a "
                                    f"string, got {value!r} (quote it in YAML)")
    if kind == "Devices" and not _devices_fit(obj):
        problem = _shape_problem(obj, DEVICES_SHAPE, ())
        if problem:
            raise SnapshotError(f"{origin}: {object_ref(obj)}: {problem}")
    return _placed(obj)


@dataclass(frozen=True)
class Snapshot:
    """Objects by kind, then by ``(namespace, name)`` (namespace "" for cluster-scoped kinds).

    ``warnings`` carries what was skipped while building it (unknown kinds). Build with
    :meth:`from_objects`; never mutate the dicts it holds.
    """

    objects: Mapping[str, Mapping[tuple[str, str], dict]]
    warnings: tuple[str, ...] = field(default=())
    _order: dict = field(default_factory=dict, compare=False, repr=False)  # kind -> its objects sorted

    @classmethod
    def from_objects(cls, objects: Iterable[Mapping], origin: str = "<objects>",
                     first_item: int = 0) -> "Snapshot":
        """Index ``objects``; unknown kinds are skipped with a warning; a later duplicate replaces an
        earlier one (as a re-apply would).

        Raises :class:`SnapshotError` naming ``origin`` and the object for a non-mapping object, a
        missing ``kind`` or ``metadata.name``, a label, annotation or NodeFeature ``spec.labels``
        value that is not a string, or a Devices field of the wrong type (:data:`DEVICES_SHAPE`). Namespaced
        kinds without ``metadata.namespace`` (Instances, LocalQueues, NodeFeatures) default to namespace
        ``default`` like kubectl does. Items are numbered from ``first_item`` (0-based position of the object
        in ``origin``).
        """
        index: dict[str, dict[tuple[str, str], dict]] = {}
        warnings: list[str] = []
        for i, obj in enumerate(objects, start=first_item):
            placed = check_object(obj, origin, i, warnings)
            if placed is not None:
                index.setdefault(placed[0], {})[placed[1]] = dict(obj)
        return cls.from_index(index, warnings)

    @classmethod
    def from_index(cls, index: Mapping[str, Mapping[tuple[str, str], dict]],
                   warnings: Iterable[str] = (), previous: "Snapshot | None" = None) -> "Snapshot":
        """A snapshot of objects already indexed by kind and ``(namespace, name)`` (as
        :func:`check_object` places them) and already checked: the caller's maps are copied (cheap:
        the objects are shared, never copied), so the caller may go on changing its maps, never the
        objects. A map given as a ``MappingProxyType`` is taken as it is (its dict never changes): the
        controller passes the same one again while a kind's objects are the same, and the incremental
        derive reuses what it derived from that kind. ``previous``: an earlier snapshot whose
        sorted lists (:meth:`list`) serve the kinds whose map is the same object."""
        frozen = {kind: items if isinstance(items, MappingProxyType) else MappingProxyType(dict(items))
                  for kind, items in index.items()}
        snapshot = cls(objects=MappingProxyType(frozen), warnings=tuple(warnings))
        if previous is not None:
            for kind, order in list(previous._order.items()):
                if previous.objects.get(kind) is frozen.get(kind, previous):
                    snapshot._order[kind] = order
        return snapshot

    def list(self, kind: str) -> list[dict]:
        """Objects of ``kind`` in (namespace, name) order, as kubectl lists them."""
        order = self._order.get(kind)
        if order is None:  # sorted once per snapshot: derive lists Nodes and Devices several times
            items = self.objects.get(kind, {})
            order = self._order[kind] = [items[key] for key in sorted(items)]
        return list(order)

    def get(self, kind: str, name: str, namespace: str = "") -> dict | None:
        return self.objects.get(kind, {}).get((namespace, name))

    def __iter__(self) -> Iterator[dict]:
        for kind in sorted(self.objects):
            yield from self.list(kind)

    def count(self, kind: str) -> int:
        return len(self.objects.get(kind, {}))
