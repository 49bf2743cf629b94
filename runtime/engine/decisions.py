"""First-match decision tables (rule kind ``DecisionTable``), evaluated by the durable_rules backend.

A table's rows are ``when`` (fact -> required value, all must hold) and ``then`` (outputs; a string
``$fact`` copies that fact). :class:`DecisionTable` compiles once per rules generation.
"""
from __future__ import annotations

from typing import Any, Mapping

from runtime.engine.backends import durable as durable_backend
from runtime.model.rulefiles import DecisionTableSpec


class DecisionError(ValueError):
    """Facts that the table does not declare, or no row matched."""


class DecisionTable:
    """A compiled decision table. ``decide(facts)`` returns ``(row name, outputs)``."""

    def __init__(self, name: str, spec: DecisionTableSpec, generation: int):
        self.name = name
        self.spec = spec
        for row in spec.rows:
            unknown = set(row.when) - set(spec.facts)
            if unknown:
                raise DecisionError(f"decision table {name}, row {row.name}: unknown facts {sorted(unknown)}")
        self._compiled = durable_backend.compile_table(name, generation, [row.when for row in spec.rows])

    def decide(self, facts: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        """Evaluate ``facts`` (exactly the declared facts) and render the first matching row."""
        missing = set(self.spec.facts) - set(facts)
        if missing:
            raise DecisionError(f"decision table {self.name}: facts missing: {sorted(missing)}")
        index = durable_backend.first_match(self._compiled, {k: facts[k] for k in self.spec.facts})
        if index is None:
            raise DecisionError(f"decision table {self.name}: no row matched {dict(facts)}")
        row = self.spec.rows[index]
        out = {}
        for key, value in row.then.items():
            if isinstance(value, str) and value.startswith("$"):
                value = facts.get(value[1:], "")
            out[key] = value
        return row.name, out
