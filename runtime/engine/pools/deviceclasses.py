"""The DeviceClasses accelpolicy derives for the DRA drivers of the rules (docs/concepts/dra.md "The ledger
from claims"). Pure.

One per ``DraDriver`` row, that is per (driver, manufacturer base key): named by rules/dra.yaml
``deviceClass.nameTemplate``, selecting the driver's whole accelerators with ``selectorTemplate``
(Kubernetes CEL; ``allDevicesSelectorTemplate`` for a row whose ``kind`` is a constant, the row's
``kind.selector`` for one whose kind is an expression), ``spec.extendedResourceName`` the manufacturer's
``<base>`` (rules/manufacturers.yaml), so a Pod asking for ``nvidia.com/gpu`` on a node without a device
plugin is served one of them; labelled ``resource.gpustack.ai/type: deviceclasses``
(rules/pools/derivation.yaml ``resourceTypes``), which is how the controller knows the ones it owns
(:func:`owned_device_class`).

:func:`device_class_mappings` is what Kueue needs when workloads request claims of these classes
directly (its Configuration ``resources.deviceClassMappings``): per ``<base>``, the class names.
"""
from __future__ import annotations

from typing import Any

from runtime.engine.devices.draslices import dra_drivers, dra_policy
from runtime.engine.policy import Policy
from runtime.engine.snapshot import labels_of


def device_classes(policy: Policy) -> list[dict[str, Any]]:
    """The desired DeviceClass objects, by name; empty when the rules have no DraDriver."""
    rules = dra_policy(policy)
    out = []
    for driver, row in sorted(dra_drivers(policy).items()):
        base = policy.manufacturers[row.manufacturer].base
        fields = {"driver": driver, "manufacturer": row.manufacturer, "base": base,
                  "typeAttribute": row.typeAttribute, "wholeType": row.wholeType}
        dc = rules.deviceClass
        if row.typeAttribute:
            selector = dc.selectorTemplate.format(**fields)
        else:   # the row's kind: every device whole (a constant), or its own selector (an expression)
            selector = row.kind.selector.format(**fields) if row.kind.expression is not None \
                else dc.allDevicesSelectorTemplate.format(**fields)
        out.append({
            "apiVersion": dc.apiVersion, "kind": "DeviceClass",
            "metadata": {"name": dc.nameTemplate.format(**fields),
                         "labels": {
                             policy.key("resourceType"): policy.derivation.resourceTypes[dc.resourceType]}},
            "spec": {"selectors": [{"cel": {"expression": selector}}],
                     "extendedResourceName": base},
        })
    return sorted(out, key=lambda c: c["metadata"]["name"])


def owned_device_class(policy: Policy, obj: dict) -> bool:
    """Whether ``obj`` is a DeviceClass accelpolicy derived (its ownership label)."""
    rules = dra_policy(policy)
    if rules is None:
        return False
    want = policy.derivation.resourceTypes[rules.deviceClass.resourceType]
    return labels_of(obj).get(policy.key("resourceType")) == want


def device_class_mappings(policy: Policy) -> list[dict[str, Any]]:
    """Kueue's ``resources.deviceClassMappings``: ``[{name: <base>, deviceClassNames: [...]}]`` by name."""
    by_base: dict[str, list[str]] = {}
    for dc in device_classes(policy):
        by_base.setdefault(dc["spec"]["extendedResourceName"], []).append(dc["metadata"]["name"])
    return [{"name": base, "deviceClassNames": sorted(names)} for base, names in sorted(by_base.items())]
