"""Probe facts -> normalized node facts: gKey, accelerator groups, group IDs (docs/agent.md "Normalization").

Pure: every table comes from rules (``NodeFacts`` in rules/node-facts.yaml, ``NodeAgent`` in
rules/agent.yaml, ``ManufacturerTable``). The only environment input, the group-ID memory switch
(``GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY``), is passed in by the caller as a bool.

Sources: docs/agent.md "Probe facts".
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from runtime.model.normalize import fnv64a_hex, format_memory_mib, normalize_name, parse_quantity
from runtime.engine.policy import Policy
from runtime.model.agent import NodeAgentSpec
from runtime.model.facts import AcceleratorFacts, CpuFacts


def agent_rules(policy: Policy) -> NodeAgentSpec:
    """The ``NodeAgent`` rule document (rules/agent.yaml), looked up once per Policy (the ledger rule asks
    for it several times per charge)."""
    found = policy.__dict__.get("_agent_rules")
    if found is None:
        found = policy.__dict__["_agent_rules"] = policy.ruleset.get("NodeAgent")
    return found


# --- CPU -------------------------------------------------------------------------------------------
def cpu_vendor(policy: Policy, cpu: CpuFacts) -> str:
    """Vendor name from ``vendor_id`` (x86) or ``CPU implementer`` (arm64); "" when unknown."""
    nf = policy.node_facts
    if cpu.vendorId:
        return nf.cpuVendors.get(cpu.vendorId, "")
    return nf.cpuImplementers.get(cpu.implementer.strip().lower(), "")


def cpu_manufacturer(policy: Policy, cpu: CpuFacts) -> str:
    """``manu``: the vendor lower-cased; the generic sentinel when empty or unknown."""
    manu = cpu_vendor(policy, cpu).lower()
    unknown = {v.lower() for v in policy.node_facts.unknownVendors}
    return policy.manufacturer_table.genericSentinel if manu in unknown else manu


def gkey(policy: Policy, cpu: CpuFacts) -> str:
    """The general (CPU) key, e.g. ``intel-xeon-platinum-8259cl``, ``amd-25-1``, ``generic``.

    Never empty. The slug budget is ``keyBudget - len(manu)`` (decision 13).
    """
    manu = cpu_manufacturer(policy, cpu)
    budget = policy.node_facts.keyBudget - len(manu)
    name = cpu.modelName.strip()
    if name and not name.startswith("@"):
        ident = normalize_name(name, manu, budget, policy.cruft)
    elif cpu.family and cpu.model:
        ident = f"{cpu.family}-{cpu.model}"
    else:
        ident = ""
    return f"{manu}-{ident}" if ident else manu


def cores_from_capacity(capacity_cpu: str | int | None) -> int:
    """The Node's ``status.capacity.cpu`` rounded up (``"3500m"`` -> 4); 0 when absent.

    Raises :class:`runtime.model.normalize.QuantityError` for a value that is not a quantity.
    """
    if capacity_cpu in (None, ""):
        return 0
    return int(math.ceil(parse_quantity(capacity_cpu)))


# --- accelerators ----------------------------------------------------------------------------------
def adjusted_memory_mib(policy: Policy, acc: AcceleratorFacts) -> int:
    """NVML total MiB, times 16 // 15 for GDDR (bus < 1024 bits) with ECC on; a DRA-published
    accelerator says so itself (``eccReserved``: its driver row's GDDR products,
    docs/concepts/dra.md "The same GPUs give the same labels")."""
    nf = policy.node_facts
    if acc.manufacturer not in agent_rules(policy).eccRuleManufacturers:
        return acc.memoryMib
    reserved = acc.eccReserved if acc.eccReserved is not None \
        else acc.eccEnabled and 0 < acc.memoryBusWidth < nf.gddrBusWidthBelow
    if reserved:
        mul, div = nf.eccMultiply
        return acc.memoryMib * mul // div
    return acc.memoryMib


def family(policy: Policy, manufacturer: str, major: int, minor: int) -> str:
    """Product family from compute capability (``8.6`` -> ``Ampere``); "" when unknown."""
    if manufacturer not in agent_rules(policy).familyTableManufacturers:
        return ""
    for row in policy.node_facts.nvidiaFamilies:
        if major in row.major:
            if row.minorBelow is not None and minor >= row.minorBelow:
                return row.familyAtOrAbove
            return row.family
    return ""


def compute_capability(major: int, minor: int) -> str:
    """``<major>.<minor>``; "" when major is 0."""
    return f"{major}.{minor}" if major > 0 else ""


def runtime_version(policy: Policy, cuda_driver_version: int) -> str:
    """``13000`` -> ``13.0``, ``12040`` -> ``12.4``; "" when <= 0."""
    if cuda_driver_version <= 0:
        return ""
    major_div, minor_div = agent_rules(policy).runtimeVersionDivisors
    return f"{cuda_driver_version // major_div}.{(cuda_driver_version % major_div) // minor_div}"


def memory_suffix(policy: Policy, mib: int) -> str:
    """Group memory as a short suffix (``16384`` -> ``16g``; < 1024 -> ``1g``; 0 -> ``0g``)."""
    rule = agent_rules(policy).memorySuffix
    if mib <= 0:
        return rule.zero
    if mib < rule.smallBelowMib:
        return rule.small
    text = format_memory_mib(mib).lower()
    if rule.stripTrailing and text.endswith(rule.stripTrailing):
        text = text[: -len(rule.stripTrailing)]
    return text


def group_id(policy: Policy, manufacturer: str, name: str, mib: int, with_memory: bool) -> str:
    """``NVIDIA A10G`` -> ``a10g``; with the memory switch ``Tesla T4`` -> ``tesla-t4-16g``."""
    budget = policy.node_facts.keyBudget - len(manufacturer)
    if with_memory:
        budget -= policy.node_facts.groupIdMemorySuffixBudget
    ident = normalize_name(name, manufacturer, budget, None)
    return f"{ident}-{memory_suffix(policy, mib)}" if with_memory else ident


def _repeated(ids: dict[tuple[str, str, int], str]) -> set[tuple[str, str]]:
    """(manufacturer, id) pairs that more than one group key maps to."""
    count: dict[tuple[str, str], int] = {}
    for (manu, _, _), ident in ids.items():
        count[(manu, ident)] = count.get((manu, ident), 0) + 1
    return {pair for pair, n in count.items() if n > 1}


def disambiguated_group_id(policy: Policy, manufacturer: str, name: str, mib: int) -> str:
    """The group ID with memory, cut to leave room for ``-<h>``, where ``h`` is the first
    ``groupIdHashDigits`` hex digits of FNV-1a 64 over ``<name>/<mib>``: stable for the same product
    and memory on every node, within the key budget of decision 13."""
    digits = policy.node_facts.groupIdHashDigits
    budget = policy.node_facts.keyBudget - len(manufacturer)
    base = group_id(policy, manufacturer, name, mib, True)[: budget - 1 - digits].rstrip("-")
    return f"{base}-{fnv64a_hex(f'{name}/{mib}')[:digits]}"


@dataclass
class AcceleratorGroup:
    """Accelerators of one node with equal (manufacturer, name, adjusted memory MiB).

    ``memory`` is MiB after normalization; ``accelerators`` are sorted by index and include unhealthy
    ones.
    """

    id: str
    manufacturer: str
    name: str
    memory: int
    cores: int
    driver_version: str
    runtime_version: str
    compute_capability: str
    family: str
    accelerators: list[AcceleratorFacts] = field(default_factory=list)

    @property
    def akey(self) -> str:
        """``<manufacturer>-<groupID>``."""
        return f"{self.manufacturer}-{self.id}"

    @property
    def healthy(self) -> list[AcceleratorFacts]:
        return [a for a in self.accelerators if a.healthy]


def accelerator_groups(policy: Policy, accelerators: list[AcceleratorFacts],
                       with_memory: bool = False) -> list[AcceleratorGroup]:
    """Group the node's accelerators in canonical order (docs/agent.md "The Devices object and its
    ledger": manufacturer, lowest index, id).

    Group IDs are unique per node (docs/node-facts-robustness.md "Device group IDs are unique per node"):
    two groups that would share an ID both get the memory suffix (our choice for the normalization's
    open point); groups still sharing one (memory that rounds to the same GiB, or long names
    whose slugs are cut to the same characters) get :func:`disambiguated_group_id`. Raises ValueError naming
    the manufacturer when it is not in the manufacturer table, and the groups when even that leaves two IDs
    equal (rules/node-facts.yaml ``factChecks.messages.groupIdCollision``).
    """
    buckets: dict[tuple[str, str, int], list[AcceleratorFacts]] = {}
    for acc in accelerators:
        if acc.manufacturer not in policy.manufacturers:
            known = ", ".join(sorted(policy.manufacturers))
            raise ValueError(
                f"accelerator {acc.uuid}: unknown manufacturer {acc.manufacturer!r} (known: {known})")
        buckets.setdefault((acc.manufacturer, acc.name, adjusted_memory_mib(policy, acc)), []).append(acc)
    ids = {key: group_id(policy, key[0], key[1], key[2], with_memory) for key in buckets}
    if not with_memory:
        repeated = _repeated(ids)
        ids = {key: group_id(policy, *key, True) if (key[0], ident) in repeated else ident
               for key, ident in ids.items()}
    repeated = _repeated(ids)
    ids = {key: disambiguated_group_id(policy, *key) if (key[0], ident) in repeated else ident
           for key, ident in ids.items()}
    seen: dict[tuple[str, str], tuple[str, str, int]] = {}
    for key in sorted(ids):
        first = seen.setdefault((key[0], ids[key]), key)
        if first != key:
            raise ValueError(policy.node_facts.factChecks.messages.groupIdCollision.format(
                first=f"{first[1]} ({first[2]} MiB)", second=f"{key[1]} ({key[2]} MiB)", manufacturer=key[0],
                id=ids[key]))
    groups = []
    for key, members in buckets.items():
        manu, name, mib = key
        ident = ids[key]
        members = sorted(members, key=lambda a: a.index)
        first = members[0]
        major, minor = first.computeCapability
        groups.append(AcceleratorGroup(
            id=ident, manufacturer=manu, name=name, memory=mib, cores=first.cores,
            driver_version=first.driverVersion,
            runtime_version=runtime_version(policy, first.cudaDriverVersion),
            compute_capability=compute_capability(major, minor), family=family(policy, manu, major, minor),
            accelerators=members))
    groups.sort(key=lambda g: (g.manufacturer, g.accelerators[0].index, g.id))
    return groups
