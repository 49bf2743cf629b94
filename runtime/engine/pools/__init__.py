"""Pools: from node facts to Kueue's objects and the four capacity views (docs/concepts/pools-and-flavors.md
"Pools and flavors").

``derive(policy, snapshot)`` is the entrance: it reads Nodes, NodeFeatures and Devices
(:mod:`.nodes`, :mod:`.accelerators`), plans ResourceFlavors (:mod:`.flavors`), InstanceTypes with
their four views (:mod:`.instancetypes`, :mod:`.fourview`, :mod:`.presets`), ClusterQueues and
LocalQueues (:mod:`.queues`, :mod:`.catalog`), and returns a :class:`DesiredState`.
:mod:`.kueueconfig` renders Kueue's own configuration; :mod:`.fit` the Workload fit pin labels.
"""
from runtime.engine.pools.accelerators import (Accelerator, accelerators, exclusive_free, has_free_share,
                                               has_free_slice, takes_shares, takes_slices)
from runtime.engine.pools.derive import DesiredState, derive
from runtime.engine.pools.fit import fit_labels
from runtime.engine.pools.flavors import FlavorPlan, plan_flavors, render_flavor
from runtime.engine.pools.instancetypes import (default_instance_type, devices_selector, entrance,
                                                flavor_selector, matches, schedule_labels)
from runtime.engine.pools.kueueconfig import KueueConfigurationError, cpu_excluded, kueue_configuration
from runtime.engine.pools.nodes import NodeView, effective_node_labels, node_views

__all__ = [
    "Accelerator", "DesiredState", "FlavorPlan", "KueueConfigurationError", "NodeView", "accelerators",
    "cpu_excluded", "default_instance_type", "derive", "devices_selector", "effective_node_labels",
    "entrance", "exclusive_free", "fit_labels", "flavor_selector", "has_free_share", "has_free_slice",
    "kueue_configuration", "matches", "node_views", "plan_flavors", "render_flavor", "schedule_labels",
    "takes_shares", "takes_slices",
]
