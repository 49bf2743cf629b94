"""Environment overrides of the manufacturer table, read once at agent start
(docs/tasks/add-manufacturer-or-preset.md "Add a manufacturer").

Pure: the caller passes the environment as a mapping. Variable names come from rules/agent.yaml
``manufacturerEnv`` (``GPUSTACK_<ID>_ACCELERATABLE_RESOURCE_NAME`` and friends).
"""
from __future__ import annotations

from typing import Mapping

from runtime.engine.devices.nodefacts import agent_rules
from runtime.engine.policy import Policy
from runtime.model.rulefiles import Manufacturer


def manufacturers_with_env(policy: Policy, environ: Mapping[str, str]) -> tuple[
        dict[str, Manufacturer], list[str]]:
    """The manufacturer table with every set, non-empty override applied, and the variables used.

    ``GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME=example.com/gpu`` makes NVIDIA's ``base``
    ``example.com/gpu``; an empty ``..._PARTITION_KIND`` is ignored (unset).
    """
    env = agent_rules(policy).manufacturerEnv
    table: dict[str, Manufacturer] = {}
    used: list[str] = []
    for manu_id, manu in policy.manufacturers.items():
        update = {}
        for field, suffix in env.fields.items():
            name = f"{env.prefix}{manu_id.upper()}{suffix}"
            value = environ.get(name)
            if value:
                update[field] = value
                used.append(name)
        table[manu_id] = manu.model_copy(update=update) if update else manu
    return table, used


def apply_manufacturer_env(policy: Policy, environ: Mapping[str, str]) -> list[str]:
    """Replace ``policy.manufacturers`` with :func:`manufacturers_with_env`; returns the variables used.
    Call once, on the agent's own Policy, before planning."""
    policy.manufacturers, used = manufacturers_with_env(policy, environ)
    return used
