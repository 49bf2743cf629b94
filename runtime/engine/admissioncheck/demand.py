"""Demand of one Pod of a PodSet for the admission check, and whether a node is selected by the
PodSet template (spec/pools.md §8.2; pod-requests.md §4, §9). See :mod:`runtime.engine.admissioncheck.check`."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from runtime.engine.devices.nodefacts import agent_rules
from runtime.engine.policy import Policy
from runtime.engine.resourcekeys import classifier_manufacturers, classifier_table
from runtime.model.normalize import QuantityError, parse_quantity
from runtime.model.resourcefamily import resource_family


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
    """``Value()`` of a quantity: rounded up to an integer (pod-requests.md §4)."""
    return int(math.ceil(parse_quantity(raw)))


def _classifier(policy: Policy):
    cache = policy.__dict__.setdefault("_admissioncheck_classifier", [])
    if not cache:
        table = classifier_table(policy, agent_rules(policy).podResources.resourceKeysParams)
        cache.append((table, classifier_manufacturers(policy)))
    return cache[0]


def pod_demand(policy: Policy, pod_spec: Mapping, where: str = "") -> list[Demand]:
    """The accelerator demands of one Pod ``spec`` (see the module docstring), sorted by family and
    base. Raises :class:`AdmissionCheckError` naming ``where``, the container and key when a value does
    not parse."""
    table, manufacturers = _classifier(policy)
    units_key = agent_rules(policy).capacity.slicedUnits  # "{base}.sliced.units" (rules/agent.yaml)
    init = [c for c in pod_spec.get("initContainers") or [] if c.get("restartPolicy") != "Always"]
    app = list(pod_spec.get("containers") or [])
    exclusive_app: dict[str, int] = {}
    exclusive_init: dict[str, int] = {}
    shared: dict[str, int] = {}
    units: dict[str, int] = {}
    profiles: dict[str, str] = {}
    for group, containers in (("init", init), ("app", app)):
        for container in containers:
            resources = container.get("resources") or {}
            values = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
            for key in sorted(values):
                cls = resource_family(key, table, manufacturers)
                family, base = cls["family"], cls["base"]
                if family not in ("exclusive", "shared", "sliced", "partitioned"):
                    continue
                try:
                    value = _value(values[key])
                except QuantityError as exc:
                    raise AdmissionCheckError(f"{where} container {container.get('name')!r} "
                                              f"resources[{key}]: {exc}") from None
                if family == "exclusive":
                    target = exclusive_app if group == "app" else exclusive_init
                    target[base] = target.get(base, 0) + value if group == "app" else max(target.get(base, 0), value)
                elif family == "shared":  # the family's one key, <base>.shared
                    shared[base] = max(shared.get(base, 0), value)
                elif family == "sliced":
                    units.setdefault(base, 0)
                    if key == units_key.format(base=base):
                        units[base] = max(units[base], value)
                elif family == "partitioned" and cls["profile"]:
                    profiles[base] = cls["profile"]
    out = [Demand("exclusive", b, count=max(exclusive_app.get(b, 0), exclusive_init.get(b, 0)))
           for b in sorted(set(exclusive_app) | set(exclusive_init))]
    out += [Demand("partitioned", b, count=1, profile=p) for b, p in sorted(profiles.items())]
    out += [Demand("shared", b, count=n) for b, n in sorted(shared.items())]
    out += [Demand("sliced", b, units=u) for b, u in sorted(units.items())]
    return [d for d in out if d.count > 0 or d.family == "sliced"]


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
                all(_requirement_holds(r, node_name if r.get("key") == "metadata.name" else None) for r in fields):
            return True
    return False
