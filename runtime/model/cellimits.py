"""The ``CelLimits`` rule kind (rules/cel.yaml): what a CEL expression of the rules may cost.

Three sections, one per time a limit applies:

- ``loading``: what the rule files may hold, checked as they are read, before a value is built
  (docs/rule-authoring.md "Bounded loading"): bytes per file and in all, YAML values after alias
  expansion, alias references, nesting, message and template length. Each field has a ceiling
  (``le``) an edit cannot raise it past.
- ``static``: read by the static checks (:mod:`runtime.rules.checks`, docs/rule-authoring.md "What
  lint checks"): an expression whose worst-case cost estimate is over ``maxExpressionCost`` refuses
  the rules set at lint, load and reload.
- ``runtime``: the budget every evaluation carries (docs/rule-authoring.md "Run-time budget").

Registered in :data:`runtime.model.rulefiles.SPEC_MODELS` on import (runtime/model/__init__.py).
"""
from __future__ import annotations

from pydantic import Field

from runtime.model import rulefiles
from runtime.model.base import Strict

# Kubernetes' static per-expression limit of CRD validation rules (k8s.io/apiextensions-apiserver
# validation StaticEstimatedCostLimit); its per-call runtime limit is a tenth of it (1e6).
DEFAULT_EXPRESSION_COST = 10_000_000
DEFAULT_LIST_SIZE = 32
DEFAULT_STRING_SIZE = 4096


class RuleLoadingLimits(Strict):
    """What the rule files of one rules directory may hold (docs/rule-authoring.md "Bounded loading").
    The defaults hold the shipped rules many times over; ``le`` is each field's ceiling, so the limits an
    edit states can be raised that far and no further (a ConfigMap holds at most 1 MiB in all)."""

    maxFileBytes: int = Field(256 * 1024, gt=0, le=1024 * 1024, description="bytes of one rule file")
    maxTotalBytes: int = Field(1024 * 1024, gt=0, le=8 * 1024 * 1024,
                               description="bytes of all the rule files together")
    maxNodes: int = Field(100_000, gt=0, le=500_000,
                          description="YAML values (maps, lists, scalars) of all the rule files together "
                                      "after alias expansion: an alias counts every value its anchor holds, "
                                      "each time")
    maxAliases: int = Field(1_000, gt=0, le=100_000,
                            description="YAML alias references (*name) in all the rule files together")
    maxDepth: int = Field(64, gt=0, le=256, description="levels of YAML nesting after alias expansion")
    maxMessageLength: int = Field(4096, gt=0, le=65_536,
                                  description="characters of a message or message template of the rules (a "
                                              "field named message or ...Message)")
    maxTemplateLength: int = Field(4096, gt=0, le=65_536,
                                   description="characters of a name or selector template (a field named "
                                               "...Template)")

    @classmethod
    def ceiling(cls) -> "RuleLoadingLimits":
        """Every limit at its ceiling: what a rules directory is read under until its own limits are
        known."""
        return cls(**{name: next(m.le for m in info.metadata if hasattr(m, "le"))
                      for name, info in cls.model_fields.items()})


class CelStaticLimits(Strict):
    """Limits of CEL expressions' worst-case cost estimates, in Kubernetes' CEL cost units."""

    maxExpressionCost: int = Field(DEFAULT_EXPRESSION_COST, gt=0,
                                   description="the most one expression's worst-case cost estimate may be "
                                               "(Kubernetes' limit of CRD validation rules: 10000000)")
    unboundedListSize: int = Field(DEFAULT_LIST_SIZE, gt=0,
                                   description="elements or entries assumed of a list or map that no "
                                               "literal, rule-file value or schema bound sizes")
    unboundedStringSize: int = Field(DEFAULT_STRING_SIZE, gt=0,
                                     description="characters assumed of a string that no literal, rule-file "
                                                 "value or schema bound sizes")


class CelRuntimeLimits(Strict):
    """The run-time budget of every CEL evaluation (docs/rule-authoring.md "Run-time budget");
    the defaults are Kubernetes' (per-call cost limit 1e6, comprehensions interrupted every 100
    iterations) and the webhook's own body cap for strings."""

    costLimit: int = Field(1_000_000, gt=0, description="cost units one evaluation may spend: a "
                           "comprehension iteration costs 1 plus the calls of its body, a string or list "
                           "built by + one unit per 10 characters or elements (Kubernetes' per-call limit)")
    checkEvery: int = Field(100, gt=0, description="comprehension iterations between two charges of the "
                            "budget and checks of the review's deadline (Kubernetes interrupts every 100)")
    maxStringSize: int = Field(3 * 1024 * 1024, gt=0, description="characters (bytes) of the longest "
                               "string + may build (the webhook's 3 MiB body cap)")
    maxListSize: int = Field(100_000, gt=0, description="elements of the longest list + may build")


class CelLimitsSpec(Strict):
    """rules/cel.yaml: limits on what the rule files may hold (``loading``: as they are read) and what CEL
    expressions may cost (``static``: at lint, load and reload; ``runtime``: at evaluation)."""

    loading: RuleLoadingLimits = Field(RuleLoadingLimits(), description="what the rule files may hold, "
                                       "checked before a value is built (docs/rule-authoring.md \"Bounded "
                                       "loading\")")
    static: CelStaticLimits = Field(CelStaticLimits(), description="the worst-case cost estimates every "
                                    "expression must stay within (docs/rule-authoring.md \"What lint "
                                    "checks\")")
    runtime: CelRuntimeLimits = Field(CelRuntimeLimits(),
                                      description="the budget every evaluation carries and "
                                      "stops at (docs/rule-authoring.md \"Run-time budget\")")


rulefiles.SPEC_MODELS["CelLimits"] = CelLimitsSpec
