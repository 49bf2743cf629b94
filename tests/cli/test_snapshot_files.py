"""Snapshot files a careless user leaves around (docs/node-facts-robustness.md "Snapshot files"): a FIFO in a snapshot directory
used to hang `get`/`admit` forever; the same Node twice in one file was taken silently."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from runtime.snapshots import load_snapshot

SEED = Path(__file__).resolve().parents[1] / "fixtures" / "seed" / "common"
SEED_T4 = "gpustack--nvidia-tesla-t4-linux-amd64   gpustack-fnv64-6b371caa2da0b799   8/32Gi/100Gi            4/5 40/50 100/500 0/0"


def test_a_fifo_in_a_snapshot_directory_is_skipped_with_a_warning(tmp_path):
    root = tmp_path / "snapshot"
    shutil.copytree(SEED, root)
    fifo = root / "zz-pipe.yaml"
    os.mkfifo(fifo)  # nobody ever writes to it: opening it for reading blocks forever
    result = subprocess.run([sys.executable, "-c", "from runtime.cli import main; main()", "get", "instancetypes", "--snapshot", str(root)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"warning: {fifo}: skipped: not a regular file" in result.stderr
    assert SEED_T4 in result.stdout


def test_an_object_twice_in_one_file_is_named(tmp_path):
    root = tmp_path / "snapshot"
    shutil.copytree(SEED, root)
    nodes = root / "nodes.yaml"
    text = nodes.read_text()
    first = text.split("\n---\n")[0]
    nodes.write_text(text.rstrip("\n") + "\n---\n" + first + "\n")
    count = len([doc for doc in yaml.safe_load_all(text) if doc])
    snapshot = load_snapshot([root])
    assert count == 4
    assert [w for w in snapshot.warnings if "appears twice" in w] == [
        f"{nodes}: Node node-cpu appears twice (items 0 and 4); the later one is used"]


def test_an_overlay_file_replaces_its_base_without_a_warning(tmp_path):
    """Layering across files (a step's overlay beside its base) is what re-applying does."""
    base = load_snapshot([SEED])
    node = base.list("Node")[0]
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(f"apiVersion: v1\nkind: Node\nmetadata:\n  name: {node['metadata']['name']}\n")
    layered = load_snapshot([SEED, overlay])
    assert layered.warnings == ()
    assert layered.get("Node", node["metadata"]["name"])["metadata"].get("labels") is None


def test_a_pod_quantity_the_api_server_would_refuse_is_named(tmp_path):
    """Before: derive raised QuantityError with a traceback. Now exit 2 naming file, object, field."""
    root = tmp_path / "snapshot"
    shutil.copytree(SEED, root)
    pod = root / "pod.yaml"
    pod.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p1, namespace: default}\n"
                   "spec:\n  nodeName: node-cpu\n  containers: [{name: c, image: x, resources: {limits: {cpu: abc}}}]\n")
    result = subprocess.run([sys.executable, "-c", "from runtime.cli import main; main()", "get", "instancetypes",
                             "--snapshot", str(root)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr == (f"error: {pod}: Pod default/p1: spec.containers[0].resources.limits.cpu: quantities must "
                             "match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': 'abc'\n")
