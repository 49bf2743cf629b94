"""`get ... -o yaml` shows the labels others added to our objects, as the controller keeps them
(runtime/engine/pools/kept.py states the rules)."""
from __future__ import annotations

import shutil
from pathlib import Path

import yaml
from click.testing import CliRunner

from runtime.cli import main
from runtime.engine.pools.derive import derive
from runtime.engine.policy import Policy
from runtime.rules.loader import load_rules
from runtime.snapshots import load_snapshot

SEED = Path(__file__).resolve().parents[1] / "fixtures" / "seed" / "common"
FLAVOR = "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-4d"
QUEUE = "gpustack--nvidia-tesla-t4-linux-amd64"
FOREIGN = {"app.kubernetes.io/managed-by": "Helm", "argocd.argoproj.io/instance": "pools"}


def _cluster_after_one_reconcile(tmp_path: Path) -> tuple[Path, dict, dict]:
    """The seed plus the flavor and queue the controller wrote, then edited by Helm/Argo CD."""
    root = tmp_path / "snapshot"
    shutil.copytree(SEED, root)
    state = derive(Policy(load_rules()), load_snapshot([root]))
    (flavor,) = [f for f in state.resource_flavors if f["metadata"]["name"] == FLAVOR]
    (queue,) = [q for q in state.cluster_queues if q["metadata"]["name"] == QUEUE]
    live_flavor = yaml.safe_load(yaml.safe_dump(flavor))
    live_flavor["metadata"]["labels"].update(FOREIGN)
    live_flavor["metadata"]["annotations"].update({"note.gpustack.ai/stale": "x", "example.com/owner": "team-a"})
    live_queue = yaml.safe_load(yaml.safe_dump(queue))
    live_queue["metadata"]["labels"].update({**FOREIGN, "acceleratable.feature.gpustack.ai/nvidia-old": "true"})
    (root / "live.yaml").write_text(yaml.safe_dump_all([live_flavor, live_queue], sort_keys=False))
    return root, flavor, queue


def _get(*args) -> dict:
    result = CliRunner().invoke(main, ["get", *args, "-o", "yaml"])
    assert result.exit_code == 0, result.output
    return yaml.safe_load(result.stdout)


def test_get_rf_shows_labels_others_added(tmp_path):
    root, flavor, _ = _cluster_after_one_reconcile(tmp_path)
    shown = _get("rf", FLAVOR, "--snapshot", str(root))
    assert shown["metadata"]["labels"] == {**flavor["metadata"]["labels"], **FOREIGN}
    # our notes are replaced wholesale (the stale one is pruned); another tool's annotation stays
    assert shown["metadata"]["annotations"] == {**flavor["metadata"]["annotations"], "example.com/owner": "team-a"}
    assert shown["spec"] == flavor["spec"]


def test_get_cq_keeps_foreign_labels_and_prunes_our_stale_ones(tmp_path):
    root, _, queue = _cluster_after_one_reconcile(tmp_path)
    shown = _get("clusterqueue", QUEUE, "--snapshot", str(root))
    assert shown["metadata"]["labels"] == {**queue["metadata"]["labels"], **FOREIGN}


def test_a_recreated_flavor_keeps_nothing_of_the_old_object(tmp_path):
    """``spec.nodeLabels`` differ: the controller deletes and re-applies it (docs/concepts/pools-and-flavors.md "ResourceFlavors: what each node contributes")."""
    root, flavor, _ = _cluster_after_one_reconcile(tmp_path)
    live = list(yaml.safe_load_all((root / "live.yaml").read_text()))
    live[0]["spec"]["nodeLabels"]["kubernetes.io/os"] = "windows"
    (root / "live.yaml").write_text(yaml.safe_dump_all(live, sort_keys=False))
    shown = _get("rf", FLAVOR, "--snapshot", str(root))
    assert shown["metadata"]["labels"] == flavor["metadata"]["labels"]
