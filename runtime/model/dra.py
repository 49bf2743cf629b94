"""Rule kinds ``DraDriver`` and ``DraPolicy`` (rules/dra.yaml): which Dynamic Resource Allocation drivers
accelpolicy reads, how each driver's device attributes map to the probe facts of docs/agent.md "Probe facts",
and the shared vocabulary of the DRA support (docs/concepts/dra.md "Accelerators from DRA drivers").

One ``DraDriver`` document per driver (``metadata.name`` is free; ``spec.driver`` is the driver name a
ResourceSlice carries in ``spec.driver``): adding a vendor's driver is adding a document. One
``DraPolicy`` (optional: without it and without drivers, DRA is off) holds the DeviceClass name and
selector templates, the taint effects that make a device unhealthy, the messages and Event reasons.

Registered into :data:`runtime.model.rulefiles.SPEC_MODELS` at import time.
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, field_validator, model_validator

from runtime.model import rulefiles
from runtime.model.agent import Rewrite
from runtime.model.normalize import QuantityError, parse_quantity
from runtime.model.rulefiles import Expr, Strict


class DeviceField(Strict):
    """Where one fact comes from on a ResourceSlice device: exactly one of ``attribute`` (a device
    attribute: an unqualified name is the driver's own, ``resource.kubernetes.io/pciBusID`` a
    qualified one), ``capacity`` (a device capacity, a quantity) or ``deviceName: true`` (the
    device's ``name``)."""

    attribute: str = ""
    capacity: str = ""
    deviceName: bool = False

    @model_validator(mode="after")
    def _exactly_one(self) -> "DeviceField":
        if sum((bool(self.attribute), bool(self.capacity), self.deviceName)) != 1:
            raise ValueError("give exactly one of attribute, capacity, deviceName: true")
        return self

    def describe(self) -> str:
        """How messages name this field: ``attribute uuid``, ``capacity memory``, ``device name``."""
        if self.attribute:
            return f"attribute {self.attribute}"
        if self.capacity:
            return f"capacity {self.capacity}"
        return "device name"


class DriverFacts(Strict):
    """Probe fact (docs/agent.md "Probe facts") <- device field, for a whole accelerator. ``uuid`` and
    ``name`` are required; ``memoryMib`` too unless the row's ``productMemory`` gives it; a fact left out
    is not published by the driver (docs/concepts/dra.md "Two kinds of accelerator node": ``index`` then is
    the uuid's order among the node's whole accelerators of the driver, ``minor`` the index,
    ``computeCapability`` unknown, the versions empty). ``healthy``: a boolean attribute (false: unhealthy),
    beside the taints."""

    uuid: DeviceField
    name: DeviceField
    memoryMib: Optional[DeviceField] = Field(
        None, description="a capacity quantity (bytes) -> MiB, or an int attribute in MiB; when left out or "
                          "not published, the row's productMemory by product name")
    healthy: Optional[DeviceField] = Field(None, description="a boolean attribute: false = unhealthy")
    index: Optional[DeviceField] = None
    minor: Optional[DeviceField] = None
    computeCapability: Optional[DeviceField] = Field(None, description="a version: major, minor")
    driverVersion: Optional[DeviceField] = Field(None, description="the version's (or string's) text")
    cudaDriverVersion: Optional[DeviceField] = Field(
        None, description="a version -> major * d0 + minor * d1 (runtimeVersionDivisors of rules/agent.yaml)")


class PartitionFacts(Strict):
    """What a partition device (a MIG device) tells: its parent's uuid, its profile, its memory."""

    parent: DeviceField
    profile: DeviceField
    memoryMib: Optional[DeviceField] = None


class DeviceKind(Strict):
    """A device's kind when no attribute names it: exactly one of ``constant`` (every device of the
    driver has this kind) or ``expression`` (CEL over ``attributes``, the device's attributes by name
    with their values, and ``device``, its name: the kind's text), plus the Kubernetes CEL
    ``selector`` of the derived DeviceClass (docs/concepts/dra.md "The ledger from claims") when the kind is
    an expression."""

    constant: str = ""
    expression: Optional[Expr] = None
    selector: str = Field("",
                          description="Kubernetes' CEL selecting the whole accelerators (the DeviceClass's)")

    @model_validator(mode="after")
    def _exactly_one(self) -> "DeviceKind":
        if bool(self.constant) == (self.expression is not None):
            raise ValueError("give exactly one of constant, expression")
        if self.expression is not None and not self.selector:
            raise ValueError("an expression kind needs selector (the DeviceClass's CEL)")
        return self


HealthFact = Literal["xid", "eccUncorrectableVolatile", "retiredPagesPending", "remappedRowsPending",
                     "remappedRowsFailure", "lost"]


class DraDriverSpec(Strict):
    """spec of one ``DraDriver`` document; field meanings are commented in rules/dra.yaml."""

    driver: str = Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", max_length=63,
                        description="the DRA driver name (a DNS subdomain), e.g. gpu.nvidia.com")
    manufacturer: str = Field(min_length=1, description="the manufacturer id of rules/manufacturers.yaml")
    typeAttribute: str = Field("",
                               description="the attribute that tells a device's kind ('' = kind gives it)")
    kind: Optional[DeviceKind] = Field(None, description="the kind when no attribute tells it")
    wholeType: str = Field(min_length=1, description="the kind of a whole accelerator")
    partitionType: str = Field("", description="its value on a partition device ('' = the driver has none)")
    facts: DriverFacts
    partition: Optional[PartitionFacts] = None
    rewrites: dict[Literal["uuid", "name", "driverVersion"], list[Rewrite]] = Field(
        {}, description="per text fact, rewrites applied in order to the published text")
    gddrProducts: list[str] = Field(
        [], description="product names (a name matches when it equals one, or starts with it and a space) "
                        "whose memory gets the ECC rule as if ECC were on (docs/concepts/dra.md)")
    productMemory: dict[str, str] = Field(
        {}, description="product name (the name fact, after rewrites) -> its memory (a quantity, e.g. 96Gi), "
                        "for a device that publishes none")
    healthTaints: dict[str, HealthFact] = Field(
        {}, description="device taint key -> the health fact it reports, judged by rules/health.yaml as "
                        "NVML's (docs/concepts/out-of-service.md \"Health\"): xid and "
                        "eccUncorrectableVolatile read the taint's value as the number; such a taint "
                        "does not make the device unhealthy by its effect")

    @model_validator(mode="after")
    def _partition_needs_fields(self) -> "DraDriverSpec":
        if self.partitionType and self.partition is None:
            raise ValueError("partitionType needs partition (parent, profile)")
        if bool(self.typeAttribute) == (self.kind is not None):
            raise ValueError("give exactly one of typeAttribute, kind")
        if self.facts.memoryMib is None and not self.productMemory:
            raise ValueError("facts.memoryMib is left out: give productMemory (product name -> memory)")
        return self

    @field_validator("productMemory")
    @classmethod
    def _quantities(cls, value: dict[str, str]) -> dict[str, str]:
        for product, quantity in value.items():
            if not product.strip():
                raise ValueError("a product name is empty")
            try:
                amount = parse_quantity(quantity)
            except (QuantityError, TypeError):
                raise ValueError(f"{product}: {quantity!r} is not a quantity (e.g. 96Gi)") from None
            if amount < 2 ** 20:
                raise ValueError(f"{product}: {quantity!r} is less than 1Mi")
        return value

    def product_memory_mib(self, product: str) -> int | None:
        """``productMemory[product]`` in MiB (rounded down); None when the product is not listed."""
        quantity = self.productMemory.get(product)
        return None if quantity is None else int(parse_quantity(quantity) // 2 ** 20)

    def is_gddr(self, product: str) -> bool:
        """Whether ``product`` is in :attr:`gddrProducts` (equal, or the entry followed by a space)."""
        return any(product == p or product.startswith(p + " ") for p in self.gddrProducts)


class DeviceClassSpec(Strict):
    """How the controller derives a DeviceClass per (driver, manufacturer base key), docs/concepts/dra.md "The
    ledger from claims". Templates take ``{driver}``, ``{manufacturer}``, ``{base}``, ``{typeAttribute}``,
    ``{wholeType}``."""

    apiVersion: str = "resource.k8s.io/v1"
    plural: str = "deviceclasses"
    nameTemplate: str = Field(min_length=1)
    selectorTemplate: str = Field(min_length=1,
                                  description="CEL (Kubernetes') selecting the whole accelerators")
    allDevicesSelectorTemplate: str = Field(
        min_length=1, description="the same for a driver whose every device is whole (kind: {constant: ...})")
    resourceType: str = Field("deviceClass",
                              description="role in rules/pools/derivation.yaml resourceTypes: the "
                                                          "ownership label value")


class DraMessages(Strict):
    unreadableDevice: str
    publishedTwice: str = Field(min_length=1, description="unreadableDevice's {error} for a uuid or index "
                                                          "another device of the node published; {value}")
    unknownProduct: str
    offersNothing: str
    staleSlice: str
    unknownNode: str
    featureMissing: str
    noDrivers: str
    offlineCpu: str
    sourceDra: str
    sourcePlugin: str
    sourceDevices: str = Field(min_length=1,
                               description="a device-plugin node whose device-manager NodeFeature "
                                                         "the snapshot lacks; {node}, {count}, {name}")
    sourceNone: str


class DraEvents(Strict):
    unreadableDevice: str
    featureMissing: str


class OfflineCpuLabels(Strict):
    """Node labels NFD's own worker writes (its ``cpu-model`` feature), read by the offline commands
    for a DRA node the agent has not described yet: the vendor name (as rules/node-facts.yaml
    ``cpuVendors`` values), the CPU family and model numbers."""

    vendor: str
    family: str
    model: str


class DraPolicySpec(Strict):
    """spec of the ``DraPolicy`` document (rules/dra.yaml)."""

    deviceClass: DeviceClassSpec
    offlineCpuLabels: OfflineCpuLabels
    unhealthyTaintEffects: list[str] = Field(["NoSchedule", "NoExecute"],
                                             description="a device carrying a taint with one of these is "
                                                         "unhealthy")
    podResource: str = Field("pods", description="ResourceClaim status.reservedFor[].resource of a Pod")
    messages: DraMessages
    events: DraEvents


rulefiles.SPEC_MODELS["DraDriver"] = DraDriverSpec
rulefiles.SPEC_MODELS["DraPolicy"] = DraPolicySpec
