"""The Events of the controller's state transitions and background audit, as rules/controller.yaml
``spec.events`` declares them (docs/observability.md "Events"; a rules reload's are in rules/reload.yaml)."""
from __future__ import annotations

import string
from typing import Literal

from pydantic import Field, model_validator

from runtime.model.base import Strict


class StateEvent(Strict):
    """One Event the controller records on a state transition (docs/observability.md "Events")."""

    type: Literal["Normal", "Warning"]
    reason: str = Field(min_length=1, description="CamelCase, as Kubernetes reasons are")
    message: str = Field(min_length=1, description="str.format with the variables its entry names")


# The str.format variables each transition Event's message may use (runtime/controller/transitions.py).
STATE_EVENT_VARIABLES = {"nodeLeftPool": {"node", "flavors"}, "nodeJoinedPool": {"node", "flavors"},
                         "typeDraining": {"type", "queue"}, "workloadRetry": {"check", "message"},
                         "workloadRetryLoop": {"check", "flavor", "count", "other", "pool", "node"},
                         "auditFailed": {"policy", "rule", "message"},
                         "flavorSelectsTooFewNodes": {"pool", "flavor", "message"},
                         "flavorSelectsItsNodes": {"pool", "flavor"},
                         "acceleratorsUnusable": {"pool", "flavor", "node", "message"},
                         "acceleratorsUsable": {"pool", "flavor", "node"}}


class StateEvents(Strict):
    """The Events of the controller's state transitions, once per transition, and of its background audit
    (docs/observability.md)."""

    nodeLeftPool: StateEvent = Field(
        description="on the Node; {node}, {flavors}: the ResourceFlavors it left")
    nodeJoinedPool: StateEvent = Field(
        description="on the Node; {node}, {flavors}: the ResourceFlavors it joined")
    typeDraining: StateEvent = Field(description="on the InstanceType; {type}, {queue}: its ClusterQueue")
    workloadRetry: StateEvent = Field(description="on the Workload; {check}, {message}: the check's answer")
    workloadRetryLoop: StateEvent = Field(description="on the Workload; {check}, {flavor}, {count}, {other}: "
                                                      "the flavor holding {node} of pool {pool}")
    auditFailed: StateEvent = Field(description="on the object the background audit newly finds failing; "
                                                "{policy}, {rule} (- when none), {message}")
    flavorSelectsTooFewNodes: StateEvent = Field(description="on the InstanceType, when a flavor of its pool "
                                                             "selects fewer of its contributing Nodes than "
                                                             "before; {pool}, {flavor}, {message}: the "
                                                             "audit's (rules/audit.yaml reach)")
    flavorSelectsItsNodes: StateEvent = Field(description="on the InstanceType, when that flavor selects all "
                                                          "its nodes again; {pool}, {flavor}")
    acceleratorsUnusable: StateEvent = Field(description="on the InstanceType, when a node's Devices can use "
                                                         "fewer accelerators than its labels count; {pool}, "
                                                         "{flavor}, {node}, {message}: the audit's")
    acceleratorsUsable: StateEvent = Field(description="on the InstanceType, when they agree again; {pool}, "
                                                       "{flavor}, {node}")

    @model_validator(mode="after")
    def _known_variables(self) -> "StateEvents":
        """A message may name only its entry's variables (a typo would fail at the transition)."""
        for name, allowed in STATE_EVENT_VARIABLES.items():
            used = {
                f for _, f, _, _ in string.Formatter().parse(getattr(self, name).message) if f is not None}
            if used - allowed:
                raise ValueError(f"{name}.message: unknown variable(s) {sorted(used - allowed)}; "
                                 f"allowed: {sorted(allowed)}")
        return self
