"""The ``PoolQueues`` rule kind (rules/pools/queues.yaml): the ClusterQueue every pool gets, the
``gpustack-node-devices`` AdmissionCheck and its answers, and which nodes take no new Pod
(docs/concepts/pools-and-flavors.md "The AdmissionCheck `gpustack-node-devices`")."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from runtime.model import rulefiles
from runtime.model.base import Expr, Strict


class ActiveCondition(Strict):
    """The ``Active`` condition the controller keeps ``True`` on its AdmissionCheck
    (docs/concepts/pools-and-flavors.md "The AdmissionCheck `gpustack-node-devices`")."""

    reason: str
    message: str


class AdmissionCheckSpec(Strict):
    """The ``gpustack-node-devices`` AdmissionCheck and its answers (docs/concepts/pools-and-flavors.md "The
    AdmissionCheck `gpustack-node-devices`")."""

    name: str
    controllerName: str
    labels: dict[str, str] = {}
    active: ActiveCondition
    readyMessage: Expr
    retryMessage: Expr
    retryAfterSeconds: int = Field(gt=0)
    retryLoopAfter: int = Field(3, gt=1,
                                description="Retry answers on one flavor in a row after which a loop "
                                                       "is reported (events.workloadRetryLoop)")
    promiseSeconds: int = Field(300, gt=0,
                                description="how long a Workload answered Ready whose Pod has not started "
                                            "is subtracted from its node's free accelerators (docs/concepts/"
                                            "out-of-service.md \"Promises\")")


class ClosedNodeMessages(Strict):
    """How a closed node's reason reads (``explain``, ``audit``, the check's Retry): str.format."""

    cordoned: str = Field(min_length=1, description="spec.unschedulable; {node}")
    tainted: str = Field(min_length=1, description="an untolerated taint; {node}, {key}, {value}, {effect}")


class ClosedNodesSpec(Strict):
    """Which Nodes take no new Pod of a pool (docs/concepts/out-of-service.md "Cordoned and tainted
    nodes"): they keep their flavors, capacity and quota, offer nothing as remaining or once-max in any
    view, and the node-devices check places nothing on them."""

    unschedulable: bool = Field(True, description="a Node with spec.unschedulable (kubectl cordon) is closed")
    unschedulableTaint: str = Field("node.kubernetes.io/unschedulable",
                                    description="the taint a cordon adds; a Pod tolerating it "
                                                "(NoSchedule) is not kept off a cordoned Node")
    taintEffects: list[Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]] = Field(
        ["NoSchedule", "NoExecute"], description="a taint with one of these effects that is not tolerated "
                                                 "closes the Node")
    tolerations: list[dict[str, Any]] = Field(
        [], description="tolerations (the Pod API's shape) every Instance Pod is taken to have: a taint they "
                        "tolerate closes no Node for the views; the check adds each Workload's own")
    messages: ClosedNodeMessages


class ClusterQueueSpec(Strict):
    template: dict[str, Any]
    maxFlavors: int = Field(gt=0)
    tooManyFlavorsMessage: Expr


class PoolQueuesSpec(Strict):
    """The pools' queues and the AdmissionCheck: ``clusterQueue`` (the template of every pool's
    ClusterQueue, at most ``maxFlavors`` flavors), ``admissionCheck`` (the check, its Workload answers and
    their timing), ``closedNodes`` (cordoned and tainted Nodes: docs/concepts/out-of-service.md "Cordoned and
    tainted nodes")."""

    clusterQueue: ClusterQueueSpec
    admissionCheck: AdmissionCheckSpec
    closedNodes: ClosedNodesSpec


rulefiles.SPEC_MODELS["PoolQueues"] = PoolQueuesSpec
