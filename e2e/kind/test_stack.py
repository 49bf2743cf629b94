"""e2e/kind/stack.py and pytest-kind-bin without a cluster: node mapping, facts, image names, helm values,
and what pytest-kind's KindCluster may ask of our kind."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from stack import HERE, REPO, StackError, containerd_ref, dra_nodes, helm_values, kind_facts, seed_mapping

pytestmark = pytest.mark.kind

NODES = ["c-worker3", "c-control-plane", "c-worker", "c-worker2"]


def test_the_control_plane_is_node_cpu_and_the_workers_the_accelerated_nodes_in_name_order():
    assert seed_mapping(NODES) == {"node-cpu": "c-control-plane", "node-a10g": "c-worker",
                                   "node-t4-a": "c-worker2", "node-t4-b": "c-worker3"}


def test_a_fourth_worker_is_the_dra_worker_and_no_seed_node():
    nodes = NODES + ["c-worker4"]
    assert seed_mapping(nodes) == seed_mapping(NODES)
    assert dra_nodes(nodes) == ["c-worker4"] and dra_nodes(NODES) == []


@pytest.mark.parametrize("nodes", [["c-control-plane", "c-worker"], NODES + ["c-worker4", "c-worker5"]])
def test_the_walkthrough_refuses_a_cluster_of_another_shape(nodes):
    with pytest.raises(StackError, match=r"needs 1 control-plane \+ 3 workers \(\+ 1 DRA worker\); nodes: "
                                         + re.escape(str(nodes))):
        seed_mapping(nodes)


def test_recorded_facts_are_renamed_for_the_kind_node_and_otherwise_kept():
    path = kind_facts("node-t4-b", "c-worker3")
    seed = yaml.safe_load((REPO / "probes/recorded/node-t4-b.yaml").read_text())
    assert yaml.safe_load(path.read_text()) == {**seed, "node": "c-worker3"}


@pytest.mark.parametrize("image, ref", [
    ("ubuntu:24.04", "docker.io/library/ubuntu:24.04"), ("accelpolicy:0.1.0-abc", "docker.io/library/accelpolicy:0.1.0-abc"),
    ("accelpolicy.local/kueue:v0.17.0", "accelpolicy.local/kueue:v0.17.0"), ("gpustack/ssh-server:v1", "docker.io/gpustack/ssh-server:v1")])
def test_containerd_names_images_as_the_kubelet_asks_for_them(image, ref):
    assert containerd_ref(image) == ref


def test_helm_values_set_the_local_image_the_auto_agent_and_podresources():
    args = helm_values(seed_mapping(NODES), "accelpolicy:0.1.0-abc")
    pairs = [(args[i], args[i + 1]) for i in range(0, len(args), 2)]
    assert pairs[:6] == [("--set", "image.repository=accelpolicy"), ("--set", "image.tag=0.1.0-abc"),
                         ("--set", "image.pullPolicy=Never"), ("--set", "agent.backend=auto"),
                         ("--set", "agent.allocationSource=podresources"), ("--set", "controller.auditInterval=20s")]
    files = dict(v.split("=", 1) for k, v in pairs[6:])
    assert sorted(files) == [f"agent.recordedFacts.{n}" for n in sorted(NODES + ["c-worker4"])]
    assert yaml.safe_load(Path(files["agent.recordedFacts.c-worker"]).read_text())["node"] == "c-worker"
    assert yaml.safe_load(Path(files["agent.recordedFacts.c-worker4"]).read_text())["accelerators"] == []
    assert "agent.backend=fake" in helm_values(seed_mapping(NODES), "a:b", backend="fake")


@pytest.mark.parametrize("args, message", [
    (["create", "cluster", "--name=x", "--image=kindest/node:v1.35.0"], "only the locally built node image"),
    (["create", "cluster", "--name=x", "--config", "k.yaml"], "option --config is not supported"),
    (["create", "cluster"], "create cluster needs --name")])
def test_pytest_kind_bin_refuses_what_it_cannot_do_here(args, message):
    out = subprocess.run([str(HERE / "pytest-kind-bin"), *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and message in out.stderr, out.stderr
