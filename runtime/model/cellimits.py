"""The rule kind ``CelLimits`` (rules/cel.yaml): what a CEL expression may cost.

``runtime``: the budget every evaluation carries (docs/rule-authoring.md "Run-time budget"). The
document holds one section per kind of limit, so static cost limits can sit beside it. Registered
into :data:`runtime.model.rulefiles.SPEC_MODELS` at import time.
"""
from __future__ import annotations

from pydantic import Field

from runtime.model import rulefiles
from runtime.model.base import Strict


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
    """rules/cel.yaml: limits on what CEL expressions may cost (``runtime``: at evaluation)."""

    runtime: CelRuntimeLimits = Field(CelRuntimeLimits(), description="the budget every evaluation carries and "
                                      "stops at (docs/rule-authoring.md \"Run-time budget\")")


rulefiles.SPEC_MODELS["CelLimits"] = CelLimitsSpec
