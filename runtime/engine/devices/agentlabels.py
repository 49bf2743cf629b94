"""The agent's label sets and Node annotations (docs/agent.md "Labels, annotations and NodeFeatures").

* :func:`managed_value` - decision 14, first match wins.
* :func:`worker_labels` - ``spec.labels`` of ``<node>-gpustack-worker``.
* :func:`device_manager_labels` - ``spec.labels`` of ``<node>-gpustack-device-manager``.
* :func:`cpu_annotations` - the two CPU annotations the agent patches on its Node.

Label keys come from rules/labels.yaml (prefixes, keys) and rules/agent.yaml (suffixes).
"""
from __future__ import annotations

from typing import Mapping

from runtime.engine.devices.nodefacts import AcceleratorGroup, agent_rules, gkey
from runtime.model.normalize import format_memory_mib, sanitize_label_value
from runtime.engine.policy import Policy
from runtime.engine.settings import Settings
from runtime.model.facts import CpuFacts


def managed_value(policy: Policy, worker_labels_now: Mapping[str, str] | None,
                  node_labels: Mapping[str, str] | None, settings: Settings) -> str | None:
    """The worker NodeFeature's managed-key value, or None when the key is absent.

    1. the worker NodeFeature's own non-empty value; 2. the Node's non-empty label; 3. ``"true"``
    when ``node-management-manual`` is false; 4. absent.
    """
    key = policy.key("managed")
    rules = agent_rules(policy)
    for source in (worker_labels_now or {}, node_labels or {}):
        if source.get(key):
            return str(source[key])
    if not settings.flag(rules.settings.manual):
        return rules.trueValue
    return None


def worker_labels(policy: Policy, cpu: CpuFacts, cores: int, managed: str | None,
                  has_accelerator: bool, settings: Settings) -> dict[str, str]:
    """Worker keys: managed, ``general.*/<cpuManu>``, ``<gKey>``, ``<gKey>.count`` (cores > 0), and the
    cpu-only key when ``instance-type-mixed-on-node`` is false and the node has no accelerator. ``cores``
    is the Node's rounded-up ``status.capacity.cpu``.
    """
    rules = agent_rules(policy)
    general = policy.prefix("general")
    key = gkey(policy, cpu)
    labels: dict[str, str] = {}
    if managed is not None:
        labels[policy.key("managed")] = managed
    labels[f"{general}{key.split('-', 1)[0]}"] = rules.trueValue
    labels[f"{general}{key}"] = rules.trueValue
    if cores > 0:
        labels[f"{general}{key}{rules.suffixes.count}"] = str(cores)
    if not has_accelerator and not settings.flag(rules.settings.mixedOnNode):
        labels[policy.key("cpuOnly")] = rules.trueValue
    return labels


def device_manager_labels(policy: Policy, groups: list[AcceleratorGroup]) -> dict[str, str]:
    """Device-manager keys for every group.

    ``.count`` counts the accelerators installed in the group, healthy or not, in maintenance or not
    (decision 26): the flavor a node contributes is named by it, and a failed or withdrawn accelerator moves
    only the views, the usable quota and the ledger (docs/concepts/pools-and-flavors.md "Quota follows the
    usable accelerators").

    Every value passes SanitizeLabelValue (docs/agent.md "Normalization"); ``.family``, ``.comcap``,
    ``.driver-version`` and ``.runtime-version`` are omitted when empty; ``.cores`` is written even when 0,
    except for a group a DRA driver published: its drivers do not publish cores, so the key is omitted
    (docs/concepts/dra.md "Two kinds of accelerator node").
    """
    rules = agent_rules(policy)
    sfx = rules.suffixes
    acc = policy.prefix("acceleratable")
    raw: dict[str, str] = {}
    for group in groups:
        manu = f"{acc}{group.manufacturer}"
        raw.setdefault(manu, rules.trueValue)
        if group.driver_version:
            raw.setdefault(f"{manu}{sfx.driverVersion}", group.driver_version)
        if group.runtime_version:
            raw.setdefault(f"{manu}{sfx.runtimeVersion}", group.runtime_version)
        base = f"{acc}{group.akey}"
        raw[base] = rules.trueValue
        raw[f"{base}{sfx.count}"] = str(len(group.accelerators))
        raw[f"{base}{sfx.memory}"] = format_memory_mib(group.memory)
        if not group.accelerators[0].dra:
            raw[f"{base}{sfx.cores}"] = str(group.cores)
        if group.family:
            raw[f"{base}{sfx.family}"] = group.family
        raw[f"{base}{sfx.product}"] = group.name
        if group.compute_capability:
            raw[f"{base}{sfx.comcap}"] = group.compute_capability
    return {k: sanitize_label_value(v) for k, v in raw.items()}


def cpu_annotations(policy: Policy, cpu: CpuFacts) -> dict[str, str]:
    """The CPU name (raw model name) and CPU family annotations; empty values skipped."""
    out = {policy.key("cpuNameAnnotation"): cpu.modelName, policy.key("cpuFamilyAnnotation"): cpu.family}
    return {k: v for k, v in out.items() if v}

