"""The ``CelLimits`` rule kind (rules/cel.yaml): what a CEL expression of the rules may cost.

Read by the static checks (:mod:`runtime.rules.checks`, docs/rule-authoring.md "What lint checks"):
an expression whose worst-case cost estimate is over ``maxExpressionCost`` refuses the rules set.
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


class CelLimitsSpec(Strict):
    """Limits of CEL expressions, in Kubernetes' CEL cost units."""

    maxExpressionCost: int = Field(DEFAULT_EXPRESSION_COST, gt=0,
                                   description="the most one expression's worst-case cost estimate may be "
                                               "(Kubernetes' limit of CRD validation rules: 10000000)")
    unboundedListSize: int = Field(DEFAULT_LIST_SIZE, gt=0,
                                   description="elements or entries assumed of a list or map that no literal, "
                                               "rule-file value or schema bound sizes")
    unboundedStringSize: int = Field(DEFAULT_STRING_SIZE, gt=0,
                                     description="characters assumed of a string that no literal, rule-file "
                                                 "value or schema bound sizes")


rulefiles.SPEC_MODELS["CelLimits"] = CelLimitsSpec
