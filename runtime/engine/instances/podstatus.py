"""An Instance's status read back from its Pod, Service and Node (docs/concepts/instances.md "Instances" and
"Life cycle").

``phase_from_pod`` reads the Instance phase from the Pod's conditions through the ``instance-phase``
decision table; ``host_ips``, ``service_ports`` and ``allocations_from_pod`` fill the rest of the
status. Keys and address types come from rules (labels.yaml, instances/pod.yaml).
"""
from __future__ import annotations

import json

from runtime.engine.policy import Policy


def service_ports(service: dict | None) -> list[dict]:
    """``Instance.status.ports``: ``[{port, protocol, name, nodePort}]`` of the Service, or ``[]``
    until every port has its ``nodePort``."""
    ports = ((service or {}).get("spec") or {}).get("ports") or []
    if not ports or any(not p.get("nodePort") for p in ports):
        return []
    return [{"port": int(p["port"]), "protocol": p.get("protocol") or "TCP", "name": p.get("name", ""),
             "nodePort": int(p["nodePort"])} for p in ports]


def host_ips(policy: Policy, node: dict | None) -> list[dict]:
    """``Instance.status.hostIPs``: the Node's addresses of the types in ``service.hostAddressTypes``
    (ExternalIP first, then InternalIP), ``[{ip}]``, each IP once."""
    addresses = ((node or {}).get("status") or {}).get("addresses") or []
    out: list[dict] = []
    for kind in policy.ruleset.get("InstancePod").service.hostAddressTypes:
        for address in addresses:
            ip = address.get("address")
            if address.get("type") == kind and ip and {"ip": ip} not in out:
                out.append({"ip": ip})
    return out


def phase_from_pod(policy: Policy, pod: dict) -> dict:
    """``{phase[, phaseMessage]}`` of an Instance whose Pod exists (docs/concepts/instances.md "Life
    cycle")."""
    conditions = {c.get("type"): c for c in (pod.get("status") or {}).get("conditions") or []}

    def cond(kind: str) -> dict:
        return conditions.get(kind) or {"status": "Unknown"}

    scheduled = cond("PodScheduled")
    facts = {"scheduled": scheduled.get("status", "Unknown"),
             "scheduledMessage": scheduled.get("message") or scheduled.get("reason") or "",
             "initialized": cond("Initialized").get("status", "Unknown"),
             "initializedReason": cond("Initialized").get("reason") or "",
             "ready": cond("Ready").get("status", "Unknown"),
             "readyReason": cond("Ready").get("reason") or ""}
    _, out = policy.decision_table("instance-phase").decide(facts)
    return {k: v for k, v in out.items() if v != ""}


def allocations_from_pod(policy: Policy, pod: dict) -> list[dict]:
    """``Instance.status.allocations``: the Pod's allocation annotation (docs/agent.md "The Devices object and
    its ledger", key role ``allocation``), a JSON object container -> [group], with every container's groups
    merged: one entry per (group ``id``, ``manufacturer``) in first-seen order, accelerators concatenated in
    container order. An absent or unparsable annotation gives ``[]`` (the agent reports a bad one as
    ``InvalidAllocation``; the Instance just shows none)."""
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(policy.key("allocation"))
    if not text:
        return []
    try:
        by_container = json.loads(text)
    except ValueError:
        return []
    if not isinstance(by_container, dict):
        return []
    merged: dict[tuple[str, str], dict] = {}
    for groups in by_container.values():
        for group in groups if isinstance(groups, list) else []:
            if not isinstance(group, dict):
                continue
            key = (str(group.get("id", "")), str(group.get("manufacturer", "")))
            entry = merged.setdefault(key, {"id": key[0], "manufacturer": key[1], "accelerators": []})
            entry["accelerators"].extend(a for a in group.get("accelerators") or [] if isinstance(a, dict))
    return list(merged.values())
