"""Demand of one Pod of a PodSet for the admission check, and whether a node is selected by the
PodSet template (docs/concepts/pools-and-flavors.md "The AdmissionCheck `gpustack-node-devices`";
docs/reference/controller.md "Pod accelerator requests" and "Workload fit pin"). See
:mod:`runtime.engine.admissioncheck.check`."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from runtime.engine.devices.nodefacts import agent_rules
from runtime.engine.policy import Policy
from runtime.engine.resourcekeys import classifier_manufacturers, classifier_table
from runtime.model.normalize import QuantityError, parse_quantity
from runtime.model.poddemand import pod_containers
from runtime.model.poddemand import pod_demand as model_pod_demand


class AdmissionCheckError(ValueError):
    """A Workload this check cannot read (e.g. a request quantity that does not parse); the message
    names the Workload, PodSet, container and key."""


@dataclass(frozen=True)
class Demand:
    """One accelerator demand of one Pod: ``family`` (exclusive, shared, sliced, partitioned), the
    ``base`` resource (``nvidia.com/gpu``), ``count`` (exclusive/shared N), ``units`` (sliced U, 0 when
    the webhook has not written them) and ``profile`` (partition, published spelling)."""

    family: str
    base: str
    count: int = 0
    units: int = 0
    profile: str = ""


# --- demand -------------------------------------------------------------------------------------------
def _value(raw: Any) -> int:
    """``Value()`` of a quantity: rounded up to an integer."""
    return int(math.ceil(parse_quantity(raw)))


def _classifier(policy: Policy):
    cache = policy.__dict__.setdefault("_admissioncheck_classifier", [])
    if not cache:
        table = classifier_table(policy, agent_rules(policy).podResources.resourceKeysParams)
        cache.append((table, classifier_manufacturers(policy)))
    return cache[0]


def pod_demand(policy: Policy, pod_spec: Mapping, where: str = "") -> list[Demand]:
    """The accelerator demands of one Pod ``spec`` (:func:`runtime.model.poddemand.pod_demand`, the one
    implementation the admission rules share), sorted by family and base. Raises
    :class:`AdmissionCheckError` naming ``where``, the container and key when a value does not parse."""
    table, manufacturers = _classifier(policy)

    def value(raw: Any, container: Mapping, key: str) -> int:
        try:
            return _value(raw)
        except QuantityError as exc:
            raise AdmissionCheckError(
                f"{where} container {container.get('name')!r} resources[{key}]: {exc}") from None

    demand = model_pod_demand(pod_containers(pod_spec, table, manufacturers), table, value)
    return ([Demand("exclusive", b, count=n) for b, n in demand["exclusive"].items()]
            + [Demand("partitioned", b, count=1, profile=p) for b, p in demand["partitioned"].items()]
            + [Demand("shared", b, count=n) for b, n in demand["shared"].items()]
            + [Demand("sliced", b, units=u) for b, u in demand["sliced"].items()])


# --- node matching ------------------------------------------------------------------------------------
def _requirement_holds(req: Mapping, value: str | None) -> bool:
    op, values = req.get("operator"), [str(v) for v in req.get("values") or []]
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            have, want = int(value), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def node_selected(pod_spec: Mapping, node_name: str, labels: Mapping[str, str]) -> bool:
    """The Pod's ``nodeSelector`` and required node affinity (``nodeSelectorTerms`` ORed; within a
    term ``matchExpressions`` and ``matchFields`` on ``metadata.name`` ANDed) hold for the node —
    the scheduler's NodeAffinity rules."""
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(key) != str(value):
            return False
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms")
    if not required or terms is None:
        return True
    for term in terms:
        exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
        if not exprs and not fields:
            continue  # an empty term matches nothing
        if all(_requirement_holds(r, labels.get(r.get("key"))) for r in exprs) and \
                all(_requirement_holds(
                        r, node_name if r.get("key") == "metadata.name" else None) for r in fields):
            return True
    return False
