"""The offline commands' view of DRA nodes: a node whose accelerators come from ResourceSlices is
planned as its agent would plan it (docs/concepts/dra.md "Two kinds of accelerator node"; docs/concepts/dra.md
"Mixed clusters"), so ``accelpolicy get``, ``explain`` and ``audit`` over a snapshot show a DRA node's pool
before anything is installed. Pure.

A node is a DRA node when the snapshot holds current ResourceSlices of a configured driver naming it
(:func:`runtime.engine.devices.draslices.read_node`), as the agent's ``auto`` backend decides. For each,
:func:`with_dra_nodes` runs :func:`runtime.engine.devices.agentplan.plan_node` over the facts read from
the slices, the node's Pods and the ResourceClaims (the ledger, docs/concepts/dra.md "The ledger from
claims"), and puts its results in the snapshot: the device-manager NodeFeature and the Devices object (both
replaced: the slices are the source), the worker NodeFeature (only when the snapshot has none: an existing one
carries what the agent saw of the CPU) and the Pods' allocation annotations.

The CPU facts, absent an agent's: the Node's ``feature.gpustack.ai/cpu-name``/``cpu-family``
annotations and NFD's own ``cpu-model`` labels (rules/dra.yaml ``offlineCpuLabels``); when a worker
NodeFeature exists, its gKey labels the Devices object.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from runtime.engine.devices.agentplan import node_feature_name, plan_node
from runtime.engine.devices.health import as_read
from runtime.engine.devices.draclaims import claim_pod_resources
from runtime.engine.devices.draslices import DraReading, dra_drivers, dra_policy, orphan_slices, read_node
from runtime.engine.devices.nodefacts import agent_rules, gkey
from runtime.engine.policy import Policy
from runtime.engine.settings import settings_of
from runtime.engine.snapshot import Snapshot, annotations_of, labels_of, name_of
from runtime.model.facts import CpuFacts, parse_facts


@dataclass
class DraNode:
    """One DRA node of a snapshot: its slices' reading and where its CPU facts came from."""

    name: str
    reading: DraReading
    cpu_source: str


def dra_readings(policy: Policy, snapshot: Snapshot) -> tuple[dict[str, DraReading], list[str]]:
    """Node name -> its reading, for the Nodes with current slices of a configured driver; plus the
    notes on slices naming no Node of the snapshot (docs/node-facts-robustness.md "A malformed fact costs only
    its node (decision 19)")."""
    if not dra_drivers(policy) or not snapshot.count("ResourceSlice"):
        return {}, []
    slices = snapshot.list("ResourceSlice")
    nodes = {name_of(n) for n in snapshot.list("Node")}
    readings = {node: read_node(policy, node, slices) for node in sorted(nodes)}
    return {node: r for node, r in readings.items() if r.drivers}, orphan_slices(policy, slices, nodes)


