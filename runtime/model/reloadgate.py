"""The ``reloadGate`` entry of the PoolDerivation (rules/pools/derivation.yaml)."""
from __future__ import annotations

from typing import Optional

from pydantic import Field

from runtime.model.base import Strict


class ReloadGateSpec(Strict):
    """The reload gate (docs/rule-authoring.md "How a rules change goes live"): what a new rules generation
    must pass before it replaces the serving one, and how replicas share the verdict."""

    maxNewDenials: Optional[int] = Field(default=None, ge=0,
                                         description="hold a generation that newly denies "
                                         "more than this many existing objects (allowed -> denied); none: no "
                                         "hold. Read from the generation tried, so an edit that means to "
                                         "deny more says so")
    sampleReviews: int = Field(default=200, ge=0,
                               description="reviews each webhook server keeps in memory, most "
                                                              "recent first, to replay a new generation on "
                                                              "(0: none)")
    sampleBytes: int = Field(default=4 * 1024 * 1024, ge=0,
                             description="their request bodies' bytes at most, "
                                                                        "all webhooks together")
    suites: bool = Field(default=True,
                         description="run the rule suites of the rules directory's tests/ (when "
                                                   "it has one; the chart's ConfigMap has none)")
    verdictAnnotation: str = Field(default="rules.accelpolicy.dev/verdict", min_length=1,
                                   description="the annotation on the rules ConfigMap where the controller's "
                                               "leader records its verdict, accepted:<fingerprint> or "
                                               "refused:<fingerprint>; admission replicas follow it")
    followSeconds: float = Field(default=60.0, ge=0,
                                 description="how long an admission replica waits for the "
                                                                 "leader's verdict on a changed set before "
                                                                 "its own verdict holds")
