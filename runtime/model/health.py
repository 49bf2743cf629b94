"""Rule kind ``AcceleratorHealth`` (rules/health.yaml): which facts the probes read make an accelerator
unhealthy, and how long it must stay clean to count again (docs/concepts/out-of-service.md "Health").

Registered into :data:`runtime.model.rulefiles.SPEC_MODELS` at import time.
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from runtime.model import rulefiles
from runtime.model.rulefiles import Strict

#: The per-accelerator facts a probe reads (runtime/model/facts.py ``AcceleratorFacts.health``; ``lost``:
#: the device failed after enumeration, ``healthy: false``).
FACTS = ("xid", "eccUncorrectableVolatile", "retiredPagesPending", "remappedRowsPending",
         "remappedRowsFailure", "lost")


class HealthRule(Strict):
    """One rule: a fact and when it holds. ``xid``: the XIDs that count (an event of another XID does
    not); a counter: ``above`` (the value must exceed it); a flag (``retiredPagesPending``,
    ``remappedRowsPending``, ``remappedRowsFailure``, ``lost``): set."""

    name: str = Field(min_length=1, pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
    fact: Literal["xid", "eccUncorrectableVolatile", "retiredPagesPending", "remappedRowsPending",
                  "remappedRowsFailure", "lost"]
    xids: list[int] = Field([], description="fact xid: the XIDs that make the accelerator unhealthy")
    above: Optional[int] = Field(None, ge=0, description="a counter fact: unhealthy when it exceeds this")
    description: str = ""

    @model_validator(mode="after")
    def _fits_its_fact(self) -> "HealthRule":
        if self.fact == "xid" and not self.xids:
            raise ValueError(f"rule {self.name}: fact xid needs xids")
        if self.fact == "eccUncorrectableVolatile" and self.above is None:
            raise ValueError(f"rule {self.name}: a counter fact needs above")
        return self


class RepeatSpec(Strict):
    """Hysteresis: a failure within ``withinSeconds`` of the last one is a repeat; the clean period is
    ``cleanSeconds`` x ``factor`` ^ (repeats), at most ``maxCleanSeconds``."""

    withinSeconds: float = Field(3600, ge=0)
    factor: float = Field(2, ge=1)
    maxCleanSeconds: float = Field(14400, gt=0)


class HealthEventSpec(Strict):
    reason: str = Field(min_length=1)
    message: str = Field(min_length=1, description="str.format: {node}, {accelerator}, {index}, {fact}, "
                                                   "{rule}, {until}, {strikes}")


class HealthEvents(Strict):
    """The Events on the node's Devices at each transition (unhealthy: Warning, healthy: Normal)."""

    unhealthy: HealthEventSpec
    healthy: HealthEventSpec


class NvmlEventSpec(Strict):
    """The NVML event set the agent's own thread waits on (probes/nvmlevents.py)."""

    waitMilliseconds: int = Field(1000, gt=0, description="one nvmlEventSetWait timeout")


class AcceleratorHealthSpec(Strict):
    """spec of rules/health.yaml; field meanings are commented there."""

    rules: list[HealthRule] = Field(min_length=1)
    cleanSeconds: float = Field(gt=0, description="how long an accelerator must stay clean to count again")
    repeat: RepeatSpec = Field(default_factory=RepeatSpec)
    events: HealthEvents
    nvml: NvmlEventSpec = Field(default_factory=NvmlEventSpec)

    @model_validator(mode="after")
    def _unique_names(self) -> "AcceleratorHealthSpec":
        names = [r.name for r in self.rules]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"rules: names used twice: {', '.join(twice)}")
        return self

    def clean_seconds(self, strikes: int) -> float:
        """The clean period of an accelerator's ``strikes``-th failure within the repeat window."""
        return min(self.cleanSeconds * self.repeat.factor ** max(strikes - 1, 0), self.repeat.maxCleanSeconds)


rulefiles.SPEC_MODELS["AcceleratorHealth"] = AcceleratorHealthSpec
