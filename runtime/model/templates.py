"""Rule-file models whose ``str.format`` templates are checked when the rules load."""
from __future__ import annotations

import string
from typing import ClassVar

from pydantic import Field, model_validator

from runtime.model.base import Strict


class Templates(Strict):
    """A model whose ``str.format`` templates may name only the variables ``VARIABLES`` lists per field
    (a field that is a model with a ``message`` is checked on that message); a typo fails at load."""

    VARIABLES: ClassVar[dict[str, set[str]]] = {}

    @model_validator(mode="after")
    def _known_variables(self):
        for name, allowed in self.VARIABLES.items():
            value = getattr(self, name)
            template = getattr(value, "message", value)
            used = {f for _, f, _, _ in string.Formatter().parse(template) if f}
            if used - allowed:
                raise ValueError(f"{name}: unknown template field(s) {', '.join(sorted(used - allowed))} "
                                 f"(known: {', '.join(sorted(allowed)) or 'none'})")
        return self


class IncompleteTypeSpec(Templates):
    """An InstanceType whose spec lacks what names its pool (docs/concepts/pools-and-flavors.md "InstanceType
    admission" requires it)."""

    VARIABLES: ClassVar[dict[str, set[str]]] = {"message": {"fields"}}
    required: list[str] = Field(min_length=1, description="spec fields every type needs")
    requiredWhenAcceleratable: list[str] = []
    message: str = Field(min_length=1, description="its phaseMessage (phase Inactive); {fields}: the missing "
                                                   "ones as spec.<field>, comma-separated")
    unitPlaceholder: str = Field(min_length=1, description="status.summary.unit's part for a missing "
                                                           "unitResources.cpu, unitResources.ram or "
                                                           "localStorage")
