"""The InstanceTypeFlavor catalog (docs/concepts/pools-and-flavors.md "The catalog: InstanceTypeFlavor"),
computed from the derived ResourceFlavors.

Catalog names are CEL (rules/pools/derivation.yaml ``spec.catalog``). Identical specs under one
name merge; two different specs under one name: the flavor first in name order wins.
"""
from __future__ import annotations

from runtime.engine.pools.flavors import FlavorPlan
from runtime.engine.policy import Policy


def catalog(policy: Policy, plans: dict[str, FlavorPlan], aware: bool) -> list[dict]:
    """InstanceTypeFlavor objects in name order."""
    entries: dict[str, dict] = {}
    generic = policy.manufacturer_table.genericSentinel
    for name in sorted(plans):
        plan = plans[name]
        variables = {"namePrefix": policy.derivation.namePrefix, "gKey": plan.gkey, "aKey": plan.akey,
                     "os": plan.os, "arch": plan.arch, "aware": aware}
        notes = plan.notes
        if plan.kind == "cpu":
            cat_name = policy.derivation.catalog.cpu.evaluate(variables)
            if aware:
                spec = {"generalGroup": plan.gkey, "acceleratable": False,
                        "manufacturer": notes.get("manufacturer", ""), "product": notes.get("product", "")}
            else:
                spec = {"generalGroup": generic, "acceleratable": False, "manufacturer": generic}
        else:
            cat_name = policy.derivation.catalog.device.evaluate(variables)
            spec = {"acceleratable": True, "acceleratorGroup": plan.akey,
                    "manufacturer": notes.get("manufacturer", ""), "product": notes.get("product", ""),
                    "memory": notes.get("memory", ""), "cores": notes.get("cores", ""),
                    "sliceable": notes.get("sliceable") == "true"}
            if aware:
                spec = {"generalGroup": plan.gkey, **spec}
        spec = {k: v for k, v in spec.items() if v != ""}
        entries.setdefault(cat_name, spec)  # first in flavor-name order wins
    return [{"apiVersion": "worker.gpustack.ai/v1", "kind": "InstanceTypeFlavor",
             "metadata": {"name": name}, "spec": entries[name]} for name in sorted(entries)]
