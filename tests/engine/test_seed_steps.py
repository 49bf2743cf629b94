"""The seed walkthrough, step by step, from snapshots: tables column by column, objects field by field.

Fixtures: tests/fixtures/seed/<step>/ (base -> the four-node cluster, types -> the step-1 derived
InstanceTypes, overlay.yaml -> what the step changed). Expected values: ../shared/seed/.
"""
from __future__ import annotations

import pytest

from runtime.engine.pools.derive import derive
from runtime.report.tables import render, resolve_kind
from runtime.snapshots import load_snapshot
from tests.seedfiles import FIXTURES, parse_table, seed_object, seed_table, subset_mismatches, without

STALE_ENTRANCE = "gpustack-fnv64-8cf5b3114035c84a"   # FNV-1a of "a10g-8c32g" (spec DECISION 3)
RIGHT_ENTRANCE = "gpustack-fnv64-d4c0e6cd72686015"   # FNV-1a of "a10g-12c128g"


def state_of(policy, step):
    snapshot = load_snapshot([FIXTURES / "seed" / step])
    return derive(policy, snapshot), snapshot


def table(policy, step, kind):
    state, snapshot = state_of(policy, step)
    table = resolve_kind(kind)
    return render(table, state.view(policy, table.kind, snapshot))


@pytest.mark.parametrize("step, expected", [
    ("step1", "step1-instancetype.txt"),
    ("step2-unmanaged", "step2-after-unmanage.txt"),
    ("step2-readmitted", "step2-after-readmit.txt"),
    ("step3-sliced-demo", "step3-after-sliced-demo.txt"),
    ("step4-deleted-type", "step4-after-delete-custom-type.txt"),
    ("step5-aware", "step5-after-aware.txt"),
])
def test_instancetype_table_is_the_seeds_to_the_character(policy, step, expected):
    assert table(policy, step, "instancetypes") == seed_table(expected)


@pytest.mark.parametrize("step, expected", [
    ("step4-custom-type", "step4-after-custom-type.txt"),
    ("step4-custom-demo", "step4-after-custom-demo.txt"),
])
def test_step4_tables_with_the_corrected_entrance(policy, step, expected):
    # DECISION 3: the seed's step-4 tables print the entrance of the custom type's earlier name
    # (a10g-8c32g); the entrance of a10g-12c128g is the FNV-1a of its own name.
    want = seed_table(expected).replace(STALE_ENTRANCE, RIGHT_ENTRANCE)
    assert table(policy, step, "instancetypes") == want


def test_step5_repoint_rows(policy):
    excerpt = {row["NAME"]: row for row in parse_table(seed_table("step5-after-repoint-EXCERPT.txt"))}
    others = {row["NAME"]: row for row in parse_table(seed_table("step5-after-aware.txt")) if row["NAME"] not in excerpt}
    got = {row["NAME"]: row for row in parse_table(table(policy, "step5-repoint", "instancetypes"))}
    assert set(got) == set(excerpt) | set(others)
    for name, row in {**others, **excerpt}.items():
        assert got[name] == row, name


def test_step1_resourceflavors_clusterqueues_catalog_devices(policy):
    assert without(parse_table(table(policy, "step1", "resourceflavor")), "AGE") == \
        without(parse_table(seed_table("step1-resourceflavor.txt")), "AGE")
    assert table(policy, "step1", "clusterqueue") == seed_table("step1-clusterqueue.txt")
    # kubectl lists custom resources in name order; the capture did not: compare as sets of rows.
    for kind, expected in (("instancetypeflavor", "step1-instancetypeflavor.txt"), ("devices", "step1-devices.txt")):
        got = parse_table(table(policy, "step1", kind))
        want = parse_table(seed_table(expected))
        assert sorted(map(sorted, (r.items() for r in got))) == sorted(map(sorted, (r.items() for r in want)))


def test_step5_catalog_regroups_and_flavors_stay(policy):
    got = parse_table(table(policy, "step5-aware", "instancetypeflavor"))
    want = parse_table(seed_table("step5-instancetypeflavor.txt"))
    assert sorted(map(sorted, (r.items() for r in got))) == sorted(map(sorted, (r.items() for r in want)))
    step1 = load_snapshot([FIXTURES / "seed" / "step1"])
    assert [f["metadata"] for f in derive(policy, step1).resource_flavors] == \
        [f["metadata"] for f in state_of(policy, "step5-aware")[0].resource_flavors]
    assert len(state_of(policy, "step5-aware")[0].resource_flavors) == 7


def test_step2_unmanaged_drops_two_flavors(policy):
    state, _ = state_of(policy, "step2-unmanaged")
    names = [f["metadata"]["name"] for f in state.resource_flavors]
    assert len(names) == 5
    assert "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d" not in names
    assert "gpustack--amd-epyc-7r32-linux-amd64-4c" not in names
    a10g = next(q for q in state.cluster_queues if q["metadata"]["name"] == "gpustack--nvidia-a10g-linux-amd64")
    assert a10g["spec"]["resourceGroups"] == []


def _by_name(objects, name):
    return next(o for o in objects if o["metadata"]["name"] == name)


