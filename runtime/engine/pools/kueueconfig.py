"""Kueue's resource charging (docs/concepts/pools-and-flavors.md "Kueue's resource charging"): the
Configuration fragment and how Kueue applies it.

:func:`kueue_configuration` expands rules/pools/kueue.yaml over the manufacturer table into the
``resources`` part of Kueue's Configuration (``excludeResourcePrefixes``, ``transformations``).
:func:`workload_requests` applies such a fragment to a Pod the way Kueue v0.17.0 computes a
Workload's PodSet requests, so tests can show what a queue is charged without running Kueue.
Pure: no I/O.
"""
from __future__ import annotations

import math
from decimal import Decimal
from typing import Any, Mapping

from runtime.model.normalize import format_decimal_quantity, parse_quantity
from runtime.engine.policy import Policy
from runtime.engine.resourcekeys import classifier_manufacturers, classifier_table
from runtime.model.resourcefamily import resource_family
from runtime.model.kueue import KueueConfigurationSpec
from runtime.model.rulefiles import Manufacturer


class KueueConfigurationError(ValueError):
    """rules/pools/kueue.yaml does not fit the other rule files (message names the row and why)."""


def _rules(policy: Policy) -> KueueConfigurationSpec:
    return policy.ruleset.get("KueueConfiguration")


def _fmt(m: Manufacturer) -> dict[str, str]:
    return {"base": m.base, "id": m.id, "kind": m.partitionKind}


def credits_resource(policy: Policy, manufacturer: Manufacturer) -> str:
    """``credits.gpustack.ai/<id>``: the accelerated ClusterQueues' covered resource
    (docs/concepts/pools-and-flavors.md "Queues and the entrance"), from rules/labels.yaml
    ``prefixes.credits``."""
    return policy.prefix("credits") + manufacturer.id


def _excluded_prefixes(rules: KueueConfigurationSpec, table: dict,
                       manufacturers: list[Manufacturer]) -> list[str]:
    """The global prefixes as written ({visibilityPrefix}: the classifier table's, its one home), then
    the per-manufacturer rows; a prefix listed twice is refused."""
    prefixes: list[str] = [p.format(visibilityPrefix=table["visibilityPrefix"])
                           for p in rules.excludeResourcePrefixes.global_]
    for m in manufacturers:
        for row in rules.excludeResourcePrefixes.perManufacturer:
            if row.partitionKindOnly and not m.partitionKind:
                continue
            prefixes.append(row.prefix.format(**_fmt(m)))
    seen: set[str] = set()
    for prefix in prefixes:
        if prefix in seen:
            raise KueueConfigurationError(
                f"KueueConfiguration: excludeResourcePrefixes lists {prefix!r} twice")
        seen.add(prefix)
    return prefixes


def _credits_per_row(policy: Policy, rules: KueueConfigurationSpec) -> dict[int, int]:
    """Row index -> credits of the rows with ``credits`` (CEL over ``constants``, a positive integer)."""
    constants = policy.constants.model_dump()
    out = {}
    for i, row in enumerate(rules.transformations):
        if row.credits is None:
            continue
        value = row.credits.evaluate({"constants": constants})
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise KueueConfigurationError(
                f"KueueConfiguration: transformations[{i}].credits ({row.credits}) must give a positive "
                f"integer, got {value!r}")
        out[i] = int(value)
    return out


def kueue_configuration(policy: Policy) -> dict:
    """The Kueue Configuration fragment of docs/concepts/pools-and-flavors.md "Kueue's resource charging".

    Returns ``{"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "resources":
    {"excludeResourcePrefixes": [...], "transformations": [...]}}``. Order is deterministic: the
    global prefixes as written, then per manufacturer (rules/manufacturers.yaml order) the
    ``perManufacturer`` rows; transformations per manufacturer in row order. Each transformation is
    ``{input, strategy[, multiplyBy][, outputs: {<credits resource>: <quantity>}]}``; a row without
    ``credits`` has no outputs (with ``Replace``, Kueue ignores that input). Quantities are
    Kubernetes canonical (``1600k``, ``160k``, ``1``).

    Raises :class:`KueueConfigurationError` when a row's input does not classify into its declared
    family (docs/reference/controller.md "Pod accelerator requests"), a credits expression is not a positive
    integer, or a prefix is listed twice.
    """
    rules = _rules(policy)
    table = classifier_table(policy, rules.resourceKeysParams)
    classifier = classifier_manufacturers(policy)
    manufacturers = list(policy.manufacturers.values())
    prefixes = _excluded_prefixes(rules, table, manufacturers)
    credits_per_row = _credits_per_row(policy, rules)
    transformations: list[dict[str, Any]] = []
    for m in manufacturers:
        for i, row in enumerate(rules.transformations):
            if row.partitionKindOnly and not m.partitionKind:
                continue
            key = row.input.format(**_fmt(m))
            family = resource_family(key, table, classifier)["family"]
            if family != row.family:
                raise KueueConfigurationError(
                    f"KueueConfiguration: transformations[{i}].input {row.input!r} gives {key!r} for "
                    f"manufacturer {m.id}, which classifies as {family}, not {row.family}")
            for prefix in prefixes:
                if key.startswith(prefix):
                    raise KueueConfigurationError(
                        f"KueueConfiguration: transformations[{i}].input {key!r} is excluded by prefix "
                        f"{prefix!r} (Kueue drops excluded keys before transforming)")
            entry: dict[str, Any] = {"input": key, "strategy": row.strategy}
            if row.multiplyBy:
                entry["multiplyBy"] = row.multiplyBy.format(**_fmt(m))
            if i in credits_per_row:
                entry["outputs"] = {credits_resource(policy, m): format_decimal_quantity(credits_per_row[i])}
            transformations.append(entry)
    return {"apiVersion": rules.apiVersion, "kind": rules.kind,
            "resources": {"excludeResourcePrefixes": prefixes, "transformations": transformations}}


