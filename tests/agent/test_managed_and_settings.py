"""The managed label (docs/agent.md "Labels, annotations and NodeFeatures", decision 14) and instance-type-mixed-on-node (docs/agent.md "Labels, annotations and NodeFeatures")."""
from __future__ import annotations

import pytest

from runtime.engine.settings import resolve

MANAGED = "gpustack.ai/managed"
CPU_ONLY = "feature.gpustack.ai/cpu-only"


def _settings(policy, **values):
    return resolve(policy.settings, {k.replace("_", "-"): v for k, v in values.items()})


def _worker(labels):
    return {"spec": {"labels": labels}}


@pytest.mark.parametrize("worker_now, node_labels, manual, expected", [
    ({MANAGED: "false"}, {MANAGED: "true"}, "false", "false"),   # 1: the NodeFeature's own value wins (seed step 2)
    ({MANAGED: "true"}, {}, "true", "true"),
    ({}, {MANAGED: "false"}, "false", "false"),                 # 2: the Node's label
    ({}, {MANAGED: "true"}, "true", "true"),                    # 2: labelled in manual mode
    ({MANAGED: ""}, {}, "false", "true"),                       # empty values do not count; 3: setting false
    ({}, {}, "false", "true"),                                  # 3
    ({}, {}, "true", None),                                     # 4: manual, unlabelled: absent
])
def test_managed_rule(plan, policy, worker_now, node_labels, manual, expected):
    p = plan("node-a10g", node_labels=node_labels, settings=_settings(policy, node_management_manual=manual),
             worker_now=_worker(worker_now))
    assert p.worker["spec"]["labels"].get(MANAGED) == expected
    # the Devices object mirrors the Node's label, not the NodeFeature's
    assert p.devices["metadata"]["labels"].get(MANAGED) == (node_labels.get(MANAGED) or None)


def test_cpu_only_when_not_mixed_and_no_accelerator(plan, policy):
    not_mixed = _settings(policy, instance_type_mixed_on_node="false")
    assert plan("node-cpu", settings=not_mixed).worker["spec"]["labels"][CPU_ONLY] == "true"
    assert CPU_ONLY not in plan("node-a10g", settings=not_mixed).worker["spec"]["labels"]
    assert CPU_ONLY not in plan("node-cpu").worker["spec"]["labels"]


def test_count_omitted_without_cores(plan):
    labels = plan("node-cpu", capacity={"cpu": "0"}).worker["spec"]["labels"]
    assert "general.feature.gpustack.ai/amd-epyc-7r13.count" not in labels
    assert labels["general.feature.gpustack.ai/amd-epyc-7r13"] == "true"


def test_probe_failure_leaves_accelerator_objects_alone(plan):
    p = plan("node-a10g", accelerators_known=False)
    assert p.device_manager is None and p.devices is None
    assert [o["kind"] for o in p.objects()] == ["NodeFeature", "Node"]
    assert "status" not in p.node_patch
    assert p.worker["spec"]["labels"]["general.feature.gpustack.ai/amd-epyc-7r32.count"] == "4"


def test_group_id_with_memory_switch(plan):
    p = plan("node-t4-b", group_id_with_memory=True)
    assert p.devices["spec"]["groups"][0]["id"] == "tesla-t4-16g"
    assert p.device_manager["spec"]["labels"]["acceleratable.feature.gpustack.ai/nvidia-tesla-t4-16g.count"] == "4"


@pytest.mark.parametrize("stem, akey, memory, family", [
    ("node-l4", "nvidia-l4", "24Gi", "Ada-Lovelace"),
    ("node-a100", "nvidia-a100-sxm4-40gb", "40Gi", "Ampere"),
])
def test_other_recorded_accelerators(plan, stem, akey, memory, family):
    labels = plan(stem).device_manager["spec"]["labels"]
    prefix = f"acceleratable.feature.gpustack.ai/{akey}"
    assert labels[prefix] == "true"
    assert labels[f"{prefix}.memory"] == memory
    assert labels[f"{prefix}.family"] == family


def test_manufacturer_env_overrides(plan):
    from runtime.engine.devices.agentenv import manufacturers_with_env
    from runtime.engine.devices.agentplan import plan_node
    from runtime.engine.policy import Policy
    from runtime.rules.loader import load_rules
    from tests.agent.conftest import facts, seed_node

    own = Policy(load_rules())
    table, used = manufacturers_with_env(own, {"GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME": "example.com/gpu",
                                               "GPUSTACK_NVIDIA_PARTITION_KIND": "", "GPUSTACK_AMD_PCI_VENDOR_ID": "abcd"})
    assert used == ["GPUSTACK_AMD_PCI_VENDOR_ID", "GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME"]
    assert table["nvidia"].base == "example.com/gpu" and table["nvidia"].partitionKind == "mig"
    assert table["amd"].pciVendor == "abcd" and own.manufacturers["nvidia"].base == "nvidia.com/gpu"
    own.manufacturers = table
    p = plan_node(own, facts("node-a10g"), seed_node("node-a10g"), resolve(own.settings, {}))
    assert p.node_patch["status"]["capacity"]["example.com/gpu.sliced.units"] == "1600k"


def test_probe_failure_does_not_flip_cpu_only(plan, policy):
    not_mixed = _settings(policy, instance_type_mixed_on_node="false")
    p = plan("node-a10g", settings=not_mixed, accelerators_known=False, worker_now=_worker({MANAGED: "true"}))
    assert CPU_ONLY not in p.worker["spec"]["labels"]
    p = plan("node-cpu", settings=not_mixed, accelerators_known=False, worker_now=_worker({CPU_ONLY: "true"}))
    assert p.worker["spec"]["labels"][CPU_ONLY] == "true"
