"""Pydantic models of the rule-file kinds under ``rules/`` (format: rules/README.md).

Every rule file is a Kubernetes-shaped document ``{apiVersion, kind, metadata: {name}, spec}`` with
``apiVersion: rules.accelpolicy.dev/v1alpha1``. Fields typed :class:`Expr` hold CEL source; the loader
compiles each one once (``Expr.program``) and reports failures as ``file:line field.path: message``.
"""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, Field, model_validator

from runtime.model.base import Expr, Strict  # every rule kind's base and the CEL text type (re-exported)
from runtime.model.manufacturers import (  # noqa: F401 - re-exported
    VIEWS, Manufacturer, ManufacturerMessages, ManufacturerTableSpec, ViewName)
from runtime.model.regex import Pattern
from runtime.model.stateevents import (STATE_EVENT_VARIABLES, StateEvent,  # noqa: F401 - re-exported
                                       StateEvents)
from runtime.model.templates import IncompleteTypeSpec, Templates  # noqa: F401 - Templates re-exported

API_VERSION = "rules.accelpolicy.dev/v1alpha1"
#: The reload Events an old PoolDerivation held (now in rules/reload.yaml).
FORMER_RELOAD_EVENTS = ("rulesReloaded", "rulesRefused", "rulesVerdictsChanged")


class Metadata(Strict):
    name: str = Field(min_length=1)
    annotations: dict[str, str] = {}


# --- constants ---------------------------------------------------------------------------------
class ConstantsSpec(Strict):
    creditsPerAccelerator: int = Field(gt=0, description="D: credits of one whole accelerator")
    sharesPerAccelerator: int = Field(gt=0, description="ownership shares per accelerator")
    percentPerAccelerator: int = Field(gt=0, description="VRAM percent units per accelerator (also the whole "
                                                         "accelerator's cores-percentage)")
    maxNameLength: int = Field(gt=0, description="Kubernetes' longest object name (a DNS-1123 subdomain)")

    @property
    def share(self) -> int:
        return self.creditsPerAccelerator // self.sharesPerAccelerator

    @property
    def pct(self) -> int:
        return self.creditsPerAccelerator // self.percentPerAccelerator


# --- manufacturers -------------------------------------------------------------------------------
# Manufacturer, ManufacturerMessages, ManufacturerTableSpec, VIEWS: runtime/model/manufacturers.py
# --- labels ----------------------------------------------------------------------------------------
class LabelCatalogSpec(Strict):
    keys: dict[str, str] = Field(description="role -> label/annotation key")
    prefixes: dict[str, str] = Field(description="role -> key prefix ending in '/'")
    propagatedPrefixes: list[str] = Field(description="Node label prefixes NodeFeatures own (NFD merge)")
    suffixes: dict[str, str] = Field(
        description="role -> label key suffix (after <gKey>, <aKey> or <manufacturer>)")
    fitLabelSuffix: str = Field(description="fit labels (controller-written) end their prefix with this")
    fitCoalesceSeconds: float = Field(default=3.0, ge=0,
                                      description="how long the controller gathers fit label changes before "
                                                  "writing them (docs/agent.md, Capacity and fit labels)")


# --- node facts ------------------------------------------------------------------------------------
class CruftSpec(Strict):
    cutAt: str = ""
    deleteTokens: list[str] = []
    leadingPattern: Pattern = ""
    trailingSuffixes: list[str] = []
    trailingPattern: Pattern = ""


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
    groupIdHashDigits: int = Field(8, ge=1, le=16,
                                   description="hex digits that tell colliding group IDs apart")
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
    """Decision 19: the range a node fact must lie in to count (docs/node-facts-robustness.md "A malformed
    fact costs only its node (decision 19)")."""

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


class InvalidSettingEvent(Strict):
    """The Warning Event for a stored value that does not parse (docs/concepts/settings.md "Settings")."""

    reason: str = Field(min_length=1)
    message: str = Field(min_length=1, description="str.format with {setting} and {value}")


class SettingCatalogSpec(Strict):
    namespace: str = Field("", description="omitted: the systemNamespace of rules/pools/derivation.yaml "
                                           "(filled at load, runtime/rules/vocabulary.py)")
    namespaceEnv: str = "KUBERNETES_POD_NAMESPACE"
    secretName: str
    envPrefix: str = "GPUSTACK_"
    booleanTrue: list[str]
    booleanFalse: list[str]
    invalidEvent: InvalidSettingEvent
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
    """The ``Active`` condition the controller keeps ``True`` on its AdmissionCheck
    (docs/concepts/pools-and-flavors.md "The AdmissionCheck `gpustack-node-devices`")."""

    reason: str
    message: str


class AdmissionCheckSpec(Strict):
    """The ``gpustack-node-devices`` AdmissionCheck and its answers (docs/concepts/pools-and-flavors.md "The
    AdmissionCheck `gpustack-node-devices`")."""

    name: str
    controllerName: str
    labels: dict[str, str] = {}
    active: ActiveCondition
    readyMessage: Expr
    retryMessage: Expr
    retryAfterSeconds: int = Field(gt=0)
    retryLoopAfter: int = Field(3, gt=1,
                                description="Retry answers on one flavor in a row after which a loop "
                                                       "is reported (events.workloadRetryLoop)")
    promiseSeconds: int = Field(300, gt=0,
                                description="how long a Workload answered Ready whose Pod has not started "
                                            "is subtracted from its node's free accelerators (docs/concepts/"
                                            "out-of-service.md \"Promises\")")


