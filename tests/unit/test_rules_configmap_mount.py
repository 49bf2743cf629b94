"""The rules directory as the kubelet mounts a ConfigMap (the chart's ``accelpolicy-rules``, docs/tasks/e2e.md "The offline kind cluster").

The kubelet's atomic writer puts the files into ``..<timestamp>/``, points ``..data`` at it and links every
top-level entry through ``..data``; the loader must read each rule file once (found on kind: the agent
refused "NodeAgent 'agent' is already defined at rules/..2026_12_01_03_29_13.1202693767/agent.yaml")."""
from __future__ import annotations

import os
import shutil

from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules


def kubelet_mount(src, dst) -> None:
    """``dst`` laid out as the kubelet lays out a ConfigMap volume holding the tree ``src``."""
    stamp = dst / "..2026_12_01_03_29_13.1202693767"
    shutil.copytree(src, stamp, ignore=shutil.ignore_patterns("tests"))
    os.symlink(stamp.name, dst / "..data")
    for entry in stamp.iterdir():
        os.symlink(f"..data/{entry.name}", dst / entry.name)


def test_a_kubelet_mounted_rules_configmap_loads_like_the_tree(tmp_path):
    kubelet_mount(DEFAULT_RULES_DIR, tmp_path)
    mounted, tree = load_rules(tmp_path), load_rules()
    assert sorted(mounted.documents) == sorted(tree.documents)
    assert all(not str(doc.file).startswith("..") for doc in mounted.documents.values())
