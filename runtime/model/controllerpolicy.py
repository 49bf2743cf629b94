"""The ``ControllerPolicy`` rule kind (rules/controller.yaml): where the controller lives and who it is, the
namespaces it leaves alone, its start guard (docs/availability.md "The start guard") and the Events of its
state transitions (:mod:`runtime.model.stateevents`)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from runtime.model import rulefiles
from runtime.model.base import Expr, Strict
from runtime.model.stateevents import StateEvents


class StartGuardSpec(Strict):
    """When a starting, restarted or newly leading controller's view is whole
    (docs/availability.md "The start guard"): every watch cache listed once and every Node has each
    NodeFeature of the ``nodeFeatures`` roles for which ``expectFacts`` holds, or ``graceSeconds`` after it
    began leading. Until then its destructive steps are held."""

    graceSeconds: float = Field(ge=0,
                                description="the longest a destructive step is held after the controller "
                                                  "began leading (seconds; 0: no guard)")
    nodeFeatures: list[Literal["worker", "deviceManager"]] = Field(
        min_length=1, description="the NodeFeature roles of rules/agent.yaml nodeFeature every expected Node "
                                  "must have (the agent's; trusted as decision 20 says)")
    expectFacts: Expr = Field(description="CEL over a Node's own ``labels`` and ``annotations``, ``devices`` "
                                          "(the spec of its Devices object; {} when none) and ``role`` (the "
                                          "NodeFeature role asked about; ``keys``: the keys of "
                                          "rules/labels.yaml by role): true when the guard waits for that "
                                          "NodeFeature of the Node (false: a Node no agent runs on, a role "
                                          "the Node has no facts for)")


class ControllerPolicySpec(Strict):
    """The controller: ``systemNamespace`` and ``controllerServiceAccount`` (its home and identity, the one
    home of these names: runtime/rules/vocabulary.py), ``reservedNamespaces`` (decision 17), ``startGuard``
    and ``events``."""

    systemNamespace: str = Field(description="where the controller, the Settings Secret and the agents' "
                                             "NodeFeatures live")
    reservedNamespaces: list[str] = Field(
        description="no LocalQueues, no Instances, no Pod webhook (decision 17)")
    controllerServiceAccount: str = Field(min_length=1,
                                          description="the controller's ServiceAccount in the system "
                                                      "namespace: the only user that may delete Settings and "
                                                      "write InstanceTypeFlavors")
    startGuard: StartGuardSpec
    events: StateEvents


rulefiles.SPEC_MODELS["ControllerPolicy"] = ControllerPolicySpec
