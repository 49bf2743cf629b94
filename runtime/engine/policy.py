"""Typed access to a loaded RuleSet: the one object every engine function takes.

``Policy(ruleset)`` resolves each rule kind once and builds the derived lookups (manufacturers by
id, decision tables compiled for this rules generation). It holds no cluster state.
"""
from __future__ import annotations

from functools import cached_property

from runtime.engine.decisions import DecisionTable
from runtime.model.normalize import CruftRules
from runtime.model import rulefiles as rf
from runtime.model.controllerpolicy import ControllerPolicySpec
from runtime.model.poolqueues import PoolQueuesSpec
from runtime.model.kueue import KueueConfigurationSpec
from runtime.rules.loader import RuleSet


class Policy:
    """Rule data for the engine. Attributes mirror the rule kinds (docs/reference/rule-kinds.md)."""

    def __init__(self, ruleset: RuleSet):
        self.ruleset = ruleset
        self.constants: rf.ConstantsSpec = ruleset.get("Constants")
        self.manufacturer_table: rf.ManufacturerTableSpec = ruleset.get("ManufacturerTable")
        self.labels: rf.LabelCatalogSpec = ruleset.get("LabelCatalog")
        self.settings: rf.SettingCatalogSpec = ruleset.get("SettingCatalog")
        self.derivation: rf.PoolDerivationSpec = ruleset.get("PoolDerivation")
        self.queues: PoolQueuesSpec = ruleset.get("PoolQueues")
        self.controller: ControllerPolicySpec = ruleset.get("ControllerPolicy")
        self.presets: rf.PresetTableSpec = ruleset.get("PresetTable")
        self.fourview: rf.FourViewSpec = ruleset.get("FourView")
        self.manufacturers: dict[str, rf.Manufacturer] = self.manufacturer_table.by_id()

    # -- label keys by role -------------------------------------------------------------------------
    def key(self, role: str) -> str:
        """The label/annotation key of ``role`` (rules/labels.yaml ``spec.keys``)."""
        return self.labels.keys[role]

    def prefix(self, role: str) -> str:
        """The key prefix of ``role`` (rules/labels.yaml ``spec.prefixes``)."""
        return self.labels.prefixes[role]

    def suffix(self, role: str) -> str:
        """The key suffix of ``role`` (rules/labels.yaml ``spec.suffixes``), e.g. ``count`` -> ``.count``."""
        return self.labels.suffixes[role]

    def setting(self, role: str) -> str:
        """The name of the setting the derivation reads as ``role`` (rules/pools/derivation.yaml
        ``settings``)."""
        return self.derivation.settings[role]

    @cached_property
    def kueue(self) -> KueueConfigurationSpec:
        """rules/pools/kueue.yaml: Kueue's charging and the ``cpu`` resource name."""
        return self.ruleset.get("KueueConfiguration")

    @cached_property
    def node_facts(self) -> rf.NodeFactsSpec:
        return self.ruleset.get("NodeFacts")

    @cached_property
    def cruft(self) -> CruftRules:
        c = self.node_facts.cruft
        return CruftRules(c.cutAt, c.deleteTokens, c.leadingPattern, c.trailingSuffixes, c.trailingPattern)

    def decision_table(self, name: str) -> DecisionTable:
        """The compiled DecisionTable ``name`` (compiled once per Policy)."""
        cache = self.__dict__.setdefault("_tables", {})
        if name not in cache:
            spec = self.ruleset.get("DecisionTable", name)
            cache[name] = DecisionTable(name, spec, self.ruleset.generation)
        return cache[name]

    def manufacturer_of_key(self, key: str) -> rf.Manufacturer | None:
        """The manufacturer named by an aKey's text before its first `-`, if known."""
        return self.manufacturers.get(key.split("-", 1)[0])
