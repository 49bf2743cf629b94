"""The base of every rule-file model: unknown fields are refused (a typo in a rule file is an error)."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):  # no docstring: the generated reference would give it to every model without one
    model_config = ConfigDict(extra="forbid", frozen=False, populate_by_name=True)
