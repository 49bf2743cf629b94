"""Pydantic models of the rule-file kinds under ``rules/`` (format: rules/README.md).

Every rule file is a Kubernetes-shaped document ``{apiVersion, kind, metadata: {name}, spec}`` with
``apiVersion: rules.accelpolicy.dev/v1alpha1``. Fields typed :class:`Expr` hold CEL source; the loader
compiles each one once (``Expr.program``) and reports failures as ``file:line field.path: message``.
"""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

API_VERSION = "rules.accelpolicy.dev/v1alpha1"


class Expr(str):
    """CEL source text; ``program`` is set by the loader (a compiled :class:`CelExpression`)."""

    program: Any = None

    @classmethod
    def __get_pydantic_core_schema__(cls, source, handler):
        from pydantic_core import core_schema

        return core_schema.no_info_after_validator_function(cls, core_schema.str_schema(min_length=1))

    def evaluate(self, activation: dict, memo: bool = True) -> Any:
        """Evaluate the compiled program (see runtime.rules.cel.CelExpression.evaluate)."""
        return self.program.evaluate(activation, memo=memo)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False, populate_by_name=True)


class Metadata(Strict):
    name: str = Field(min_length=1)
    annotations: dict[str, str] = {}


# --- constants ---------------------------------------------------------------------------------
class ConstantsSpec(Strict):
    creditsPerAccelerator: int = Field(gt=0, description="D: credits of one whole accelerator")
    sharesPerAccelerator: int = Field(gt=0, description="ownership shares per accelerator")
    percentPerAccelerator: int = Field(gt=0, description="VRAM percent units per accelerator")

    @property
    def share(self) -> int:
        return self.creditsPerAccelerator // self.sharesPerAccelerator

    @property
    def pct(self) -> int:
        return self.creditsPerAccelerator // self.percentPerAccelerator


# --- manufacturers -------------------------------------------------------------------------------
class Manufacturer(Strict):
    id: str = Field(pattern=r"^[a-z0-9]+$")
    base: str = Field(min_length=1, description="base extended-resource name, e.g. nvidia.com/gpu")
    pciVendor: str = ""
    partitionKind: str = ""
    runtimeName: str = ""
    logicalSlices: int = Field(ge=0)
    coresOvercommit: bool = False


class ManufacturerTableSpec(Strict):
    genericSentinel: str
    pciClassPrefixes: list[str] = []
    manufacturers: list[Manufacturer]

    @field_validator("manufacturers")
    @classmethod
    def _unique(cls, value: list[Manufacturer]) -> list[Manufacturer]:
        seen = set()
        for m in value:
            if m.id in seen:
                raise ValueError(f"manufacturer {m.id!r} listed twice")
            seen.add(m.id)
        return value

    def by_id(self) -> dict[str, Manufacturer]:
        return {m.id: m for m in self.manufacturers}


# --- labels ----------------------------------------------------------------------------------------
class LabelCatalogSpec(Strict):
    keys: dict[str, str] = Field(description="role -> label/annotation key")
    prefixes: dict[str, str] = Field(description="role -> key prefix ending in '/'")
    propagatedPrefixes: list[str] = Field(description="Node label prefixes NodeFeatures own (NFD merge)")
    fitLabelSuffix: str = Field(description="fit labels (controller-written) end their prefix with this")
    fitCoalesceSeconds: float = Field(default=3.0, ge=0,
                                      description="how long the controller gathers fit label changes before "
                                                  "writing them (spec/node-facts.md §9)")


# --- node facts ------------------------------------------------------------------------------------
class CruftSpec(Strict):
    cutAt: str = ""
    deleteTokens: list[str] = []
    leadingPattern: str = ""
    trailingSuffixes: list[str] = []
    trailingPattern: str = ""


class FamilyRow(Strict):
    major: list[int]
    family: str
    minorBelow: Optional[int] = None
    familyAtOrAbove: str = ""


class NodeFactsSpec(Strict):
    cpuVendors: dict[str, str]
    cpuImplementers: dict[str, str] = {}
    unknownVendors: list[str] = []
    cruft: CruftSpec
    keyBudget: int = Field(description="63 minus the longest key suffix (decision 13)")
    nvidiaFamilies: list[FamilyRow] = []
    groupIdMemorySuffixBudget: int = 7
    groupIdHashDigits: int = Field(8, ge=1, le=16, description="hex digits that tell colliding group IDs apart")
    eccMultiply: list[int] = [16, 15]
    gddrBusWidthBelow: int = 1024
    factChecks: "FactChecksSpec"


class FactMessagesSpec(Strict):
    """Warnings of decision 19 (str.format templates; fields named in rules/node-facts.yaml)."""

    notInteger: str
    outOfRange: str
    notQuantity: str
    ledger: str
    cpuFlavor: str
    deviceFlavor: str
    foreignNodeFeature: str
    nodeFeatureName: str
    groupIdCollision: str


