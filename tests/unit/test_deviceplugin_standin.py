"""The device-plugin stand-in's pure parts (testing/localcluster/deviceplugin.py): the tokens it advertises
and the accelerators it picks, on the seed's Devices objects (tests/fixtures/seed/common/devices.yaml)."""
from __future__ import annotations

import copy
import json

import pytest
import yaml

from runtime.engine.devices.podresources import annotation_text, pod_allocations
from runtime.engine.policy import Policy
from testing.localcluster.deviceplugin import AllocationRefused, advertised_tokens, choose_devices
from runtime.rules.loader import load_rules
from tests import builders
from tests.seedfiles import FIXTURES

POLICY = Policy(load_rules())
DEVICES = {d["metadata"]["name"]: d for d in yaml.safe_load_all((FIXTURES / "seed/common/devices.yaml").read_text()) if d}
A10G = "GPU-e0587d2e-127c-4fb8-e2c1-6e517529f575"
T4B = "GPU-3f6e8b21-90c4-4d7a-b5e2-1a9c8d7e6f0{}"


def pod(node: str, requests: dict, name: str = "p") -> dict:
    """A Pod on ``node`` whose main container requests and is limited to ``requests``."""
    return builders.pod(name, node=node, requests=requests, limits=requests)


def test_tokens_of_the_seed_nodes():
    assert advertised_tokens(POLICY, DEVICES["node-a10g"]) == {
        "nvidia.com/gpu": "1", "nvidia.com/gpu.shared": "10", "nvidia.com/gpu.sliced": "128",
        "device.gpustack.ai/nvidia.visibility": "1"}
    assert advertised_tokens(POLICY, DEVICES["node-t4-b"]) == {
        "nvidia.com/gpu": "4", "nvidia.com/gpu.shared": "40", "nvidia.com/gpu.sliced": "512",
        "device.gpustack.ai/nvidia.visibility": "4"}


def test_unhealthy_accelerators_are_not_advertised():
    devices = copy.deepcopy(DEVICES["node-t4-b"])
    devices["spec"]["groups"][0]["accelerators"][0]["status"]["unhealthy"] = True
    assert advertised_tokens(POLICY, devices)["nvidia.com/gpu"] == "3"


def test_a_sliced_request_becomes_the_seed_step3_annotation():
    p = pod("node-a10g", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "20",
                          "nvidia.com/gpu.sliced.cores-percentage": "100", "nvidia.com/gpu.sliced.units": "320k"})
    containers = choose_devices(POLICY, p, DEVICES["node-a10g"])
    assert containers == [{"name": "main", "devices": [{"resourceName": "nvidia.com/gpu.sliced",
                                                         "deviceIds": [f"{A10G}::0"]}]}]
    docs, events = pod_allocations(POLICY, "node-a10g", DEVICES["node-a10g"]["spec"],
                                   [{"namespace": "default", "name": "p", "containers": containers}], [p])
    assert events == []
    assert json.loads(annotation_text(docs[("default", "p")])) == {"main": [{
        "id": "a10g", "manufacturer": "nvidia",
        "accelerators": [{"id": A10G, "index": 0, "mode": 3, "allocated": 320000}]}]}


def test_a_sliced_request_without_units_is_refused_naming_the_key():
    p = pod("node-a10g", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "20"})
    with pytest.raises(AllocationRefused, match=r"Pod default/p container main: nvidia.com/gpu.sliced without "
                                                r"nvidia.com/gpu.sliced.units \(the Pod webhook folds it"):
        choose_devices(POLICY, p, DEVICES["node-a10g"])


def test_whole_requests_take_free_accelerators_by_index_and_skip_promised_ones():
    p = pod("node-t4-b", {"nvidia.com/gpu": "2", "cpu": "1"})
    assert choose_devices(POLICY, p, DEVICES["node-t4-b"]) == [
        {"name": "main", "devices": [{"resourceName": "nvidia.com/gpu", "deviceIds": [T4B.format(0), T4B.format(1)]}]}]
    taken = {T4B.format(0): 1600000}
    assert choose_devices(POLICY, p, DEVICES["node-t4-b"], taken)[0]["devices"][0]["deviceIds"] == \
        [T4B.format(1), T4B.format(2)]


def test_a_held_accelerator_is_not_given_again():
    devices = copy.deepcopy(DEVICES["node-a10g"])
    devices["status"]["groups"][0]["accelerators"][0].update({"mode": 1, "allocated": 1600000})
    devices["status"]["groups"][0]["accelerators"][0].pop("remaining", None)
    with pytest.raises(AllocationRefused, match="nvidia.com/gpu: 1 wanted, 0 free on node node-a10g"):
        choose_devices(POLICY, pod("node-a10g", {"nvidia.com/gpu": "1"}), devices)


def test_pods_without_accelerator_tokens_get_nothing():
    assert choose_devices(POLICY, pod("node-cpu", {"cpu": "1", "memory": "1Gi"}), DEVICES["node-a10g"]) == []