def cpu_excluded(policy: Policy) -> bool:
    """True when the Kueue configuration excludes ``cpu`` (docs/concepts/pools-and-flavors.md "Kueue's
    resource charging" fallback): CPU-only Instance Pods carry their pool's flavor affinity and the CPU view
    counts Instance Pods."""
    return _rules(policy).cpu_excluded


# --- what Kueue charges ----------------------------------------------------------------------------------
def _container_requests(container: Mapping) -> dict[str, Decimal]:
    """A container's effective requests: ``requests``, a key only in ``limits`` defaulting to its
    limit (kube-apiserver's defaulting of a created Pod)."""
    res = container.get("resources") or {}
    merged = {k: v for k, v in (res.get("limits") or {}).items()}
    merged.update(res.get("requests") or {})
    return {k: parse_quantity(v) for k, v in merged.items()}


def pod_requests(pod_spec: Mapping) -> dict[str, Decimal]:
    """Σ of a Pod's requests as Kueue reads a PodSet template (k8s.io/component-helpers v0.35.3
    ``resource.PodRequests``, used by Kueue v0.17.0 ``pkg/workload/workload.go``
    ``totalRequestsFromPodSets``): app containers and restartable init containers (native sidecars)
    summed; each other init container counts with the sidecars before it; per resource the larger of
    the two; plus ``overhead``. Values are exact decimals (cores for ``cpu``)."""
    total: dict[str, Decimal] = {}
    for container in pod_spec.get("containers") or []:
        for k, v in _container_requests(container).items():
            total[k] = total.get(k, Decimal(0)) + v
    sidecars: dict[str, Decimal] = {}
    init_max: dict[str, Decimal] = {}
    for container in pod_spec.get("initContainers") or []:
        reqs = _container_requests(container)
        if container.get("restartPolicy") == "Always":
            for k, v in reqs.items():
                total[k] = total.get(k, Decimal(0)) + v
                sidecars[k] = sidecars.get(k, Decimal(0)) + v
            use = dict(sidecars)
        else:
            use = dict(reqs)
            for k, v in sidecars.items():
                use[k] = use.get(k, Decimal(0)) + v
        for k, v in use.items():
            init_max[k] = max(init_max.get(k, Decimal(0)), v)
    for k, v in init_max.items():
        total[k] = max(total.get(k, Decimal(0)), v)
    for k, v in (pod_spec.get("overhead") or {}).items():
        total[k] = total.get(k, Decimal(0)) + parse_quantity(v)
    return total


def _value(q: Decimal) -> int:
    """``resource.Quantity.Value()``: rounded up to an integer."""
    return int(math.ceil(q))


def workload_requests(configuration: Mapping, pod: Mapping) -> dict[str, int]:
    """What Kueue v0.17.0 charges for one Pod: its Workload's PodSet requests.

    ``configuration``: a Configuration dict as :func:`kueue_configuration` returns (only
    ``resources`` is read); ``pod``: a Pod object (after the mutating webhooks). Returns resource
    name -> Kueue's integer value (``cpu`` in millicores, everything else ``Value()``, rounded up;
    ``resources.ResourceValue``). Semantics, from Kueue v0.17.0 ``pkg/workload/workload.go``:

    1. :func:`pod_requests` of the Pod spec;
    2. ``dropExcludedResources``: a resource whose name starts with any ``excludeResourcePrefixes``
       entry is dropped;
    3. ``applyResourceTransformations``: when no remaining resource is a transformation input the
       requests stay as they are; otherwise for each resource with a transformation, the quantity is
       multiplied by ``Value()`` of the ``multiplyBy`` resource when the Pod requests it, each output
       adds ``output × Value(quantity)``, and the input itself is kept only with ``Retain``; other
       resources pass through.
    """
    resources = configuration.get("resources") or {}
    excluded = list(resources.get("excludeResourcePrefixes") or [])
    transforms = {t["input"]: t for t in resources.get("transformations") or []}
    requests = {k: v for k, v in pod_requests((pod.get("spec") or {})).items()
                if not any(k.startswith(p) for p in excluded)}
    if any(k in transforms for k in requests):
        out: dict[str, Decimal] = {}
        for name, quantity in requests.items():
            mapping = transforms.get(name)
            if mapping is None:
                out[name] = quantity
                continue
            multiply_by = mapping.get("multiplyBy")
            if multiply_by and multiply_by in requests:
                quantity = quantity * _value(requests[multiply_by])
            for output, factor in (mapping.get("outputs") or {}).items():
                out[output] = out.get(output, Decimal(0)) + parse_quantity(factor) * _value(quantity)
            if (mapping.get("strategy") or "Retain") == "Retain":
                out[name] = quantity
        requests = out
    return {
        name: int(math.ceil(q * 1000)) if name == "cpu" else _value(q)
        for name, q in sorted(requests.items())}
