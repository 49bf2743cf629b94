"""The node agent's pure side (docs/agent.md "The node agent (`accelpolicy agent`)"): from probed facts to the
Node's labels, annotations, NodeFeature and Devices object, and the allocation ledger.

:mod:`.nodefacts` groups accelerators and reads rules/agent.yaml (:func:`agent_rules`);
:mod:`.agentlabels` the worker and device-manager labels; :mod:`.devicesobject` the Devices object's
labels, ``spec`` and the Node capacity; :mod:`.ledger` rebuilds the per-accelerator ledger from
allocations; :mod:`.podresources` maps kubelet PodResources to allocations; :mod:`.agentenv` the
manufacturer overrides from the environment; :mod:`.agentplan` puts them together (:func:`plan_node`).
"""
from runtime.engine.devices.agentenv import apply_manufacturer_env, manufacturers_with_env
from runtime.engine.devices.agentlabels import cpu_annotations, device_manager_labels, managed_value, \
    worker_labels
from runtime.engine.devices.agentplan import AgentPlan, node_feature_name, plan_node
from runtime.engine.devices.devicesobject import (devices_labels, devices_spec, is_healthy, is_partitioned,
                                                  node_capacity, profile_spelling)
from runtime.engine.devices.ledger import LedgerEvent, parse_allocation, rebuild_ledger
from runtime.engine.devices.nodefacts import (AcceleratorGroup, accelerator_groups, agent_rules,
                                              cores_from_capacity, gkey)
from runtime.engine.devices.podresources import annotation_differs, annotation_text, mig_device_index, \
    pod_allocations

__all__ = [
    "AcceleratorGroup", "AgentPlan", "LedgerEvent", "accelerator_groups", "agent_rules", "annotation_differs",
    "annotation_text", "apply_manufacturer_env", "cores_from_capacity", "cpu_annotations",
    "device_manager_labels", "devices_labels", "devices_spec", "gkey", "is_healthy", "is_partitioned",
    "managed_value", "manufacturers_with_env", "mig_device_index", "node_capacity", "node_feature_name",
    "parse_allocation", "plan_node", "pod_allocations", "profile_spelling", "rebuild_ledger", "worker_labels",
]