class FactChecksSpec(Strict):
    """Decision 19: the range a node fact must lie in to count (spec/README.md §8)."""

    countMin: int = Field(ge=0)
    countMax: int = Field(ge=1, description="largest per-node count label; also bounds Devices counts")
    memoryMibMax: int = Field(ge=1)
    messages: FactMessagesSpec


NodeFactsSpec.model_rebuild()


# --- settings --------------------------------------------------------------------------------------
class SettingDef(Strict):
    name: str
    default: str
    type: Literal["bool", "image"]
    description: str


class SettingCatalogSpec(Strict):
    namespace: str
    namespaceEnv: str = "KUBERNETES_POD_NAMESPACE"
    secretName: str
    envPrefix: str = "GPUSTACK_"
    booleanTrue: list[str]
    booleanFalse: list[str]
    settings: list[SettingDef]


# --- pool derivation -------------------------------------------------------------------------------
class FlavorRule(Strict):
    when: Expr
    name: Expr


class PoolNames(Strict):
    cpu: Expr
    device: Expr


class DerivedTypeSpec(Strict):
    cpuUnit: dict[str, str]
    localStorage: str


class ActiveCondition(Strict):
    """The ``Active`` condition the controller keeps ``True`` on its AdmissionCheck (pools.md §8.2)."""

    reason: str
    message: str


class AdmissionCheckSpec(Strict):
    """The ``gpustack-node-devices`` AdmissionCheck and its answers (spec/pools.md §8.2)."""

    name: str
    controllerName: str
    labels: dict[str, str] = {}
    active: ActiveCondition
    readyMessage: Expr
    retryMessage: Expr
    retryAfterSeconds: int = Field(gt=0)


class ClusterQueueSpec(Strict):
    template: dict[str, Any]
    maxFlavors: int = Field(gt=0)
    creditsResourcePrefix: str
    tooManyFlavorsMessage: Expr


class PoolDerivationSpec(Strict):
    systemNamespace: str
    reservedNamespaces: list[str]
    managed: Expr
    flavors: dict[Literal["cpu", "device"], FlavorRule]
    pools: PoolNames
    catalog: PoolNames
    generalGroup: Expr
    entrance: Expr
    derivedType: DerivedTypeSpec
    clusterQueue: ClusterQueueSpec
    admissionCheck: AdmissionCheckSpec
    resourceTypes: dict[Literal["flavor", "queue"], str]


# --- presets -----------------------------------------------------------------------------------------
class PresetRefinement(Strict):
    token: str
    tier: str


class PresetEntry(Strict):
    prefixes: list[str] = Field(min_length=1)
    tier: str
    by: list[PresetRefinement] = []


class PresetTableSpec(Strict):
    tiers: dict[str, dict[str, str]]
    fallbackTier: str
    dropLeadingTokens: list[str] = []
    manufacturers: dict[str, list[PresetEntry]]

    @model_validator(mode="after")
    def _tiers_exist(self) -> "PresetTableSpec":
        known = set(self.tiers)
        used = [("fallbackTier", self.fallbackTier)]
        for manu, entries in self.manufacturers.items():
            for i, entry in enumerate(entries):
                used.append((f"manufacturers.{manu}[{i}].tier", entry.tier))
                used.extend((f"manufacturers.{manu}[{i}].by[{j}].tier", r.tier) for j, r in enumerate(entry.by))
        for where, tier in used:
            if tier not in known:
                raise ValueError(f"{where}: unknown tier {tier!r} (tiers: {', '.join(sorted(known))})")
        for name, unit in self.tiers.items():
            if set(unit) != {"cpu", "ram"}:
                raise ValueError(f"tiers.{name}: must give exactly cpu and ram")
        return self


# --- four-view ---------------------------------------------------------------------------------------
class FourViewSpec(Strict):
    sharedOnceMaxReading: Literal["shareSum", "acceleratorCount"] = "shareSum"


# --- decision tables (durable_rules backend) ---------------------------------------------------------
class DecisionRow(Strict):
    name: str
    when: dict[str, Any] = Field(description="fact -> required value; all must hold (empty = always)")
    then: dict[str, Any] = Field(description="outputs; a string value '$fact' copies a fact")


class DecisionTableSpec(Strict):
    backend: Literal["durable"] = "durable"
    facts: list[str]
    rows: list[DecisionRow] = Field(min_length=1)


SPEC_MODELS: dict[str, type[BaseModel]] = {
    "Constants": ConstantsSpec,
    "ManufacturerTable": ManufacturerTableSpec,
    "LabelCatalog": LabelCatalogSpec,
    "NodeFacts": NodeFactsSpec,
    "SettingCatalog": SettingCatalogSpec,
    "PoolDerivation": PoolDerivationSpec,
    "PresetTable": PresetTableSpec,
    "FourView": FourViewSpec,
    "DecisionTable": DecisionTableSpec,
}


