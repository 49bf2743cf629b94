"""What admission may read of the cluster: a Snapshot after derivation, plus resolved settings.

:func:`admission_view` builds it from a raw snapshot: derivation (docs/concepts/pools-and-flavors.md "Pools
and flavors") fills in the InstanceTypes the controller would hold, with their computed ``status`` (entrance,
detail, capacities), so admission sees e.g. the fronting InstanceType of a queue. Lookups by label are
indexed once per view. Pure: no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from runtime.engine.admission.exceptions import EXCEPTION_KIND
from runtime.engine.policy import Policy
from runtime.engine.settings import settings_of
from runtime.engine.pools.derive import derive
from runtime.engine.snapshot import Snapshot, check_object, labels_of


_EMPTY: list = []


@dataclass
class AdmissionView:
    """Objects admission reads (``snapshot``) and the settings in force (name -> value)."""

    snapshot: Snapshot
    settings: Mapping[str, object]
    _label_index: dict = field(default_factory=dict, repr=False)
    _by_name: dict = field(default_factory=dict, repr=False)
    # What the admission engine derives once per view from the lists and maps the view holds (their
    # CEL values and memo key parts), by identity: a view is never changed, a rebuilt view starts empty.
    held: dict = field(default_factory=dict, repr=False, compare=False)

    def get(self, kind: str, name: str, namespace: str = "") -> list[dict]:
        """``[object]`` or ``[]``; the same list object on every call (callers must not mutate it).

        Only objects found are remembered (at most one entry per object of the view): a review naming
        objects that do not exist cannot grow the view."""
        key = (kind, name, namespace)
        hit = self._by_name.get(key)
        if hit is None:
            obj = self.snapshot.get(kind, name, namespace)
            if obj is None:
                return _EMPTY
            hit = self._by_name[key] = [obj]
        return hit

    def by_label(self, kind: str, key: str, value: str) -> list[dict]:
        """Objects of ``kind`` whose label ``key`` equals ``value``, in name order (a shared list)."""
        index = self._label_index.get((kind, key))
        if index is None:
            index = {}
            for obj in self.snapshot.list(kind):
                val = labels_of(obj).get(key)
                if val is not None:
                    index.setdefault(val, []).append(obj)
            self._label_index[(kind, key)] = index
        return index.get(value, _EMPTY)


# What derivation reads (runtime.engine.pools.derive): the admission view is derived from these kinds.
DERIVATION_KINDS = ("Node", "NodeFeature", "Devices", "Namespace", "ResourceFlavor", "ClusterQueue",
                    "LocalQueue", "InstanceType", "Secret")
# What derivation produces that admission reads (a derived view replaces the snapshot's own).
DERIVED_KINDS = ("InstanceType", "ResourceFlavor", "ClusterQueue", "LocalQueue")


def view_kinds(policy: Policy) -> frozenset[str]:
    """Every kind an admission view needs: what derivation reads plus each AdmissionPolicy's
    ``lookups`` kinds and the PolicyExceptions (docs/concepts/exceptions.md). A live view need only be
    rebuilt after an event of one of these kinds."""
    kinds = set(DERIVATION_KINDS) | {EXCEPTION_KIND}
    for doc in policy.ruleset.all("AdmissionPolicy"):
        kinds.update(lookup.kind for lookup in doc.spec.lookups)
    return frozenset(kinds)


def published_kinds(policy: Policy) -> frozenset[str]:
    """Every kind an admission view needs when the objects the controller published stand in for
    derivation (the admission process: docs/availability.md "Admission apart from reconciling"): the
    derived kinds as the cluster holds them (InstanceTypes with their status, ResourceFlavors,
    ClusterQueues, LocalQueues: what
    :func:`admission_view` would derive, once the controller reconciled), the settings Secret, and
    each AdmissionPolicy's ``lookups`` kinds, and the PolicyExceptions. No Devices, NodeFeatures or
    Namespaces: nothing is derived from them here."""
    kinds = set(DERIVED_KINDS) | {"Secret", EXCEPTION_KIND}
    for doc in policy.ruleset.all("AdmissionPolicy"):
        kinds.update(lookup.kind for lookup in doc.spec.lookups)
    return frozenset(kinds)


def admission_view(policy: Policy, snapshot: Snapshot | None, derive_state: bool = True, *,
                   live: bool = False, settings_namespace: str | None = None) -> AdmissionView:
    """The view admission judges against.

    ``derive_state`` True replaces the snapshot's InstanceTypes, ResourceFlavors, ClusterQueues and
    LocalQueues by the derived ones (InstanceTypes with status);
    False uses the snapshot as given (tests that spell out InstanceType status). ``None`` -> empty.
    ``live`` and ``settings_namespace`` are passed to :func:`runtime.engine.pools.derive.derive` (the
    controller's view of its watch caches: queue phases as Kueue reports them, the settings Secret
    in the controller's namespace).
    """
    snapshot = snapshot or Snapshot.from_objects([])
    if derive_state:
        state = derive(policy, snapshot, live=live, settings_namespace=settings_namespace)
        return view_of_state(policy, snapshot, state, settings_namespace)
    settings = settings_of(policy, snapshot, settings_namespace)
    return AdmissionView(snapshot=snapshot, settings=dict(settings.values))



def view_of_state(policy: Policy, snapshot: Snapshot, state, settings_namespace: str | None = None,
                  previous: AdmissionView | None = None) -> AdmissionView:
    """The view :func:`admission_view` builds, for a ``state`` (a DesiredState) already derived from
    ``snapshot`` (e.g. incrementally, with a DeriveMemo): the snapshot's kinds shared as they are
    (no object copied), the InstanceTypes, ResourceFlavors, ClusterQueues and LocalQueues replaced by
    the derived ones. ``previous``: the last view, whose sorted lists serve the kinds that did not change."""
    index = {kind: items for kind, items in snapshot.objects.items() if kind not in DERIVED_KINDS}
    warnings: list[str] = list(snapshot.warnings)
    for objects in (state.instance_types, state.resource_flavors, state.cluster_queues, state.local_queues):
        for i, obj in enumerate(objects):
            placed = check_object(obj, "derived", i, warnings)
            if placed is not None:
                index.setdefault(placed[0], {})[placed[1]] = obj
    settings = settings_of(policy, snapshot, settings_namespace)
    view = Snapshot.from_index(index, warnings, previous=previous.snapshot if previous is not None else None)
    return AdmissionView(snapshot=view, settings=dict(settings.values))
