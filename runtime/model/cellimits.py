"""The ``CelLimits`` rule kind (rules/cel.yaml): what a CEL expression of the rules may cost.

Two sections, one per time a limit applies:

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
    """rules/cel.yaml: limits on what CEL expressions may cost (``static``: at lint, load and reload;
    ``runtime``: at evaluation)."""

    static: CelStaticLimits = Field(CelStaticLimits(), description="the worst-case cost estimates every "
                                    "expression must stay within (docs/rule-authoring.md \"What lint "
                                    "checks\")")
    runtime: CelRuntimeLimits = Field(CelRuntimeLimits(),
                                      description="the budget every evaluation carries and "
                                      "stops at (docs/rule-authoring.md \"Run-time budget\")")


rulefiles.SPEC_MODELS["CelLimits"] = CelLimitsSpec
