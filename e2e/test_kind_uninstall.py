"""Uninstall leaves a working cluster, and docs/install.md installs it again (docs/install.md "How removal, upgrades and the namespace are decided" and "Install accelpolicy on your own cluster (kind as the example)"; "Prove it
on kind"). The LAST suite of the kind session: it removes everything of ours and installs it again.

The commands are docs/install.md's own: its ```bash blocks marked ``<!-- e2e: NAME -->``, run as written
in one bash per phase (``set -euo pipefail``, from the repository root) with ``CLUSTER``, ``IMAGE`` and
``KUBECONFIG`` set to this session's cluster; the page's build and cluster-creation blocks are the
session's (e2e/kind/stack.py did them). Phases:

1. ``env`` + ``uninstall`` (``helm uninstall --wait``): then a Pod with the queue label is created
   within 5 s, no webhook configuration of ours remains (the garbage collector took them with the
   ClusterRole), our CRDs and objects are still there;
2. ``env`` + ``namespace-delete``: the namespace is gone within 60 s; ``finalizers`` + ``removal``: the
   finalizers released by the page's one command, our CRDs and objects, Kueue objects and Node keys gone;
3. ``env`` + ``images`` + ``components`` + ``namespace`` + ``chart`` + ``check`` (``helm test`` among
   them): the walkthrough's step 1 table is back.

Leaves the cluster freshly installed by the page (its values: default audit interval, allocations
``auto``; the device-plugin stand-ins and the Instances' image as the session set them).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest
import yaml

from kind.stack import REPO
from testing.localcluster.walkthrough import wait_for_table
from tests.seedfiles import seed_table

SYSTEM = "gpustack-system"
PAGE = REPO / "docs" / "install.md"
BLOCK = re.compile(r"^<!-- e2e: (\S+) -->\n```bash\n(.*?)^```", re.M | re.S)
#: every CRD the chart installs: one per file of crds/ (the chart's files/crds), so none is left out when one is added
OURS = tuple(sorted(yaml.safe_load(path.read_text())["metadata"]["name"] for path in (REPO / "crds").glob("*.yaml")))
CONFIGS = (("mutatingwebhookconfiguration", "gpustack-worker-mutation"),
           ("validatingwebhookconfiguration", "gpustack-worker-validation"))


def page_blocks() -> dict[str, str]:
    """The page's marked blocks, by name (each name once)."""
    blocks = {}
    for name, body in BLOCK.findall(PAGE.read_text()):
        assert name not in blocks, f"docs/install.md: block {name!r} marked twice"
        blocks[name] = body
    return blocks


@pytest.fixture(scope="module")
def kind(cluster):
    if cluster.stack is None:
        pytest.skip("kind backend only: uninstall and reinstall of the chart (--cluster=kind)")
    return cluster


def run_page(kind, *names: str, timeout: float = 1500) -> float:
    """Run the page's blocks ``names`` in one bash; returns the seconds it took. Fails with the output."""
    blocks = page_blocks()
    script = "set -euo pipefail\n" + "\n".join(blocks[n] for n in names)
    env = {**os.environ, "CLUSTER": kind.stack.cluster, "IMAGE": kind.stack.image, "KUBECONFIG": str(kind.kubeconfig)}
    t0 = time.monotonic()
    proc = subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"docs/install.md blocks {names} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return time.monotonic() - t0


def _gone(kind, *args: str) -> bool:
    return kind.kubectl(*args, check=False).returncode != 0


def test_the_page_marks_every_block_the_suite_runs():
    assert set(page_blocks()) == {"env", "images", "components", "namespace", "chart", "check", "uninstall",
                                  "finalizers", "namespace-delete", "removal"}


