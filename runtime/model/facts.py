"""The recorded-facts document: what the probes report about one node (docs/agent.md "Probe facts").

Shape (YAML or JSON; units in the field names)::

    node: node-a10g
    cpu: {vendorId: AuthenticAMD, implementer: "", modelName: AMD EPYC 7R32, family: "23", model: "49"}
    accelerators:
      - {manufacturer: nvidia, uuid: GPU-..., index: 0, minor: 0, name: NVIDIA A10G, memoryMib: 23028,
         memoryBusWidth: 384, eccEnabled: true, computeCapability: [8, 6], cores: 10240,
         driverVersion: 580.159.03, cudaDriverVersion: 13000, migEnabled: false, healthy: true,
         [health: {xids: [79], eccUncorrectableVolatile: 0, retiredPagesPending: false,
                   remappedRowsPending: false, remappedRowsFailure: false}]
         [eccReserved: true, dra: {driver: gpu.nvidia.com, pool: node-a10g, device: gpu-0}]  # DRA only
         migProfiles: [{name: MIG 1g.10gb, memoryMib: 10240, computeSlices: 1, memorySlices: 1,
                        count: 7, placements: [{start: 0, length: 1}, ...]}],
         migDevices: [{uuid: MIG-..., profile: MIG 3g.40gb, placement: {start: 0, length: 4}}]}

Both the real NVML probe and the recorded backend produce this shape; :func:`parse_facts` validates
it and raises :class:`FactsError` naming the source and the field path.
"""
from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from runtime.model.errors import error_text, field_path


class _Facts(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)


class CpuFacts(_Facts):
    """docs/agent.md "Probe facts": raw /proc/cpuinfo values (strings as read)."""

    vendorId: str = ""
    implementer: str = Field("", description="arm64 'CPU implementer', e.g. 0x41")
    modelName: str = ""
    family: str = ""
    model: str = ""

    @field_validator("family", "model", mode="before")
    @classmethod
    def _as_text(cls, value: Any) -> str:
        return "" if value is None else str(value)


class Placement(_Facts):
    """A legal placement of a partition profile: memory slices ``start`` .. ``start+length-1``."""

    start: int = Field(ge=0)
    length: int = Field(gt=0)


class PartitionProfile(_Facts):
    """One GPU-instance profile as the vendor reports it (name not yet respelled, docs/agent.md "The Devices
    object and its ledger")."""

    name: str = Field(min_length=1)
    memoryMib: int = Field(ge=0)
    computeSlices: int = Field(ge=0)
    memorySlices: int = Field(ge=0)
    count: int = Field(ge=0, description="instances of this profile one accelerator can host")
    placements: list[Placement] = []


class MigDevice(_Facts):
    """One existing partition instance (MIG device) on an accelerator: the ID kubelet's PodResources
    reports for it, its profile (vendor spelling, e.g. ``MIG 3g.40gb``) and its placement
    (docs/agent.md "The Devices object and its ledger")."""

    uuid: str = Field(min_length=1)
    profile: str = Field(min_length=1)
    placement: Optional[Placement] = None


class DraDevice(_Facts):
    """Where a DRA driver publishes an accelerator: ``<driver>/<pool>/<device>``, the triple a
    ResourceClaim allocation result names (docs/concepts/dra.md "The ledger from claims")."""

    driver: str = Field(min_length=1)
    pool: str = ""
    device: str = Field(min_length=1)


class HealthFacts(_Facts):
    """What the probe read about an accelerator's health (docs/concepts/out-of-service.md "Health"):
    rules/health.yaml judges it. Absent counters were not readable (NVML_ERROR_NOT_SUPPORTED)."""

    xids: list[int] = Field([], description="critical XID events read since the last pass")
    eccUncorrectableVolatile: Optional[int] = Field(None, ge=0)
    retiredPagesPending: Optional[bool] = None
    remappedRowsPending: Optional[bool] = None
    remappedRowsFailure: Optional[bool] = None


class AcceleratorFacts(_Facts):
    """docs/agent.md "Probe facts": one accelerator. memoryMib is the raw total (before the ECC rule of
    docs/agent.md "Normalization")."""

    manufacturer: str = Field(min_length=1)
    uuid: str = Field(min_length=1)
    index: int = Field(ge=0)
    minor: Optional[int] = Field(None, ge=0)
    name: str = Field(min_length=1)
    memoryMib: int = Field(ge=0)
    memoryBusWidth: int = 0
    eccEnabled: bool = False
    computeCapability: tuple[int, int] = (0, 0)
    cores: int = Field(0, ge=0)
    driverVersion: str = ""
    cudaDriverVersion: int = 0
    migEnabled: bool = False
    migProfiles: list[PartitionProfile] = []
    migDevices: list[MigDevice] = Field([], description="existing MIG devices (absent when unknown)")
    healthy: bool = True
    health: Optional[HealthFacts] = Field(
        None, description="health facts rules/health.yaml judges; absent: none read (the device counts as "
                          "healthy unless lost)")
    eccReserved: Optional[bool] = Field(
        None, description="whether 1/16 of memoryMib is ECC's, when the probe knows it without bus width and "
                          "ECC mode (the DRA driver row's GDDR products, docs/concepts/dra.md); None: the "
                          "ECC rule of docs/agent.md (Normalization) decides from memoryBusWidth and "
                          "eccEnabled")
    dra: Optional[DraDevice] = Field(None,
                                     description="the ResourceSlice device that published this accelerator "
                                                       "(docs/concepts/dra.md); absent for NVML and recorded "
                                                       "facts")


class NodeFactsDoc(_Facts):
    """A whole recorded-facts document (one node)."""

    node: str = ""
    cpu: CpuFacts = CpuFacts()
    accelerators: list[AcceleratorFacts] = []

    @field_validator("accelerators")
    @classmethod
    def _unique(cls, value: list[AcceleratorFacts]) -> list[AcceleratorFacts]:
        """Each accelerator has its own ``uuid`` and its own ``index`` (the device number NVML and the
        ledger key rows by): a second one is refused as Kubernetes refuses a duplicated list key."""
        for field in ("uuid", "index"):
            seen: dict[Any, int] = {}
            for at, acc in enumerate(value):
                key = getattr(acc, field)
                # Kubernetes' words (%#v: a string quoted); parse_facts points at the second one
                if key in seen:
                    shown = f'"{key}"' if isinstance(key, str) else str(key)
                    raise PydanticCustomError("duplicate_key",
                                              "Duplicate value: {shown} (accelerators[{first}] has "
                                              "it too; each accelerator has its own {field})",
                                              {"shown": shown, "first": seen[key], "index": at,
                                               "field": field})
                seen[key] = at
        return value


class FactsError(ValueError):
    """A facts document that does not have the docs/agent.md "Probe facts" shape; the message names source and
    field (``FILE: accelerators[1].uuid: Duplicate value: "GPU-..." ...``), one line per problem."""


def parse_facts(data: Any, source: str = "<facts>") -> NodeFactsDoc:
    """Validate a loaded facts mapping. Raises :class:`FactsError` (``source: field.path: msg``)."""
    if not isinstance(data, dict):
        raise FactsError(f"{source}: a facts document must be a mapping, got {type(data).__name__}")
    try:
        return NodeFactsDoc.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            if err["type"] == "duplicate_key":
                loc += (err["ctx"]["index"], err["ctx"]["field"])
            lines.append(f"{source}: {field_path(loc)}: {error_text(err)}")
        raise FactsError("\n".join(lines)) from None
