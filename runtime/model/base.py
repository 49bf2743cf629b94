"""The base of every rule-file model: unknown fields are refused (a typo in a rule file is an error);
and :class:`Expr`, the type of a field holding CEL source."""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):  # no docstring: the generated reference would give it to every model without one
    # defer_build: a model's validator is built when it first validates (or a model that nests it
    # does), not when its module is imported: of the ~100 models a command imports, the rules it
    # loads validate about 30 (built at import, all of them slowed `accelpolicy test rules`' start;
    # docs/performance.md "Fast to start, light to hold").
    model_config = ConfigDict(extra="forbid", frozen=False, populate_by_name=True, defer_build=True)


class Expr(str):
    """CEL source text; ``program`` is set by the loader (a compiled :class:`CelExpression`)."""

    program: Any = None

    @classmethod
    def __get_pydantic_core_schema__(cls, source, handler):
        from pydantic_core import core_schema

        return core_schema.no_info_after_validator_function(cls, core_schema.str_schema(min_length=1))

    def evaluate(self, activation: dict, memo: bool = True) -> Any:
        """Evaluate the compiled program (see runtime.rules.cel.evaluate.CelExpression.evaluate)."""
        return self.program.evaluate(activation, memo=memo)