class RuleDocument(Strict):
    """The envelope shared by every rule file."""

    apiVersion: Literal["rules.accelpolicy.dev/v1alpha1"]
    kind: str
    metadata: Metadata
    spec: dict[str, Any]


# --- instance pods (spec/instances.md §11-§12) --------------------------------------------------------
class PodVolumeNames(Strict):
    workspace: str
    additionalPrefix: str
    sshKeys: str
    sshKeysMountPath: str
    sshKeysDefaultMode: int


class SshSidecar(Strict):
    capabilities: list[str]
    volumeMountEnv: str
    imageSetting: str


class OvercommitSpec(Strict):
    setting: str
    cpuMillisPerCore: int = Field(gt=0)
    acceleratedCpuMillisPerCore: int = Field(gt=0)
    memoryMiPerGi: int = Field(gt=0)
    storageMiPerGi: int = Field(gt=0)


class PlacementSpec(Strict):
    setting: str
    noProvisioner: str
    missingMessage: str
    unboundMessage: str
    defaultCapacity: str = Field(min_length=1)   # an InstancePersistentVolume's claim size when unset (§13)


class LifecycleSpec(Strict):
    requeueSeconds: int = Field(gt=0)
    rebuildWindowSeconds: int = Field(gt=0)
    admissionErrorReason: str


class ServiceSpec(Strict):
    """The Instance's Service (spec/instances.md §11.5) and the Node addresses of ``status.hostIPs``
    (§3): ``type`` of the Service; ``hostAddressTypes`` the Node address types read, in order."""

    type: str
    hostAddressTypes: list[str]


class PoolAffinitySpec(Strict):
    operator: Literal["In"] = "In"
    noFlavorsMessage: str = Field(min_length=1)


class InstancePodSpec(Strict):
    workloadContainer: str
    sshContainer: str
    podSpec: dict[str, Any]
    workloadSecurityContext: dict[str, Any]
    portName: Expr
    volumes: PodVolumeNames
    ssh: SshSidecar
    overcommit: OvercommitSpec
    resourceKeys: dict[Literal["sliced", "memoryPercentage", "coresPercentage", "partitioned", "profile", "visibility"], str]
    placement: PlacementSpec
    poolAffinity: PoolAffinitySpec
    lifecycle: LifecycleSpec
    service: ServiceSpec


SPEC_MODELS["InstancePod"] = InstancePodSpec


# --- Kueue resource charging (spec/pools.md §9) --------------------------------------------------------
class KueueTransformationRule(Strict):
    """One row of ``transformations``: expanded per manufacturer (``{base}``, ``{id}``, ``{kind}``)."""

    input: str = Field(min_length=1, description="resource-key pattern, e.g. '{base}.shared'")
    family: Literal["exclusive", "shared", "sliced", "partitioned"]
    strategy: Literal["Replace", "Retain"]
    multiplyBy: str = Field(default="", description="resource-key pattern whose Pod value multiplies the input")
    credits: Optional[Expr] = Field(default=None, description="CEL over constants: credits per unit of input; "
                                                              "absent = no outputs (Kueue ignores the input)")
    partitionKindOnly: bool = False


class KueuePrefixRule(Strict):
    prefix: str = Field(min_length=1, description="resource-key prefix pattern, e.g. '{base}.sliced.memory-'")
    partitionKindOnly: bool = False


class KueueExclusions(Strict):
    global_: list[str] = Field(alias="global", default=[], description="prefixes excluded as written")
    perManufacturer: list[KueuePrefixRule] = []


class KueueConfigurationSpec(Strict):
    apiVersion: str = Field(min_length=1, description="Kueue's Configuration apiVersion")
    kind: Literal["Configuration"]
    resourceKeysParams: str = Field(min_length=1)
    transformations: list[KueueTransformationRule] = Field(min_length=1)
    excludeResourcePrefixes: KueueExclusions
    cpuResource: str = Field(min_length=1)

    @field_validator("transformations")
    @classmethod
    def _unique_inputs(cls, value: list[KueueTransformationRule]) -> list[KueueTransformationRule]:
        seen = set()
        for row in value:
            if row.input in seen:  # Kueue refuses duplicate inputs (pkg/config/validation.go)
                raise ValueError(f"input {row.input!r} listed twice")
            seen.add(row.input)
        return value

    @property
    def cpu_excluded(self) -> bool:
        """True when Kueue ignores ``cpu`` (a global prefix matches it): CPU-only Instance Pods then
        carry their pool's flavor affinity and the CPU view counts Instance Pods (pools.md §9)."""
        return any(self.cpuResource.startswith(p) for p in self.excludeResourcePrefixes.global_)


SPEC_MODELS["KueueConfiguration"] = KueueConfigurationSpec
