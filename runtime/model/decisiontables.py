"""What the engine gives each decision table and reads back (docs/rule-authoring.md "Decision tables").

A ``DecisionTable`` rule file (rules/pools/phase.yaml, rules/instances/pod.yaml) is policy: its rows. What
its facts are and which outputs are read is mechanism, fixed by the code that consults it, and declared
once here: the lint checks each table against it (:mod:`runtime.rules.tablechecks`: an unknown fact or
output, a cell of the wrong type, a value its fact never takes), and the engine's consumers give exactly
these facts (tests/engine/test_decision_tables.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

CONDITION = ("True", "False", "Unknown")   # a Kubernetes condition's status


@dataclass(frozen=True)
class Fact:
    """One fact a table is given: its type (``bool`` or ``str``) and, for a string that takes one of a
    few values, those values (a row asking for another never matches)."""

    type: type
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class TableContract:
    """One table the engine consults: ``reader`` (the component, for findings), the ``facts`` it gives and
    the ``outputs`` it reads (status fields; a ``$fact`` output copies a fact), each a :class:`Fact`."""

    reader: str
    facts: Mapping[str, Fact]
    outputs: Mapping[str, Fact]


# the enum of InstanceType status.phase in crds/ (tests/engine/test_decision_tables.py compares them)
INSTANCE_TYPE_PHASES = ("Active", "Inactive", "Draining", "Activating")


TABLES: dict[str, TableContract] = {
    # runtime/engine/pools/instancetypes.py instance_type_status
    "instancetype-phase": TableContract(
        reader="the InstanceType status (controller)",
        facts={"deleting": Fact(bool), "stopPolicy": Fact(str, ("None", "Hold", "HoldAndDrain")),
               "reserved": Fact(bool), "queue": Fact(str, CONDITION + ("Missing",)),
               "queueMessage": Fact(str), "incomplete": Fact(bool), "incompleteMessage": Fact(str),
               "flavors": Fact(bool)},
        outputs={"phase": Fact(str, INSTANCE_TYPE_PHASES), "phaseMessage": Fact(str)}),
    # runtime/engine/instances/podstatus.py phase_from_pod
    "instance-phase": TableContract(
        reader="the Instance status (controller)",
        facts={"scheduled": Fact(str, CONDITION), "scheduledMessage": Fact(str),
               "initialized": Fact(str, CONDITION), "initializedReason": Fact(str),
               "ready": Fact(str, CONDITION), "readyReason": Fact(str)},
        outputs={"phase": Fact(str), "phaseMessage": Fact(str)}),
}
