"""ResourceSlices -> probe facts: how a node whose accelerators are published by a DRA driver is read
(docs/concepts/dra.md "Accelerators from DRA drivers"). Pure; every name and message comes from
rules/dra.yaml.

Input: the node's name and ResourceSlice objects (``resource.k8s.io/v1``, JSON-shaped dicts, any
node's: the ones of other nodes are skipped). Only slices whose ``spec.driver`` has a ``DraDriver``
document are read, and of each pool (driver, ``spec.pool.name``) only the slices of its newest
``spec.pool.generation`` (older ones are reported, :attr:`DraReading.notes`). Per device:

* ``<typeAttribute> == wholeType``: a whole accelerator, read through the row's ``facts`` into the
  accelerator shape of docs/agent.md "Probe facts" (``manufacturer`` the row's, ``eccReserved`` from the
  row's GDDR products, ``dra`` the driver, pool and device name; no cores, bus width or ECC mode);
* ``== partitionType``: a partition device (a MIG device): its parent, profile and memory are read
  for :attr:`DraReading.partitions`; its parent is MIG-on, offers nothing on a DRA node (docs/concepts/dra.md
  "Views per manufacturer") and is left out of the accelerators;
* any other type is ignored.

A device whose field does not parse is left out with a warning naming node, driver, device and the
field (docs/node-facts-robustness.md "A malformed fact costs only its node (decision 19)"); the others are
read. ``index`` not published: the uuid's place among the node's whole accelerators that publish none (after
the published indexes); ``minor``: the index.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from runtime.engine.devices.drafields import (Unreadable, field_attribute, field_text, int_field, mib_field,
                                              raw_value, rewritten, text_value, version_field)
from runtime.engine.devices.nodefacts import agent_rules
from runtime.engine.policy import Policy
from runtime.model.dra import DraDriverSpec, DraPolicySpec

def dra_drivers(policy: Policy) -> dict[str, DraDriverSpec]:
    """Driver name -> its ``DraDriver`` row (rules/dra.yaml and any other rule file); empty when none."""
    return {doc.spec.driver: doc.spec for doc in policy.ruleset.all("DraDriver")}


def dra_policy(policy: Policy) -> DraPolicySpec | None:
    """The ``DraPolicy`` document, or None when the rules have none (DRA off)."""
    docs = policy.ruleset.all("DraPolicy")
    return docs[0].spec if docs else None


@dataclass
class PartitionedGpu:
    """A GPU some partition devices name as their parent: MIG on, nothing offered."""

    uuid: str
    driver: str
    product: str = ""
    profiles: dict[str, int] = field(default_factory=dict)   # profile -> partition devices of it
    devices: list[str] = field(default_factory=list)          # <pool>/<device> names


@dataclass
class DraReading:
    """What one node's ResourceSlices say (see the module docstring).

    ``accelerators``: facts dicts (the probe facts' shape) of the whole accelerators that
    count; ``partitioned``: the MIG-on GPUs (offering nothing) by uuid; ``devices``: (driver, pool,
    device name) -> the accelerator uuid it is or belongs to (the ledger maps claim results with it);
    ``warnings``: unreadable devices; ``notes``: stale slices ignored; ``slices``: the names of the
    slices read; ``drivers``: the drivers that published something.
    """

    node: str
    accelerators: list[dict[str, Any]] = field(default_factory=list)
    partitioned: dict[str, PartitionedGpu] = field(default_factory=dict)
    devices: dict[tuple[str, str, str], str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    slices: list[str] = field(default_factory=list)
    drivers: list[str] = field(default_factory=list)

    def offers_nothing(self, policy: Policy) -> list[str]:
        """One line per MIG-on GPU (rules/dra.yaml ``messages.offersNothing``), by uuid."""
        msg = dra_policy(policy).messages.offersNothing
        return [msg.format(driver=p.driver, count=sum(p.profiles.values()), uuid=uuid,
                           profiles=", ".join(f"{name} x{n}" for name, n in sorted(p.profiles.items())))
                for uuid, p in sorted(self.partitioned.items())]


def orphan_slices(policy: Policy, slices: Iterable[Mapping[str, Any]], nodes: set[str]) -> list[str]:
    """A note for each slice of a configured driver naming a node not in ``nodes`` (ignored)."""
    drivers = dra_drivers(policy)
    return [dra_policy(policy).messages.unknownNode.format(slice=_name(s),
                                                           node=(s.get("spec") or {})["nodeName"])
            for s in slices if (s.get("spec") or {}).get("driver") in drivers
            and (s.get("spec") or {}).get("nodeName") and s["spec"]["nodeName"] not in nodes]


def node_slices(policy: Policy, slices: Iterable[Mapping[str, Any]],
                node: str) -> tuple[list[Mapping[str, Any]], list[str]]:
    """The slices of ``node`` whose driver has a row, newest pool generation only; plus notes for the
    stale ones."""
    drivers = dra_drivers(policy)
    messages = dra_policy(policy).messages if drivers else None
    mine, notes = [], []
    newest: dict[tuple[str, str], int] = {}
    for s in slices:
        spec = s.get("spec") or {}
        if spec.get("driver") not in drivers or spec.get("nodeName") != node:
            continue
        pool = spec.get("pool") or {}
        key = (spec["driver"], str(pool.get("name", "")))
        newest[key] = max(newest.get(key, 0), _int(pool.get("generation")))
        mine.append(s)
    out = []
    for s in mine:
        spec = s["spec"]
        pool = spec.get("pool") or {}
        key = (spec["driver"], str(pool.get("name", "")))
        generation = _int(pool.get("generation"))
        if generation < newest[key]:
            notes.append(messages.staleSlice.format(slice=_name(s), driver=key[0], pool=key[1],
                                                    generation=generation, newest=newest[key]))
            continue
        out.append(s)
    return sorted(out, key=_name), notes


def read_node(policy: Policy, node: str, slices: Iterable[Mapping[str, Any]]) -> DraReading:
    """Read ``node``'s accelerators from ``slices`` (see the module docstring). Never raises for bad
    slice data: an unreadable device is a warning."""
    drivers = dra_drivers(policy)
    reading = DraReading(node=node)
    if not drivers:
        return reading
    current, reading.notes = node_slices(policy, slices, node)
    wholes: list[tuple[dict[str, Any], int | None, tuple[str, str, str]]] = []
    for s in current:
        spec = s["spec"]
        row = drivers[spec["driver"]]
        reading.slices.append(_name(s))
        if row.driver not in reading.drivers:
            reading.drivers.append(row.driver)
        for device in spec.get("devices") or []:
            if not isinstance(device, Mapping):
                continue
            _read_device(policy, row, reading, wholes, str((spec.get("pool") or {}).get("name", "")), device)
    _place(policy, reading, wholes)
    return reading


def _read_device(policy: Policy, row: DraDriverSpec, reading: DraReading, wholes: list, pool: str,
                 device: Mapping[str, Any]) -> None:
    """One device: a whole accelerator appended to ``wholes``, a partition recorded, others skipped."""
    name = str(device.get("name", ""))
    try:
        kind = _kind(row, device)
        if kind == row.wholeType:
            facts, index = _whole(policy, row, device)
            facts["dra"] = {"driver": row.driver, "pool": pool, "device": name}
            wholes.append((facts, index, (row.driver, pool, name)))
        elif row.partitionType and kind == row.partitionType:
            _partition(row, reading, pool, device)
    except Unreadable as exc:
        reading.warnings.append(dra_policy(policy).messages.unreadableDevice.format(
            node=reading.node, driver=row.driver, device=f"{pool}/{name}", field=exc.field, error=exc))


def _kind(row: DraDriverSpec, device: Mapping[str, Any]) -> str | None:
    """The device's kind: its ``typeAttribute``'s text, else the row's ``kind`` constant or expression
    (over ``attributes``, name -> value, and ``device``, the device's name); None when not told."""
    if row.typeAttribute:
        kind = field_attribute(row, device, row.typeAttribute)
        return text_value(kind) if kind is not None else None
    if row.kind.constant:
        return row.kind.constant
    attrs = device.get("attributes") or {}
    if not isinstance(attrs, Mapping):
        raise Unreadable("attributes", "not a map")
    values = {str(k): next(iter(v.values()), None) for k, v in attrs.items() if isinstance(v, Mapping) and v}
    try:
        kind = row.kind.expression.evaluate({"attributes": values, "device": str(device.get("name", ""))})
    except Exception as exc:   # a CEL evaluation error (a missing key): this device only
        raise Unreadable("kind", str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from exc
    return kind if isinstance(kind, str) else None


def _whole(policy: Policy, row: DraDriverSpec, device: Mapping[str, Any]) -> tuple[
        dict[str, Any], int | None]:
    """The facts of one whole accelerator and its published index (None when not published)."""
    f = row.facts
    uuid = rewritten(row, "uuid", field_text(row, device, f.uuid, required=True))
    product = rewritten(row, "name", field_text(row, device, f.name, required=True))
    facts: dict[str, Any] = {
        "manufacturer": row.manufacturer, "uuid": uuid, "name": product,
        "memoryMib": _memory(policy, row, device, product),
        "eccReserved": row.is_gddr(product), "healthy": _healthy(policy, row, device),
    }
    health = _health(row, device)
    if health.pop("lost", False):
        facts["healthy"] = False
    if health:
        facts["health"] = health
    index = int_field(row, device, f.index)
    minor = int_field(row, device, f.minor)
    if minor is not None:
        facts["minor"] = minor
    cc = version_field(row, device, f.computeCapability)
    if cc is not None:
        facts["computeCapability"] = [cc[0], cc[1]]
    if f.driverVersion is not None:
        text = field_text(row, device, f.driverVersion)
        if text:
            facts["driverVersion"] = rewritten(row, "driverVersion", text)
    cuda = version_field(row, device, f.cudaDriverVersion)
    if cuda is not None:
        major_div, minor_div = agent_rules(policy).runtimeVersionDivisors
        facts["cudaDriverVersion"] = cuda[0] * major_div + cuda[1] * minor_div
    return facts, index


def _partition(row: DraDriverSpec, reading: DraReading, pool: str, device: Mapping[str, Any]) -> None:
    part = row.partition
    parent = field_text(row, device, part.parent, required=True)
    profile = field_text(row, device, part.profile, required=True)
    gpu = reading.partitioned.setdefault(parent, PartitionedGpu(uuid=parent, driver=row.driver))
    gpu.profiles[profile] = gpu.profiles.get(profile, 0) + 1
    gpu.devices.append(f"{pool}/{device.get('name', '')}")
    if not gpu.product:
        try:
            gpu.product = field_text(row, device, row.facts.name)
        except Unreadable:
            pass
    reading.devices[(row.driver, pool, str(device.get("name", "")))] = parent


def _place(policy: Policy, reading: DraReading, wholes: list) -> None:
    """Index the whole accelerators (published, else by uuid order), drop duplicates and MIG-on ones:
    a device publishing a uuid or an index another device of the node published before is not read
    (its accelerator would be listed twice, or two at one index, in Devices and the ledger)."""
    seen: set[str] = set()
    indexes: set[int] = set()
    kept = []
    for facts, index, ref in wholes:
        uuid = facts["uuid"]
        twice = ("uuid", uuid) if uuid in seen else ("index", index) if index is not None \
            and index in indexes else None
        if twice:
            reading.warnings.append(dra_policy(policy).messages.unreadableDevice.format(
                node=reading.node, driver=ref[0], device=f"{ref[1]}/{ref[2]}", field=twice[0],
                error=dra_policy(policy).messages.publishedTwice.format(value=twice[1])))
            continue
        seen.add(uuid)
        if index is not None:
            indexes.add(index)
        reading.devices[ref] = uuid
        gpu = reading.partitioned.get(uuid)
        if gpu is not None:
            gpu.product = gpu.product or facts["name"]
            continue
        kept.append((facts, index))
    taken = {index for _, index in kept if index is not None}
    free = (i for i in range(len(kept) + len(taken)) if i not in taken)
    for facts, index in sorted(kept, key=lambda item: item[0]["uuid"]):
        facts["index"] = index if index is not None else next(free)
        facts.setdefault("minor", facts["index"])
    reading.accelerators = sorted((facts for facts, _ in kept), key=lambda a: (a["index"], a["uuid"]))


# --- field access -------------------------------------------------------------------------------------
def _memory(policy: Policy, row: DraDriverSpec, device: Mapping[str, Any], product: str) -> int:
    """The memory in MiB: the row's ``memoryMib`` field when published, else its ``productMemory`` entry
    for ``product``; neither: unreadable, the warning naming the table to edit."""
    where = row.facts.memoryMib
    if where is not None and raw_value(row, device, where) is not None:
        return mib_field(row, device, where)
    mib = row.product_memory_mib(product)
    if mib is not None:
        return mib
    if not row.productMemory:   # a row with no table: the field is what is missing
        raise Unreadable(where, "not published")
    doc = next(d for d in policy.ruleset.all("DraDriver") if d.spec is row)
    raise Unreadable(where if where is not None else "memory",
                     dra_policy(policy).messages.unknownProduct.format(
        product=product, row=doc.name, file=doc.file))


def _health(row: DraDriverSpec, device: Mapping[str, Any]) -> dict[str, Any]:
    """The health facts the row's ``healthTaints`` read from the device's taints
    (docs/concepts/out-of-service.md "Health"): ``xids`` and ``eccUncorrectableVolatile`` from the taint's
    value (a value that is not a number is read as XID 0 / count 1: the fact still holds), the flags and
    ``lost`` set."""
    out: dict[str, Any] = {}
    for taint in device.get("taints") or []:
        fact = row.healthTaints.get(taint.get("key")) if isinstance(taint, Mapping) else None
        if fact is None:
            continue
        value = str(taint.get("value") or "")
        number = int(value) if value.isdigit() else None
        if fact == "xid":
            out.setdefault("xids", []).append(number if number is not None else 0)
        elif fact == "eccUncorrectableVolatile":
            out[fact] = number if number is not None else 1
        else:
            out[fact] = True
    return out


def _healthy(policy: Policy, row: DraDriverSpec, device: Mapping[str, Any]) -> bool:
    """False when a taint's effect is one of ``unhealthyTaintEffects`` (docs/concepts/dra.md "Two kinds of
    accelerator node") and its key is not one of the row's ``healthTaints`` (those are facts the health rules
    judge), or the row's ``healthy`` boolean attribute is published false."""
    effects = set(dra_policy(policy).unhealthyTaintEffects)
    if any(isinstance(t, Mapping) and t.get("effect") in effects and t.get("key") not in row.healthTaints
           for t in device.get("taints") or []):
        return False
    where = row.facts.healthy
    raw = raw_value(row, device, where) if where is not None else None
    if raw is None:
        return True
    value = raw.get("bool") if where.attribute else None
    if not isinstance(value, bool):
        raise Unreadable(where, f"{dict(raw) if isinstance(raw, Mapping) else raw!r} is not a bool")
    return value


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
