"""Decision tables checked like CEL (docs/rule-authoring.md "Decision tables").

Every ``DecisionTable`` document is checked against what its reader gives and reads
(:data:`runtime.model.decisiontables.TABLES`): its name (a table no component reads, a table a component
reads that is missing), each declared fact, each cell of ``when`` (a fact the table does not declare, a
value of the wrong type: YAML reads an unquoted ``True`` as a bool where the fact is the string
``"True"``; a value its fact never takes), each output of ``then`` (one the reader does not read, a
``$fact`` the table does not declare, a value of the wrong type or one the output never takes). Each
finding is at its cell's file:line:column; the loader refuses the set on them as on any other.
"""
from __future__ import annotations

import itertools
import math
from typing import Any

from runtime.model.decisiontables import TABLES, Fact
from runtime.rules.problems import RuleProblem
from runtime.rules.yamlsrc import dotted

_COMBINATIONS = 4096   # the most fact combinations the coverage check enumerates


def _spelled(value: Any) -> str:
    """A cell as YAML wrote it: ``true``, ``"True"``, ``3``, ``[a, b]``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (int, float)):
        return "a number"
    return "null" if value is None else "a " + type(value).__name__.replace("dict", "map")


def cell_problem(name: str, fact: Fact, value: Any, what: str = "fact") -> str:
    """'' when ``value`` is a value ``fact`` (named ``name``) can have, else why not (``what``: ``fact`` or
    ``output``)."""
    if fact.type is bool and not isinstance(value, bool):
        return (f"type mismatch: {what} {name!r} is a bool (true or false), {_spelled(value)} is "
                f"{_kind(value)}")
    if fact.type is str and not isinstance(value, str):
        hint = ""
        if isinstance(value, (bool, int, float)):   # YAML read an unquoted True, 1 or 1.5 as a bool or number
            meant = next((v for v in fact.values if v.lower() == str(value).lower()), str(value))
            hint = f': quote it, "{meant}"'
        return f"type mismatch: {what} {name!r} is a string, {_spelled(value)} is {_kind(value)}{hint}"
    if fact.values and value not in fact.values:
        known = ", ".join(f'"{v}"' for v in fact.values)
        never = " (this row never matches)" if what == "fact" else ""
        return f"{what} {name!r} is one of {known}: {_spelled(value)} is none of them{never}"
    return ""


class _Table:
    """One table document's findings."""

    def __init__(self, doc: Any, problems: list[RuleProblem]):
        self.doc, self.problems = doc, problems

    def add(self, path: tuple, message: str) -> None:
        source = self.doc.source
        self.problems.append(RuleProblem(self.doc.file, source.line_of(path), source.column_of(path),
                                         dotted(path), message))

    def check(self) -> None:
        contract = TABLES.get(self.doc.name)
        if contract is None:
            self.add(("metadata", "name"), f"no component reads a DecisionTable named {self.doc.name!r} "
                                           f"(read: {', '.join(sorted(TABLES))})")
            return
        spec = self.doc.spec
        before = len(self.problems)
        given = ", ".join(contract.facts)
        for i, fact in enumerate(spec.facts):
            if fact not in contract.facts:
                self.add(("spec", "facts", i), f"unknown fact {fact!r}: {contract.reader} gives {given}")
        declared = ", ".join(spec.facts)
        for i, row in enumerate(spec.rows):
            for fact, value in row.when.items():
                where = ("spec", "rows", i, "when", fact)
                if fact not in spec.facts:
                    self.add(where, f"unknown fact {fact!r} (facts: {declared})")
                elif fact in contract.facts:
                    why = cell_problem(fact, contract.facts[fact], value)
                    if why:
                        self.add(where, why)
            self.outputs(i, row.then, contract, spec.facts)
        if len(self.problems) == before:
            self.coverage(contract)

    def outputs(self, i: int, then: dict, contract: Any, facts: list[str]) -> None:
        """The ``then`` of row ``i``: known outputs, ``$fact`` copies of declared facts, values of their
        type."""
        for output, value in then.items():
            where = ("spec", "rows", i, "then", output)
            if output not in contract.outputs:
                self.add(where, f"unknown output {output!r} ({contract.reader} reads "
                                f"{', '.join(contract.outputs)})")
            elif isinstance(value, str) and value.startswith("$"):
                if value[1:] not in facts:
                    self.add(where, f"unknown fact {value[1:]!r} in {value!r} (facts: {', '.join(facts)})")
            else:
                why = cell_problem(output, contract.outputs[output], value, "output")
                if why:
                    self.add(where, why)


    def coverage(self, contract: Any) -> None:
        """A finding when some facts match no row (the engine would fail there): every combination of the
        declared facts that take a few values (bools, the values of a string fact) must reach a row that
        asks nothing of the other facts, such as a last row with ``when: {}``."""
        spec = self.doc.spec
        few = [f for f in spec.facts if contract.facts[f].type is bool or contract.facts[f].values]
        ranges = [(True, False) if contract.facts[f].type is bool else contract.facts[f].values for f in few]
        if math.prod(len(r) for r in ranges) > _COMBINATIONS:
            return
        for values in itertools.product(*ranges):
            facts = dict(zip(few, values))
            if not any(all(k in facts and facts[k] == v for k, v in row.when.items()) for row in spec.rows):
                shown = ", ".join(f"{k}: {_spelled(v)}" for k, v in facts.items())
                self.add(("spec", "rows"), f"no row matches {{{shown}}} (the reader would fail there): add a "
                                           "last row with when: {}")
                return


def table_problems(documents: list) -> list[RuleProblem]:
    """The findings of every ``DecisionTable`` among the loaded ``documents`` (``RuleFile`` objects with
    their source); see the module docstring."""
    problems: list[RuleProblem] = []
    for doc in documents:
        if doc.kind == "DecisionTable" and doc.source is not None:
            _Table(doc, problems).check()
    return problems


def missing_tables(root: str, names: set[str]) -> list[RuleProblem]:
    """A finding for each table a component reads that the rules (``names``: their DecisionTable names)
    lack."""
    return [RuleProblem(root, 0, 0, "<directory>", f"no DecisionTable named {name!r}: {contract.reader} "
                        "reads it") for name, contract in sorted(TABLES.items()) if name not in names]
