"""Settings that change derivation (docs/reference/settings.md "Settings", docs/concepts/pools-and-flavors.md "ResourceFlavors: what each node contributes" and "Queues and the entrance")."""
from __future__ import annotations

import base64
import copy

import yaml

from runtime.engine.pools.derive import derive
from runtime.engine.snapshot import Snapshot
from runtime.snapshots import load_snapshot
from tests.seedfiles import FIXTURES


def with_settings(snapshot: Snapshot, **values: str) -> Snapshot:
    objects = list(snapshot)
    secret = copy.deepcopy(next(o for o in objects if o["kind"] == "Secret"))
    for name, value in values.items():
        secret["data"][name] = base64.b64encode(value.encode()).decode()
    return Snapshot.from_objects(objects + [secret])


def summary(state, name):
    return next(it for it in state.instance_types if it["metadata"]["name"] == name)["status"]["summary"]


def test_mixing_off_keeps_accelerated_nodes_out_of_cpu_pools(policy):
    snapshot = with_settings(load_snapshot([FIXTURES / "seed" / "step1"]), **{"instance-type-mixed-on-node": "false"})
    state = derive(policy, snapshot)
    flavors = {f["metadata"]["name"]: f for f in state.resource_flavors}
    assert sorted(flavors) == ["gpustack--amd-epyc-7r13-linux-amd64-16c",
                               "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d",
                               "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-1d",
                               "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-4d"]
    assert flavors["gpustack--amd-epyc-7r13-linux-amd64-16c"]["spec"]["nodeLabels"]["feature.gpustack.ai/cpu-only"] == "true"
    assert summary(state, "gpustack--generic-linux-amd64")["cpu"] == "16/16"


def test_derived_from_node_off_authors_no_types_and_no_admission_check_reference(policy):
    snapshot = with_settings(load_snapshot([FIXTURES / "seed" / "common"]), **{"instance-type-derived-from-node": "false"})
    state = derive(policy, snapshot)
    assert state.created_instance_types == [] and state.instance_types == []
    assert len(state.resource_flavors) == 7


def test_an_unparsable_setting_reads_as_its_default_with_a_warning(policy):
    snapshot = with_settings(load_snapshot([FIXTURES / "seed" / "step1"]), **{"instance-type-aware-cpu-manufacturer": "yes"})
    state = derive(policy, snapshot)
    assert len(state.instance_types) == 3
    assert "setting instance-type-aware-cpu-manufacturer: stored value does not parse; using its default" in state.warnings


def _unmanaged_with_reserving_queue(policy, drain: str):
    base = load_snapshot([FIXTURES / "seed" / "step2-unmanaged"])
    step1 = derive(policy, load_snapshot([FIXTURES / "seed" / "step1"]))
    queue = copy.deepcopy(next(q for q in step1.cluster_queues if q["metadata"]["name"] == "gpustack--nvidia-a10g-linux-amd64"))
    queue["status"] = {"reservingWorkloads": 1, "admittedWorkloads": 1,
                       "conditions": [{"type": "Active", "status": "True", "reason": "Ready", "message": "Can admit new workloads"}]}
    snapshot = with_settings(Snapshot.from_objects(list(base) + [queue]), **{"instance-type-drain-when-no-flavors": drain})
    state = derive(policy, snapshot)
    new = next(q for q in state.cluster_queues if q["metadata"]["name"] == "gpustack--nvidia-a10g-linux-amd64")
    it = next(i for i in state.instance_types if i["metadata"]["name"] == "gpustack--nvidia-a10g-linux-amd64")
    return queue, new, it


def test_a_pool_that_lost_its_flavors_while_holding_workloads_drains(policy):
    old, new, it = _unmanaged_with_reserving_queue(policy, "true")
    assert new["spec"]["stopPolicy"] == "HoldAndDrain"
    assert new["spec"]["resourceGroups"] == old["spec"]["resourceGroups"]
    assert it["status"]["phase"] == "Draining"
    assert it["status"]["summary"]["accelerator"] == "0/0 0/0 0/0 0/0"


def test_without_drain_the_queue_waits_for_reservations_to_clear(policy):
    old, new, it = _unmanaged_with_reserving_queue(policy, "false")
    assert new["spec"]["stopPolicy"] == "None"
    assert new["spec"]["resourceGroups"] == old["spec"]["resourceGroups"]
    assert it["status"]["phase"] == "Active"
