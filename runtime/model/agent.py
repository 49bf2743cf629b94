"""Rule kind ``NodeAgent`` (rules/agent.yaml): the node agent's keys, suffixes, capacity key
templates, ledger modes and messages (docs/agent.md "Labels, annotations and NodeFeatures" and "The Devices
object and its ledger" and "Capacity and fit labels").

Registered into :data:`runtime.model.rulefiles.SPEC_MODELS` at import time.
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from runtime.model import rulefiles
from runtime.model.regex import Pattern
from runtime.model.rulefiles import Strict


class ObjectKindSpec(Strict):
    apiVersion: str
    kind: str
    plural: str

    @property
    def group(self) -> str:
        return self.apiVersion.split("/", 1)[0]

    @property
    def version(self) -> str:
        return self.apiVersion.split("/", 1)[1]


class NodeFeatureRole(Strict):
    nameSuffix: str = Field(min_length=1, description="NodeFeature name = <node><nameSuffix>")
    partOf: str = Field(min_length=1, description="value of app.kubernetes.io/part-of")


class NodeFeatureSpec(ObjectKindSpec):
    worker: NodeFeatureRole
    deviceManager: NodeFeatureRole


class LabelSuffixes(Strict):
    count: str
    memory: str
    cores: str
    family: str
    product: str
    comcap: str
    driverVersion: str
    runtimeVersion: str


class AgentSettingNames(Strict):
    manual: str
    mixedOnNode: str


class Rewrite(Strict):
    """A regular-expression rewrite of a text: every match of the RE2 ``pattern`` replaced by
    ``replacement`` (``\\1`` names a group; :func:`runtime.model.regex.sub`); the pattern must compile."""

    pattern: Pattern
    replacement: str


class ProfileRewrite(Rewrite):
    manufacturer: str


class CapacityKeys(Strict):
    slicedUnits: str
    slicedCoresPercentage: str
    slicedMemoryPercentage: str
    slicedMemoryMib: str
    partitionedUnits: str
    partitionedProfile: str
    percentPerSlice: int = Field(0, ge=0,
                                 description="omitted: percentPerAccelerator of rules/constants.yaml "
                                                       "(filled at load)")


class LedgerModes(Strict):
    none: int
    exclusive: int
    shared: int
    sliced: int
    partitioned: int


class LedgerMessages(Strict):
    notJson: str
    badEntry: str
    unknownGroup: str
    unknownAccelerator: str
    badMode: str
    impliedCharge: str
    chargeRange: str
    missingProfile: str
    modeConflict: str
    capabilityConflict: str
    unhealthyConflict: str
    profileConflict: str


class LedgerEvents(Strict):
    invalidAllocation: str
    allocationConflict: str


class LedgerSpec(Strict):
    modes: LedgerModes
    finishedPhases: list[str]
    events: LedgerEvents
    messages: LedgerMessages
    capabilityWords: dict[str, str]


class PodResourcesMessages(Strict):
    unknownDevice: str
    missingUnits: str
    missingProfile: str


class PodResourcesSpec(Strict):
    socket: str
    timeoutSeconds: float = Field(10, gt=0)
    deviceIdSeparator: str = Field(min_length=1)
    resourceKeysParams: str = Field(min_length=1)
    messages: PodResourcesMessages


class MemorySuffixSpec(Strict):
    zero: str
    small: str
    smallBelowMib: int = Field(gt=0)
    stripTrailing: str = ""


class ManufacturerEnvSpec(Strict):
    prefix: str
    fields: dict[Literal["base", "runtimeName", "pciVendor", "partitionKind"], str]


class MaintenanceMessages(Strict):
    """The AcceleratorMaintenance status messages the controller writes (str.format)."""

    inForce: str = Field(min_length=1, description="{devices}, {node}, {expiry}, {pods}")
    expired: str = Field(min_length=1, description="{expiry}")
    unmatched: str = Field(min_length=1, description="{node}, {wanted}")
    invalid: str = Field(min_length=1, description="{field}, {error}")


class MaintenanceSpec(ObjectKindSpec):
    """The AcceleratorMaintenance kind (docs/concepts/out-of-service.md "Maintenance"): where it lives, the
    field the agent selects its node's objects by, and the controller's status words."""

    nodeField: str = Field("spec.node", description="the CRD's selectable field naming the node")
    messages: MaintenanceMessages


class NodeAgentSpec(Strict):
    """spec of rules/agent.yaml; field meanings are commented there."""

    namespace: str = Field("", description="omitted: the systemNamespace of rules/controller.yaml")
    namespaceEnv: str
    nodeFeature: NodeFeatureSpec
    devices: ObjectKindSpec
    maintenance: MaintenanceSpec
    suffixes: Optional[LabelSuffixes] = Field(None,
                                              description="filled at load from rules/labels.yaml suffixes")
    trueValue: str
    falseValue: str
    settings: AgentSettingNames
    groupIdWithMemoryEnv: str
    manufacturerEnv: ManufacturerEnvSpec
    eccRuleManufacturers: list[str] = []
    familyTableManufacturers: list[str] = []
    memorySuffix: MemorySuffixSpec
    runtimeVersionDivisors: list[int] = Field(min_length=2, max_length=2)
    profileRewrites: list[ProfileRewrite] = []
    profileSegmentPattern: Pattern
    capacity: CapacityKeys
    ledger: LedgerSpec
    podResources: PodResourcesSpec


rulefiles.SPEC_MODELS["NodeAgent"] = NodeAgentSpec
