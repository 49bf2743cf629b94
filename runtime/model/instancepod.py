"""Rule kind ``InstancePod`` (rules/instances/pod.yaml): how an Instance becomes its Pod
(docs/concepts/instances.md "Life cycle" and "The Instance's Pod" and "Persistent volumes"). Registered in
:data:`runtime.model.rulefiles.SPEC_MODELS` on import (runtime/model/__init__.py)."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from runtime.model import rulefiles
from runtime.model.rulefiles import Expr, Strict


# --- instance pods (docs/concepts/instances.md "The Instance's Pod" and "Persistent volumes") ---------
class PodVolumeNames(Strict):
    workspace: str
    additionalPrefix: str
    sshKeys: str
    sshKeysMountPath: str
    sshKeysDefaultMode: int


class SshSidecar(Strict):
    capabilities: list[str]
    volumeMountEnv: str
    imageSetting: str


class OvercommitSpec(Strict):
    setting: str
    cpuMillisPerCore: int = Field(gt=0)
    acceleratedCpuMillisPerCore: int = Field(gt=0)
    memoryMiPerGi: int = Field(gt=0)
    storageMiPerGi: int = Field(gt=0)


class PlacementSpec(Strict):
    setting: str
    noProvisioner: str
    missingMessage: str
    unboundMessage: str
    # an InstancePersistentVolume's claim size when unset (docs/concepts/instances.md "Persistent volumes")
    defaultCapacity: str = Field(min_length=1)


class LifecycleSpec(Strict):
    requeueSeconds: int = Field(gt=0)
    rebuildWindowSeconds: int = Field(gt=0)
    admissionErrorReason: str


class ServiceSpec(Strict):
    """The Instance's Service (docs/concepts/instances.md "The Instance's Pod") and the Node addresses of
    ``status.hostIPs`` (docs/concepts/instances.md "Instances"): ``type`` of the Service; ``hostAddressTypes``
    the Node address types read, in order."""

    type: str
    hostAddressTypes: list[str]


class PoolAffinitySpec(Strict):
    operator: Literal["In"] = "In"
    noFlavorsMessage: str = Field(min_length=1)


class NodePinSpec(Strict):
    """The node pin (docs/concepts/instances.md, "Pinned to a node"): ``noFlavorMessage`` is the
    Instance's ``status.phaseMessage`` while no flavor of its pool holds the pinned Node; fields
    ``{node}``, ``{pool}``, ``{flavors}`` (the pool's flavor names, comma-separated)."""

    noFlavorMessage: str = Field(min_length=1)


class InstancePodSpec(Strict):
    workloadContainer: str
    sshContainer: str
    podSpec: dict[str, Any]
    workloadSecurityContext: dict[str, Any]
    portName: Expr
    volumes: PodVolumeNames
    ssh: SshSidecar
    overcommit: OvercommitSpec
    resourceKeys: dict[Literal["sliced", "memoryPercentage", "coresPercentage", "partitioned", "profile",
                               "visibility"], str]
    placement: PlacementSpec
    poolAffinity: PoolAffinitySpec
    nodePin: NodePinSpec
    lifecycle: LifecycleSpec
    service: ServiceSpec


rulefiles.SPEC_MODELS["InstancePod"] = InstancePodSpec