def test_uninstall_leaves_a_working_cluster_and_the_page_installs_it_again(kind, record_step):
    kubectl = kind.kubectl
    assert [k for k, n in CONFIGS if _gone(kind, "get", k, n)] == []   # registered before the uninstall
    before = {r: json.loads(kubectl.stdout("get", r, "-A", "-o", "json"))["items"] for r in OURS}
    # -- 1. helm uninstall ---------------------------------------------------------------------------------
    seconds = run_page(kind, "env", "uninstall")
    record_step("helm uninstall --wait (docs/install.md)", seconds, table=False)
    t0 = time.monotonic()
    queue = json.loads(kubectl.stdout("get", "localqueues.kueue.x-k8s.io", "-n", "default", "-o", "json"))["items"]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "after-uninstall", "namespace": "default",
                        "labels": {"kueue.x-k8s.io/queue-name": queue[0]["metadata"]["name"] if queue else "none"}},
           "spec": {"containers": [{"name": "main", "image": "ubuntu:24.04", "command": ["sleep", "1"]}]}}
    while (out := kubectl("create", "-f", "-", input=json.dumps(pod), check=False)).returncode != 0:
        assert time.monotonic() - t0 < 5, f"a queue-labelled Pod still refused 5 s after the uninstall: {out.stderr}"
        time.sleep(0.2)
    pod_seconds = time.monotonic() - t0
    kubectl("delete", "pod", "after-uninstall", "-n", "default", "--wait=false")
    while not all(_gone(kind, "get", k, n) for k, n in CONFIGS):
        assert time.monotonic() - t0 < 30, "a webhook configuration of ours outlived the uninstall"
        time.sleep(0.2)
    configs_seconds = time.monotonic() - t0
    record_step(f"after the uninstall: queue-labelled Pod created in {pod_seconds:.1f}s, webhook configurations "
                f"gone in {configs_seconds:.1f}s", pod_seconds, table=False)
    assert kubectl.stdout("get", "mutatingwebhookconfiguration,validatingwebhookconfiguration",
                          "-l", "app.kubernetes.io/managed-by=accelpolicy", "-o", "name").strip() == ""
    kept = {r: json.loads(kubectl.stdout("get", r, "-A", "-o", "json"))["items"] for r in OURS}
    assert {r: len(v) for r, v in kept.items()} == {r: len(v) for r, v in before.items()}   # CRDs and objects kept
    # -- 2. the namespace (within 60 s), the finalizers, the full removal ---------------------------------------
    namespace = run_page(kind, "env", "namespace-delete")
    record_step("kubectl delete namespace gpustack-system after the uninstall", namespace, table=False)
    assert _gone(kind, "get", "namespace", SYSTEM)
    assert namespace < 60, f"the namespace took {namespace:.0f}s to go"
    t0 = time.monotonic()
    run_page(kind, "env", "finalizers", "removal")
    record_step("full removal (docs/install.md: finalizers, CRDs, Kueue objects, Node keys)", time.monotonic() - t0,
                table=False)
    for resource in OURS:
        assert _gone(kind, "get", "crd", resource), resource
    assert kubectl.stdout("get", "clusterqueues.kueue.x-k8s.io", "-l", "resource.gpustack.ai/type=instancetypes",
                          "-o", "name").strip() == ""
    nodes = json.loads(kubectl.stdout("get", "nodes", "-o", "json"))["items"]
    for node in nodes:
        assert not [k for k in node["metadata"].get("annotations") or {} if k.startswith("feature.gpustack.ai/cpu-")]
        assert not [k for k in node["status"].get("capacity") or {} if ".sliced." in k or ".partitioned." in k]
    # -- 3. install again, by the page -----------------------------------------------------------------------
    seconds = run_page(kind, "env", "images", "components", "namespace", "chart", "check")
    record_step("install again by docs/install.md (images, Kueue/NFD, namespace, helm install --wait, helm test)",
                seconds, table=False)
    t0 = time.monotonic()
    from kind.kindwalk import KindWalkthrough   # e2e/kind: the seed's node names mapped to kind's
    walk = KindWalkthrough(kind.kubeconfig, kind.stack.kind_node)
    try:
        want = walk.seed_text(seed_table("step1-instancetype.txt"))
        wait_for_table(lambda: kubectl.stdout("get", "instancetypes"), want, timeout=300, ignore=("AGE", "CPU"))
    finally:
        walk.stop()
    record_step("reinstalled: the walkthrough's step 1 table is back", time.monotonic() - t0)
    assert [k for k, n in CONFIGS if _gone(kind, "get", k, n)] == []
