"""Kueue's resource charging (docs/concepts/pools-and-flavors.md "Kueue's resource charging"): the
Configuration fragment and how Kueue applies it.

:func:`kueue_configuration` expands rules/pools/kueue.yaml over the manufacturer table into the
``resources`` part of Kueue's Configuration (``excludeResourcePrefixes``, ``transformations``);
Pure: no I/O. What Kueue then charges a Pod is modelled test-side (tests/kueuecharging.py).
"""
from __future__ import annotations

from typing import Any

from runtime.model.normalize import format_decimal_quantity
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
    """The Kueue Configuration fragment.

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
    """True when the Kueue configuration excludes ``cpu`` (the charging's fallback): CPU-only Instance
    Pods carry their pool's flavor affinity and the CPU view counts Instance Pods."""
    return _rules(policy).cpu_excluded
