"""Instances: an Instance's Pod, Service and claim, and its life cycle (docs/concepts/instances.md
"Instances").

:mod:`.instancepods` renders the Pod and Service of an Instance; :mod:`.podstatus` reads them back
(phase, host IPs, ports, allocations); :mod:`.instancelife` plans the actions of one Instance (create, delete,
finalizers); :mod:`.persistentvolumes` renders an InstancePersistentVolume's claim and reads its status.
"""
from runtime.engine.instances.instancelife import (ADD_FINALIZER, CREATE_POD, CREATE_SERVICE, DELETE_POD,
                                                   REMOVE_FINALIZER, SET_STOP, InstanceAction, plan_instance)
from runtime.engine.instances.instancepods import container_resources, pool_flavors, render_pod, \
    render_service
from runtime.engine.instances.podstatus import allocations_from_pod, host_ips, phase_from_pod
from runtime.engine.instances.persistentvolumes import claim_status, owns_claim, render_claim

__all__ = [
    "ADD_FINALIZER", "CREATE_POD", "CREATE_SERVICE", "DELETE_POD", "REMOVE_FINALIZER", "SET_STOP",
    "InstanceAction", "allocations_from_pod",
    "claim_status", "container_resources", "host_ips", "owns_claim", "phase_from_pod", "plan_instance",
    "pool_flavors", "render_claim", "render_pod", "render_service",
]
