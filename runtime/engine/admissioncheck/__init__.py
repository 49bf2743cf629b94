"""The ``gpustack-node-devices`` AdmissionCheck for Kueue Workloads (docs/concepts/pools-and-flavors.md "The
AdmissionCheck `gpustack-node-devices`").

:mod:`.check` decides (:func:`check_workload`: does a managed node hold each PodSet now);
:mod:`.demand` reads a Pod's accelerator demand and node selection; :mod:`.workloadstatus` says which
Workloads are ours, when an answer is due, and renders the status write (:func:`check_state_apply`).
"""
from runtime.engine.admissioncheck.check import charge, check_workload, flavor_that_holds, managed_nodes
from runtime.engine.admissioncheck.demand import AdmissionCheckError, Demand, node_selected, pod_demand
from runtime.engine.admissioncheck.workloadstatus import (EVICTED, FINISHED, PENDING, QUOTA_RESERVED, READY,
                                                          RETRY, WORKLOAD_API, Placement, Verdict,
                                                          check_entry, check_state_apply, format_time,
                                                          parse_time, pod_state, promised, quota_reserved,
                                                          seconds_until_due)

__all__ = [
    "charge", "flavor_that_holds", "pod_state", "promised",
    "EVICTED", "FINISHED", "PENDING", "QUOTA_RESERVED", "READY", "RETRY", "WORKLOAD_API",
    "AdmissionCheckError", "Demand", "Placement", "Verdict", "check_entry", "check_state_apply",
    "check_workload", "format_time", "managed_nodes", "node_selected", "parse_time", "pod_demand",
    "quota_reserved", "seconds_until_due",
]
