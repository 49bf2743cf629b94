"""A Node the agent has not labelled yet (no gpustack.ai/managed, no NodeFeatures) is simply not managed:
derivation must not fail on the missing label (seen live: kwok Nodes exist before the agent's first pass)."""
from __future__ import annotations

import yaml

from runtime.engine.pools.derive import derive
from runtime.engine.policy import Policy
from runtime.rules.loader import load_rules
from runtime.snapshots import load_snapshot
from tests.seedfiles import FIXTURES


def test_a_node_without_the_managed_label_derives_no_flavor(tmp_path):
    nodes = [d for d in yaml.safe_load_all((FIXTURES / "seed/common/nodes.yaml").read_text()) if d]
    fresh = {"apiVersion": "v1", "kind": "Node",
             "metadata": {"name": "node-new", "labels": {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                                                         "kubernetes.io/hostname": "node-new"}},
             "status": {"capacity": {"cpu": "8"}}}
    (tmp_path / "nodes.yaml").write_text(yaml.safe_dump_all(nodes + [fresh]))
    for name in ("nodefeatures.yaml", "devices.yaml", "settings.yaml", "namespaces.yaml"):
        (tmp_path / name).write_text((FIXTURES / "seed/common" / name).read_text())
    state = derive(Policy(load_rules()), load_snapshot([tmp_path]))
    assert sorted(f["metadata"]["name"] for f in state.resource_flavors) == [
        "gpustack--amd-epyc-7r13-linux-amd64-16c", "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d",
        "gpustack--amd-epyc-7r32-linux-amd64-4c", "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-1d",
        "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-4d",
        "gpustack--intel-xeon-platinum-8259cl-linux-amd64-48c", "gpustack--intel-xeon-platinum-8259cl-linux-amd64-4c"]