class ClosedNodeMessages(Strict):
    """How a closed node's reason reads (``explain``, ``audit``, the check's Retry): str.format."""

    cordoned: str = Field(min_length=1, description="spec.unschedulable; {node}")
    tainted: str = Field(min_length=1, description="an untolerated taint; {node}, {key}, {value}, {effect}")


class ClosedNodesSpec(Strict):
    """Which Nodes take no new Pod of a pool (docs/concepts/out-of-service.md "Cordoned and tainted
    nodes"): they keep their flavors, capacity and quota, offer nothing as remaining or once-max in any
    view, and the node-devices check places nothing on them."""

    unschedulable: bool = Field(True, description="a Node with spec.unschedulable (kubectl cordon) is closed")
    unschedulableTaint: str = Field("node.kubernetes.io/unschedulable",
                                    description="the taint a cordon adds; a Pod tolerating it "
                                                "(NoSchedule) is not kept off a cordoned Node")
    taintEffects: list[Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]] = Field(
        ["NoSchedule", "NoExecute"], description="a taint with one of these effects that is not tolerated "
                                                 "closes the Node")
    tolerations: list[dict[str, Any]] = Field(
        [], description="tolerations (the Pod API's shape) every Instance Pod is taken to have: a taint they "
                        "tolerate closes no Node for the views; the check adds each Workload's own")
    messages: ClosedNodeMessages


class ClusterQueueSpec(Strict):
    template: dict[str, Any]
    maxFlavors: int = Field(gt=0)
    tooManyFlavorsMessage: Expr


class StartGuardSpec(Strict):
    """When a starting, restarted or newly leading controller's view is whole
    (docs/availability.md "The start guard"): every watch cache listed once and every Node has each
    NodeFeature of the ``nodeFeatures`` roles for which ``expectFacts`` holds, or ``graceSeconds`` after it
    began leading. Until then its destructive steps are held."""

    graceSeconds: float = Field(ge=0,
                                description="the longest a destructive step is held after the controller "
                                                  "began leading (seconds; 0: no guard)")
    nodeFeatures: list[Literal["worker", "deviceManager"]] = Field(
        min_length=1, description="the NodeFeature roles of rules/agent.yaml nodeFeature every expected Node "
                                  "must have (the agent's; trusted as decision 20 says)")
    expectFacts: Expr = Field(description="CEL over a Node's own ``labels`` and ``annotations``, ``devices`` "
                                          "(the spec of its Devices object; {} when none) and ``role`` (the "
                                          "NodeFeature role asked about; ``keys``: the keys of "
                                          "rules/labels.yaml by role): true when the guard waits for that "
                                          "NodeFeature of the Node (false: a Node no agent runs on, a role "
                                          "the Node has no facts for)")


class PoolDerivationSpec(Strict):
    systemNamespace: str
    reservedNamespaces: list[str] = Field(
        description="no LocalQueues, no Instances, no Pod webhook (decision 17)")
    controllerServiceAccount: str = Field(min_length=1,
                                          description="the controller's ServiceAccount in the system "
                                                                     "namespace: the only user that may "
                                                                     "delete Settings and write "
                                                                     "InstanceTypeFlavors")
    settings: dict[str, str] = Field(
        description="role -> setting name (rules/settings.yaml) the derivation reads")
    entrancePrefix: str = Field(min_length=1,
                                description="every entrance starts with it (CEL variable of entrance; "
                                                          "the Workload webhook's match condition)")
    managed: Expr
    flavors: dict[Literal["cpu", "device"], FlavorRule]
    pools: PoolNames
    catalog: PoolNames
    generalGroup: Expr
    entrance: Expr
    derivedType: DerivedTypeSpec
    incompleteType: IncompleteTypeSpec
    clusterQueue: ClusterQueueSpec
    admissionCheck: AdmissionCheckSpec
    closedNodes: ClosedNodesSpec
    resourceTypes: dict[Literal["flavor", "queue", "deviceClass"], str]
    events: StateEvents
    startGuard: StartGuardSpec

    @model_validator(mode="before")
    @classmethod
    def _moved_to_reload(cls, data):
        """An old derivation still holding the reload's settings: a clear error naming their new home."""
        if not isinstance(data, dict):
            return data
        moved = [f"{key}" for key in ("reloadGate",) if key in data] + [
            f"events.{key}" for key in (data.get("events") or {}) if key in FORMER_RELOAD_EVENTS]
        if moved:
            raise ValueError(f"{', '.join(moved)}: the reload's settings moved to rules/reload.yaml (kind "
                             "ReloadGate: its spec and its events reloaded, refused, verdictsChanged; "
                             "docs/rule-authoring.md \"How a rules change goes live\"): delete "
                             f"{'them' if len(moved) > 1 else 'it'} here")
        return data


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
                used.extend(
                    (f"manufacturers.{manu}[{i}].by[{j}].tier", r.tier) for j, r in enumerate(entry.by))
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