@pytest.mark.parametrize("seed_name, kind_attr", [
    ("step1-resourceflavor-accelerated.yaml", "resource_flavors"),
    ("step1-resourceflavor-cpu.yaml", "resource_flavors"),
    ("step1-clusterqueue-a10g.yaml", "cluster_queues"),
    ("step1-instancetype-a10g.yaml", "instance_types"),
    ("step1-instancetypeflavor-a10g.yaml", "instance_type_flavors"),
    ("step1-devices-node-a10g.yaml", "devices"),
])
def test_step1_objects_field_by_field(policy, seed_name, kind_attr):
    want = seed_object(seed_name)
    state, _ = state_of(policy, "step1")
    got = _by_name(getattr(state, kind_attr), want["metadata"]["name"])
    assert got["apiVersion"] == want["apiVersion"] and got["kind"] == want["kind"]
    # label maps of our own objects are exact; spec and status: every field the seed shows
    assert (got["metadata"].get("labels") or {}) == (want["metadata"].get("labels") or {})
    for part in ("spec", "status"):
        if part in want:
            assert subset_mismatches(want[part], got.get(part)) == []


def test_step5_aware_clusterqueue_labels(policy):
    want = seed_object("step5-clusterqueue-aware-a10g.yaml")
    state, _ = state_of(policy, "step5-aware")
    got = _by_name(state.cluster_queues, want["metadata"]["name"])
    assert got["metadata"]["labels"] == want["metadata"]["labels"]
    collapsed = _by_name(state.cluster_queues, "gpustack--nvidia-a10g-linux-amd64")
    assert "general.feature.gpustack.ai/amd-epyc-7r32" not in collapsed["metadata"]["labels"]


CUSTOM_AFTER_DEFAULTING = {  # docs/concepts/pools-and-flavors.md "InstanceType admission", "The Step 4 custom type after defaulting"
    "labels": {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "feature.gpustack.ai/acceleratable": "true",
               "acceleratable.feature.gpustack.ai/nvidia-a10g": "true",
               "schedule.gpustack.ai/queue-entrance": RIGHT_ENTRANCE},
    "spec": {"acceleratable": True, "acceleratorGroup": "nvidia-a10g", "generalGroup": "generic", "os": "linux",
             "arch": "amd64", "manufacturer": "nvidia", "product": "NVIDIA-A10G", "family": "Ampere", "memory": "24Gi",
             "cores": "10240",
             "feature": {"logicalSliced": {"maxSize": 128, "coresPercentageOvercommit": True, "memoryPercentageStep": 1},
                         "physicalSliced": {"maxSize": 0}},
             "unitResources": {"cpu": "12", "ram": "128Gi"}, "localStorage": "200Gi"},
}


def test_step4_custom_type_is_defaulted_and_gets_a_status(policy):
    state, _ = state_of(policy, "step4-custom-type")
    assert state.created_instance_types == []          # create-only: nothing authored again
    assert state.enriched_instance_types == ["a10g-12c128g"]
    it = _by_name(state.instance_types, "a10g-12c128g")
    authored = seed_object("step4-instancetype-a10g-12c128g.yaml")
    assert subset_mismatches(authored["spec"], it["spec"]) == []   # nothing the administrator wrote changes
    assert it["metadata"]["labels"] == CUSTOM_AFTER_DEFAULTING["labels"]
    assert it["spec"] == CUSTOM_AFTER_DEFAULTING["spec"]
    assert it["metadata"]["finalizers"] == ["gpustack.ai/controlled"]
    assert it["status"]["entrance"] == RIGHT_ENTRANCE
    assert it["status"]["summary"] == {"unit": "12/128Gi/200Gi", "accelerator": "1/1 10/10 100/100 0/0",
                                       "cpu": "0/0", "partitions": ""}
    queue = _by_name(state.cluster_queues, "a10g-12c128g")
    assert queue["spec"]["resourceGroups"][0]["flavors"][0]["name"] == \
        "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d"


def test_derived_queues_of_pools_md_7_5(policy):
    state, _ = state_of(policy, "step1")
    t4 = _by_name(state.cluster_queues, "gpustack--nvidia-tesla-t4-linux-amd64")
    assert t4["spec"]["resourceGroups"] == [{
        "coveredResources": ["credits.gpustack.ai/nvidia"],
        "flavors": [
            {"name": "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-1d",
             "resources": [{"name": "credits.gpustack.ai/nvidia", "nominalQuota": "1600k"}]},
            {"name": "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-4d",
             "resources": [{"name": "credits.gpustack.ai/nvidia", "nominalQuota": "6400k"}]}]}]
    generic = _by_name(state.cluster_queues, "gpustack--generic-linux-amd64")
    assert [(f["name"], f["resources"][0]["nominalQuota"]) for f in generic["spec"]["resourceGroups"][0]["flavors"]] == [
        ("gpustack--amd-epyc-7r32-linux-amd64-4c", "4"),
        ("gpustack--intel-xeon-platinum-8259cl-linux-amd64-4c", "4"),
        ("gpustack--amd-epyc-7r13-linux-amd64-16c", "16"),
        ("gpustack--intel-xeon-platinum-8259cl-linux-amd64-48c", "48")]
    assert "admissionChecksStrategy" not in generic["spec"]
    assert [(lq["metadata"]["namespace"], lq["metadata"]["name"], lq["spec"]["clusterQueue"]) for lq in state.local_queues] == [
        ("default", "gpustack-fnv64-3b93966fd73eb9ec", "gpustack--generic-linux-amd64"),
        ("default", "gpustack-fnv64-c4680bb149644f1c", "gpustack--nvidia-a10g-linux-amd64"),
        ("default", "gpustack-fnv64-6b371caa2da0b799", "gpustack--nvidia-tesla-t4-linux-amd64")]
    assert state.admission_checks[0]["metadata"] == {"name": "gpustack-node-devices",
                                                     "labels": {"app.kubernetes.io/part-of": "gpustack-operator"}}
