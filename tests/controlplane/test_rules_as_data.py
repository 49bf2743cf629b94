"""Rules as data, end to end (docs/concepts/rules-as-data.md "Rules as data"): a copy of rules/ is edited (a preset, a denial message,
a threshold, a name pattern) and `get`, `admit`, `audit` and a running controller (hot reload, no
restart) all change, with no Python edit; a broken copy is refused with its file:line:col problems
while the working generation keeps answering."""
from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from runtime.cli import main
from runtime.cli.controller import rules_holder
from runtime.engine.policy import Policy
from runtime.kube.session import connect
from runtime.reload.watcher import content_hash, generation_id
from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules
from testing.hooks import ObservedController as Controller
from tests.controlplane.test_controller import _apply_seed_cluster, _clean

SEED = "tests/fixtures/seed/common"
A10G = "gpustack--nvidia-a10g-linux-amd64"
TWO = """\
apiVersion: v1
kind: Pod
metadata: {name: two, namespace: default, labels: {kueue.x-k8s.io/queue-name: QUEUE}}
spec:
  containers: [{name: main, image: x, resources: {limits: {nvidia.com/gpu: "1", nvidia.com/gpu.shared: "2"}}}]
"""
EDITS = [  # (file, old, new): one preset, one denial message, one threshold, one name pattern
    ("pools/presets.yaml", "{prefixes: [a10, a10g], tier: medium}", "{prefixes: [a10, a10g], tier: large}"),
    ("admission/pods.yaml", "'a Pod may request only one accelerator family, found ['",
     "'one accelerator family per Pod, please; found ['"),
    ("constants.yaml", "sharesPerAccelerator: 10 ", "sharesPerAccelerator: 20 "),
    ("pools/derivation.yaml", "entrancePrefix: gpustack-fnv64-", "entrancePrefix: pool-"),
]


def _edit(root: Path, file: str, old: str, new: str) -> None:
    path = root / file
    text = path.read_text()
    assert text.count(old) == 1, (file, old)
    path.write_text(text.replace(old, new))


def _cli(*args):
    """The CLI in-process; read `.stdout`: `.output` also holds what the running controller logs meanwhile."""
    return CliRunner().invoke(main, list(args))


def _why(result) -> str:
    """What a command printed and raised, for an assertion's message (the output holds the controller's log too)."""
    import traceback
    raised = "".join(traceback.format_exception(*result.exc_info)) if result.exc_info else ""
    return f"exit {result.exit_code}\n{result.output[-4000:]}\n{raised[-4000:]}"


def _wait(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError("timed out")


def test_an_edited_copy_changes_every_consumer_and_a_broken_copy_is_refused(control_plane, tmp_path):
    cluster, kubectl = control_plane
    rules = tmp_path / "rules"  # a symlink, swapped in one rename as kubelet updates a mounted ConfigMap
    shutil.copytree(DEFAULT_RULES_DIR, tmp_path / "v1")
    shutil.rmtree(tmp_path / "v1" / "tests")   # as the chart mounts it: the edits below change what the suites pin
    rules.symlink_to(tmp_path / "v1")
    pod = tmp_path / "pod.yaml"
    _clean(kubectl)
    _apply_seed_cluster(kubectl)
    controller = Controller(connect(cluster.kubeconfig), Policy(load_rules(rules)), coalesce_seconds=0.1, env={},
                            fit_coalesce_seconds=0)
    controller.start()
    stop = threading.Event()
    loop = threading.Thread(target=controller.run, args=(stop,), daemon=True)
    loop.start()
    reload = rules_holder(controller, rules, None, None, 0.2).start()   # no rules ConfigMap: it decides alone
    try:
        def live_entrance():
            it = json.loads(kubectl.stdout("get", "instancetypes", A10G, "-o", "json", "--ignore-not-found") or "{}")
            return (it.get("status") or {}).get("entrance")
        assert _wait(live_entrance) == "gpustack-fnv64-c4680bb149644f1c"
        got = _cli("get", "instancetypes", "--snapshot", SEED, "--rules", str(rules))
        assert "gpustack-fnv64-c4680bb149644f1c   8/64Gi/100Gi            1/1 10/10 100/100 0/0" in got.stdout, _why(got)

        # the four edits arrive together (one generation), as a ConfigMap update does
        shutil.copytree(tmp_path / "v1", tmp_path / "v2")
        for edit in EDITS:
            _edit(tmp_path / "v2", *edit)
        (tmp_path / "rules.new").symlink_to(tmp_path / "v2")
        os.replace(tmp_path / "rules.new", rules)
        # get: the name pattern, the preset and the threshold
        got = _cli("get", "instancetypes", "--snapshot", SEED, "--rules", str(rules))
        assert "pool-c4680bb149644f1c   12/128Gi/100Gi          1/1 20/20 100/100 0/0" in got.stdout, _why(got)
        # admit: the message
        pod.write_text(TWO.replace("QUEUE", "pool-c4680bb149644f1c"))
        admitted = _cli("admit", "-f", str(pod), "--snapshot", SEED, "--rules", str(rules), "-o", "text")
        assert admitted.exit_code == 1
        assert ('message:  Pod "two" is invalid: spec: Forbidden: one accelerator family per Pod, please; '
                "found [exclusive shared]") in admitted.stdout
        # audit: the same message on an existing Pod
        audited = _cli("audit", "--snapshot", SEED, "--snapshot", str(pod), "--rules", str(rules), "-o", "json")
        assert [r["message"] for r in json.loads(audited.stdout) if r["policy"] == "pods-validation"] == [
            "spec: Forbidden: one accelerator family per Pod, please; found [exclusive shared]"]
        # the running controller: a new generation, reconciled once, no restart
        assert _wait(lambda: live_entrance() == "pool-c4680bb149644f1c")
        summary = json.loads(kubectl.stdout("get", "instancetypes", A10G, "-o", "json"))["status"]["summary"]
        assert summary["accelerator"] == "1/1 20/20 100/100 0/0"
        assert reload.watcher.reloads == 1
        generation = controller.policy
        assert reload.metrics.registry.get_sample_value("accelpolicy_rules_generation",
                                                        {"generation": generation_id(content_hash(rules))}) == 1.0

        # a broken copy: refused with file:line:col; the working generation keeps answering
        _edit(rules, "pools/derivation.yaml", "entrance: 'entrancePrefix + fnv64a(name)'",
              "entrance: 'entrancePrefix + fnv64a(nam)'")
        linted = _cli("lint", str(rules))
        assert linted.exit_code == 1
        assert _wait(lambda: reload.watcher.failures == 1)
        assert [str(p) for p in reload.watcher.last_error.problems] == [linted.stdout.splitlines()[0]]
        assert linted.stdout.splitlines()[0].endswith("spec.entrance: undeclared name 'nam' (names here: entrancePrefix, name)")
        assert controller.policy is generation
        assert reload.metrics.registry.get_sample_value("accelpolicy_rules_reload_failures_total") == 1.0
        events = json.loads(kubectl.stdout("get", "events", "-n", "gpustack-system", "-o", "json"))["items"]
        reasons = [e["reason"] for e in events if e["involvedObject"].get("kind") == "Namespace"]
        assert "RulesReloaded" in reasons and "RulesRefused" in reasons
        controller.request_reconcile()
        time.sleep(1.0)
        assert live_entrance() == "pool-c4680bb149644f1c"
    finally:
        reload.stop()
        stop.set()
        loop.join(10)
        controller.stop()
        _clean(kubectl)
