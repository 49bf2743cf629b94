"""The base of every rule-file model: unknown fields are refused (a typo in a rule file is an error)."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):  # no docstring: the generated reference would give it to every model without one
    # defer_build: a model's validator is built when it first validates (or a model that nests it
    # does), not when its module is imported: of the ~100 models a command imports, the rules it
    # loads validate about 30 (issue 24: `accelpolicy test rules` paid for all of them at start).
    model_config = ConfigDict(extra="forbid", frozen=False, populate_by_name=True, defer_build=True)
