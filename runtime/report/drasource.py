"""Where a node's accelerators come from, for `accelpolicy explain instancetype` (docs/concepts/dra.md "Two
kinds of accelerator node" and "Views per manufacturer"; docs/concepts/dra.md "Mixed clusters"): the
ResourceSlices of a DRA driver (then also the MIG-on GPUs that offer nothing and the devices that could not be
read), or NVML through the agent's device-manager NodeFeature (a device-plugin node), or nothing. A
device-plugin node whose NodeFeature the snapshot lacks (a snapshot of Nodes and Devices only) is named by the
Devices object its ledger rows were read from, not called accelerator-less beside them. Messages:
rules/dra.yaml ``messages.source*``. Pure."""
from __future__ import annotations

from typing import Iterable

from runtime.engine.devices.agentplan import node_feature_name
from runtime.engine.devices.draoffline import dra_readings
from runtime.engine.devices.draslices import dra_policy
from runtime.engine.devices.nodefacts import agent_rules
from runtime.engine.policy import Policy
from runtime.engine.pools import accelerators
from runtime.engine.snapshot import Snapshot


def accelerator_sources(policy: Policy, snapshot: Snapshot, nodes: Iterable[str]) -> dict[str, dict]:
    """Node -> ``{source: dra|plugin|none, message, offersNothing: [...], unreadable: [...]}`` for
    ``nodes``; empty when the rules have no DraPolicy (DRA off: every node is a device-plugin node).

    ``plugin``: the node's device-manager NodeFeature is in the snapshot (``sourcePlugin``), or it is not
    and the node's Devices object lists healthy accelerators (``sourceDevices``: the ledger the views
    add up, docs/concepts/dra.md); ``none`` only when neither is there."""
    rules = dra_policy(policy)
    if rules is None:
        return {}
    readings, _ = dra_readings(policy, snapshot)
    namespace = agent_rules(policy).namespace
    out = {}
    for node in nodes:
        manager = node_feature_name(policy, node, "deviceManager")
        reading = readings.get(node)
        if reading is not None:
            out[node] = {"source": "dra", "message": rules.messages.sourceDra.format(
                drivers=", ".join(reading.drivers), slices=", ".join(reading.slices),
                count=len(reading.accelerators)),
                "offersNothing": reading.offers_nothing(policy), "unreadable": list(reading.warnings)}
        elif snapshot.get("NodeFeature", manager, namespace) is not None:
            out[node] = {"source": "plugin", "message": rules.messages.sourcePlugin.format(name=manager),
                         "offersNothing": [], "unreadable": []}
        elif (count := _device_count(policy, snapshot, node)):
            out[node] = {"source": "plugin", "message": rules.messages.sourceDevices.format(
                node=node, count=count, name=manager), "offersNothing": [], "unreadable": []}
        else:
            out[node] = {"source": "none", "message": rules.messages.sourceNone.format(name=manager),
                         "offersNothing": [], "unreadable": []}
    return out


def _device_count(policy: Policy, snapshot: Snapshot, node: str) -> int:
    """How many healthy accelerators the node's Devices object lists (0 without one)."""
    devices = snapshot.get("Devices", node)
    return sum(1 for _ in accelerators(policy, devices)) if devices is not None else 0


def render_sources(sources: dict[str, dict]) -> list[str]:
    """The text lines of :func:`accelerator_sources` (none when it is empty)."""
    if not sources:
        return []
    lines = ["accelerators from:"]
    for node, info in sorted(sources.items()):
        lines.append(f"  {node}: {info['message']}")
        lines += [f"    {line}" for line in info["offersNothing"] + info["unreadable"]]
    return lines
