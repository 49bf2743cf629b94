"""Rule kind ``KueueConfiguration`` (rules/pools/kueue.yaml): Kueue resource charging
(docs/concepts/pools-and-flavors.md "Kueue's resource charging").

The ``resources`` part of Kueue's Configuration the controller derives: ``transformations`` (one
row per input resource-key pattern, expanded per manufacturer), the excluded resource prefixes, and
which resource is CPU (its exclusion changes what the CPU view counts).
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, field_validator

from runtime.model import rulefiles
from runtime.model.rulefiles import Expr, Strict


class KueueTransformationRule(Strict):
    """One row of ``transformations``: expanded per manufacturer (``{base}``, ``{id}``, ``{kind}``)."""

    input: str = Field(min_length=1, description="resource-key pattern, e.g. '{base}.shared'")
    family: Literal["exclusive", "shared", "sliced", "partitioned"]
    strategy: Literal["Replace", "Retain"]
    multiplyBy: str = Field(default="",
                            description="resource-key pattern whose Pod value multiplies the input")
    credits: Optional[Expr] = Field(default=None,
                                    description="CEL over constants: credits per unit of input; "
                                                              "absent = no outputs (Kueue ignores the input)")
    partitionKindOnly: bool = False


class KueuePrefixRule(Strict):
    prefix: str = Field(min_length=1, description="resource-key prefix pattern, e.g. '{base}.sliced.memory-'")
    partitionKindOnly: bool = False


class KueueExclusions(Strict):
    global_: list[str] = Field(alias="global", default=[], description="prefixes excluded as written")
    perManufacturer: list[KueuePrefixRule] = []


class KueueConfigurationSpec(Strict):
    apiVersion: str = Field(min_length=1, description="Kueue's Configuration apiVersion")
    kind: Literal["Configuration"]
    resourceKeysParams: str = Field(min_length=1)
    transformations: list[KueueTransformationRule] = Field(min_length=1)
    excludeResourcePrefixes: KueueExclusions
    cpuResource: str = Field(min_length=1)

    @field_validator("transformations")
    @classmethod
    def _unique_inputs(cls, value: list[KueueTransformationRule]) -> list[KueueTransformationRule]:
        seen = set()
        for row in value:
            if row.input in seen:  # Kueue refuses duplicate inputs (pkg/config/validation.go)
                raise ValueError(f"input {row.input!r} listed twice")
            seen.add(row.input)
        return value

    @property
    def cpu_excluded(self) -> bool:
        """True when Kueue ignores ``cpu`` (a global prefix matches it): CPU-only Instance Pods then
        carry their pool's flavor affinity and the CPU view counts Instance Pods
        (docs/concepts/pools-and-flavors.md "Kueue's resource charging")."""
        return any(self.cpuResource.startswith(p) for p in self.excludeResourcePrefixes.global_)


rulefiles.SPEC_MODELS["KueueConfiguration"] = KueueConfigurationSpec