def with_dra_nodes(policy: Policy, snapshot: Snapshot) -> tuple[Snapshot, dict[str, DraNode], list[str]]:
    """``snapshot`` with every DRA node planned from its slices (module docstring), the DRA nodes by
    name, and the warnings to show (unreadable devices, ignored slices, MIG-on GPUs, CPU unknown),
    which the new snapshot's ``warnings`` carry too (derive passes them on). The snapshot is returned
    unchanged when it has no slice of a configured driver."""
    readings, warnings = dra_readings(policy, snapshot)
    if not readings:
        return (Snapshot.from_index(snapshot.objects, list(snapshot.warnings) + warnings) if warnings
                else snapshot), {}, warnings
    settings = settings_of(policy, snapshot)
    index = {kind: dict(items) for kind, items in snapshot.objects.items()}
    rules = agent_rules(policy)
    out: dict[str, DraNode] = {}
    for name, reading in readings.items():
        node = snapshot.get("Node", name)
        worker = snapshot.get("NodeFeature", node_feature_name(policy, name, "worker"), rules.namespace)
        cpu, source = _cpu(policy, node, worker)
        facts = parse_facts({"node": name, "cpu": cpu.model_dump(), "accelerators": reading.accelerators},
                            "ResourceSlices")
        pods = [p for p in snapshot.list("Pod") if (p.get("spec") or {}).get("nodeName") == name]
        plan = plan_node(policy, facts, node, settings, worker_now=worker, pods=pods,
                         pod_resources=claim_pod_resources(policy, reading, snapshot.list("ResourceClaim"),
                                                           pods),
                         health=as_read(policy, facts.accelerators, snapshot.get("Devices", name)))
        dm_key = (rules.namespace, node_feature_name(policy, name, "deviceManager"))
        nf = index.setdefault("NodeFeature", {})
        nf.pop(dm_key, None)
        if plan.device_manager is not None:
            nf[dm_key] = plan.device_manager
        if worker is None:
            nf[(rules.namespace, node_feature_name(policy, name, "worker"))] = plan.worker
            if source == "none" or not cpu.vendorId:
                warnings.append(dra_policy(policy).messages.offlineCpu.format(
                    node=name, annotation=policy.key("cpuNameAnnotation"),
                    label=dra_policy(policy).offlineCpuLabels.vendor, gkey=gkey(policy, cpu)))
        devices = index.setdefault("Devices", {})
        devices.pop(("", name), None)
        if plan.devices is not None:
            devices[("", name)] = _devices_gkey(policy, plan.devices, worker)
        for patch in plan.pod_patches:
            key = (patch["metadata"]["namespace"], patch["metadata"]["name"])
            pod = index["Pod"][key]
            meta = {**pod["metadata"],
                    "annotations": {**annotations_of(pod), **patch["metadata"]["annotations"]}}
            index["Pod"][key] = {**pod, "metadata": meta}
        warnings += reading.warnings + reading.notes + reading.offers_nothing(policy)
        out[name] = DraNode(name, reading, source)
    return Snapshot.from_index(index, list(snapshot.warnings) + warnings), out, warnings


def _cpu(policy: Policy, node: Mapping[str, Any], worker: Mapping[str, Any] | None) -> tuple[CpuFacts, str]:
    """The node's CPU facts as the offline commands can know them, and from where: ``annotations``
    (the agent's, with the vendor from NFD's label, else the ``general.feature.gpustack.ai/<cpuManu>``
    key of the worker NodeFeature or, without one, of the Node), ``nfd`` (NFD's labels only), ``none``."""
    labels = labels_of(node)
    notes = annotations_of(node)
    nfd = dra_policy(policy).offlineCpuLabels
    vendor = labels.get(nfd.vendor, "")
    # general.feature.gpustack.ai/<cpuManu>: "true" (docs/agent.md "Labels, annotations and NodeFeatures"), an
    # agent's
    if not vendor:
        general = policy.prefix("general")
        source = ((worker.get("spec") or {}).get("labels") or {}) if worker is not None else labels
        manus = [k[len(general):] for k, v in source.items()
                 if k.startswith(general) and v == "true" and "-" not in k[len(general):]
                 and "." not in k[len(general):]]
        vendor = manus[0] if manus else ""
    by_vendor = {v.lower(): vendor_id for vendor_id, v in policy.node_facts.cpuVendors.items()}
    cpu = CpuFacts(vendorId=by_vendor.get(vendor.lower(), ""),
                   modelName=notes.get(policy.key("cpuNameAnnotation"), ""),
                   family=notes.get(policy.key("cpuFamilyAnnotation"), "") or labels.get(nfd.family, ""),
                   model=labels.get(nfd.model, ""))
    if cpu.modelName:
        return cpu, "annotations"
    return cpu, "nfd" if vendor or cpu.family else "none"


def _devices_gkey(policy: Policy, devices: dict[str, Any],
                  worker: Mapping[str, Any] | None) -> dict[str, Any]:
    """The planned Devices with the worker NodeFeature's gKey label (the agent's view of the CPU)
    instead of the offline one, when the snapshot has that NodeFeature."""
    if worker is None:
        return devices
    general = policy.prefix("general")
    keys = [k[len(general):] for k, v in ((worker.get("spec") or {}).get("labels") or {}).items()
            if k.startswith(general) and v == "true" and "." not in k[len(general):]]
    if not keys:
        return devices
    want = max(keys, key=lambda k: (len(k), [-ord(c) for c in k]))
    labels = {k: v for k, v in devices["metadata"]["labels"].items() if not k.startswith(general)}
    labels[f"{general}{want}"] = agent_rules(policy).trueValue
    return {**devices, "metadata": {**devices["metadata"], "labels": labels}}
