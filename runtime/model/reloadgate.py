"""The ``ReloadGate`` rule kind (rules/reload.yaml): how a rules generation goes live
(docs/rule-authoring.md "How a rules change goes live"). Read by :mod:`runtime.reload` only."""
from __future__ import annotations

import string
from typing import Optional

from pydantic import Field, model_validator

from runtime.model import rulefiles
from runtime.model.base import Strict
from runtime.model.stateevents import StateEvent

#: The events of a reload, and the str.format variables each message may use.
RELOAD_EVENT_VARIABLES = {
    "reloaded": {"generation", "root", "seconds"},
    "refused": {"root", "generation", "serving", "problems"},
    "verdictsChanged": {"generation", "count", "changes"},
    "held": {"generation", "serving", "reasons", "approve"},
    "approved": {"generation", "by", "at"},
}


class HoldSpec(Strict):
    """When an accepted generation is held until an operator approves its content hash. Read from the
    generation that serves, never from the one tried: an edit cannot lift its own hold."""

    runningWork: bool = Field(default=True, description="hold a generation that would drain a queue holding "
                                                        "admitted Workloads (Kueue evicts them) or stop a "
                                                        "running Instance")
    flavorsInUse: bool = Field(default=True, description="hold a generation that would delete a "
                                                         "ResourceFlavor an admitted Workload uses")
    maxCapacityRemovedPercent: float = Field(default=25.0, ge=0, le=100,
                                             description="hold a generation that removes more than this "
                                                         "percent of any pool's capacity in any view "
                                                         "(whole, shared, logical, partition, cpu)")
    maxNewDenialsPercent: float = Field(default=5.0, ge=0, le=100,
                                        description="hold a generation that newly denies (allowed -> "
                                                    "denied) more than this percent of the recent reviews "
                                                    "replayed, or of the existing objects judged")
    maxNewDenials: Optional[int] = Field(default=None, ge=0,
                                         description="and more than this many existing objects (none: the "
                                                     "percent alone)")


class ReloadAnnotations(Strict):
    """The rules ConfigMap's annotations the reload reads and writes."""

    verdict: str = Field(default="rules.accelpolicy.dev/verdict", min_length=1,
                         description="the leader's one verdict: <accepted|refused|held|approved>:<hash>")
    status: str = Field(default="rules.accelpolicy.dev/status", min_length=1,
                        description="the leader's words on the latest generation tried (why held or refused)")
    approve: str = Field(default="rules.accelpolicy.dev/approve", min_length=1,
                         description="set by an operator to a held generation's hash to let it serve")
    approvedBy: str = Field(default="rules.accelpolicy.dev/approved-by", min_length=1,
                            description="who approved (written by `accelpolicy approve`)")
    serving: str = Field(default="rules.accelpolicy.dev/serving", min_length=1,
                         description="the hash of the generation the leader serves")
    parent: str = Field(default="rules.accelpolicy.dev/parent", min_length=1,
                        description="the hash of the generation it replaced (a revert to it is never held)")


class ReloadEvents(Strict):
    """The Events (and log lines) of a reload, on the rules ConfigMap (or the settings Namespace)."""

    reloaded: StateEvent = Field(description="{generation} in force; {root}, {seconds}: load time (a float)")
    refused: StateEvent = Field(description="{generation} refused; {serving} keeps serving; {root}, "
                                            "{problems}: one per line")
    verdictsChanged: StateEvent = Field(description="the verdicts {generation} changes; {count}, {changes}")
    held: StateEvent = Field(description="{generation} held; {serving} keeps serving; {reasons}: one per "
                                         "line; {approve}: the command that approves it")
    approved: StateEvent = Field(description="{generation} approved; {by}: who, {at}: when (as far as known)")

    @model_validator(mode="after")
    def _known_variables(self) -> "ReloadEvents":
        for name, allowed in RELOAD_EVENT_VARIABLES.items():
            message = getattr(self, name).message
            used = {f for _, f, _, _ in string.Formatter().parse(message) if f is not None}
            if used - allowed:
                raise ValueError(f"{name}.message: unknown variable(s) {sorted(used - allowed)}; "
                                 f"allowed: {sorted(allowed)}")
        return self


class ReloadGateSpec(Strict):
    """The reload gate (docs/rule-authoring.md "How a rules change goes live"): what a new rules generation
    must pass before it replaces the serving one, when it is held, and where the one verdict lives."""

    sampleReviews: int = Field(default=200, ge=0,
                               description="reviews each webhook server keeps in memory, most recent first, "
                                           "to replay a new generation on (0: none)")
    sampleBytes: int = Field(default=4 * 1024 * 1024, ge=0,
                             description="their request bodies' bytes at most, all webhooks together")
    suites: bool = Field(default=True,
                         description="run the rule suites of the rules directory's tests/ (when it has one; "
                                     "the chart's ConfigMap has none)")
    hold: HoldSpec = Field(default_factory=HoldSpec)
    annotations: ReloadAnnotations = Field(default_factory=ReloadAnnotations)
    followSeconds: float = Field(default=60.0, ge=0,
                                 description="how long the leader waits for every serving replica's trial of "
                                             "a generation before it decides with the trials it has")
    events: ReloadEvents


rulefiles.SPEC_MODELS["ReloadGate"] = ReloadGateSpec
