"""Pydantic models of the rule-file kinds under ``rules/`` (format: docs/reference/rule-kinds.md).

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
from runtime.model.templates import IncompleteTypeSpec, Templates  # noqa: F401 - Templates re-exported

API_VERSION = "rules.accelpolicy.dev/v1alpha1"


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
    namespace: str = Field("", description="omitted: the systemNamespace of rules/controller.yaml "
                                           "(filled at load, runtime/rules/vocabulary.py)")
    namespaceEnv: str = "KUBERNETES_POD_NAMESPACE"
    secretName: str
    envPrefix: str = "GPUSTACK_"
    booleanTrue: list[str]
    booleanFalse: list[str]
    invalidEvent: InvalidSettingEvent
    settings: list[SettingDef]


# --- pool derivation: naming and flavors ---------------------------------------------------------
class FlavorRule(Strict):
    when: Expr
    name: Expr


class PoolNames(Strict):
    cpu: Expr
    device: Expr


class DerivedTypeSpec(Strict):
    cpuUnit: dict[str, str]
    localStorage: str


_QUEUES, _CONTROLLER = "moved to rules/pools/queues.yaml (kind PoolQueues)", \
    "moved to rules/controller.yaml (kind ControllerPolicy)"
#: Fields an older rules/pools/derivation.yaml held, and where they went (a clear error, never ignored).
MOVED_FROM_DERIVATION = {
    "reloadGate": "the reload's settings moved to rules/reload.yaml (kind ReloadGate: its spec and its "
                  "events reloaded, refused, verdictsChanged; docs/rule-authoring.md "
                  "\"How a rules change goes live\")",
    "clusterQueue": _QUEUES, "admissionCheck": _QUEUES, "closedNodes": _QUEUES,
    "systemNamespace": _CONTROLLER, "reservedNamespaces": _CONTROLLER,
    "controllerServiceAccount": _CONTROLLER, "startGuard": _CONTROLLER,
    "events": _CONTROLLER + " (a rules reload's Events: rules/reload.yaml)",
}


class PoolDerivationSpec(Strict):
    """Pool derivation, naming and flavors (docs/concepts/pools-and-flavors.md "Pools and flavors"): which
    Nodes count, their flavors, the names of flavors, pools and catalog entries, the entrance and the
    defaults of a derived InstanceType. The queues and the AdmissionCheck are ``PoolQueues``
    (rules/pools/queues.yaml), the controller's namespaces, start guard and Events ``ControllerPolicy``
    (rules/controller.yaml)."""

    settings: dict[str, str] = Field(
        description="role -> setting name (rules/settings.yaml) the derivation reads")
    managed: Expr = Field(description="CEL over ``labels`` and ``managedKey``: true when the Node counts")
    namePrefix: str = Field(min_length=1, description="every flavor, pool and catalog name starts with "
                                                      "it (CEL variable of flavors, pools, catalog)")
    flavors: dict[Literal["cpu", "device"], FlavorRule]
    pools: PoolNames
    catalog: PoolNames
    generalGroup: Expr
    entrancePrefix: str = Field(min_length=1,
                                description="every entrance starts with it (CEL variable of entrance; "
                                            "the Workload webhook's match condition)")
    entrance: Expr
    resourceTypes: dict[Literal["flavor", "queue", "deviceClass"], str]
    derivedType: DerivedTypeSpec
    incompleteType: IncompleteTypeSpec

    @model_validator(mode="before")
    @classmethod
    def _moved_elsewhere(cls, data):
        """An older derivation still holding what moved to another rule file: an error naming its home."""
        if not isinstance(data, dict):
            return data
        moved = [key for key in MOVED_FROM_DERIVATION if key in data]
        if moved:
            raise ValueError("; ".join(f"{key}: {MOVED_FROM_DERIVATION[key]}" for key in moved)
                             + f": delete {'them' if len(moved) > 1 else 'it'} here")
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
