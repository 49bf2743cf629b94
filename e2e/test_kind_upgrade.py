"""Upgrade and restart on kind (issue 11 item 6): admission keeps answering.

Runs after the walkthrough on the same ``--cluster=kind`` stack (``make e2e-kind`` passes both files).
A client submits an Instance for admission every ``PERIOD`` seconds (``kubectl create --dry-run=server``:
the API server calls our defaulting and validating webhooks, and nothing is stored) while

1. ``helm upgrade`` installs a new image tag (the same image, tagged ``<tag>-upgrade`` and loaded) and an
   edited rules ConfigMap (the privileged-mode message of rules/admission/instances-validation.yaml with
   `` (upgraded rules)`` appended): the Deployment rolls both replicas;
2. the leader Pod (holder of Lease ``gpustack-operator-worker``) is deleted: another replica takes the
   Lease, the Deployment replaces the Pod.

Every review must succeed (zero denied or failed), and each must show our defaulting webhook's work.
After the upgrade, a privileged Instance is refused with the edited message: the new rules serve.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from testing.localcluster.walkthrough import MANIFESTS

NS, SYSTEM, LEASE = "default", "gpustack-system", "gpustack-operator-worker"
PERIOD = 0.3   # seconds between reviews
EDITED = 'privileged mode is not allowed: enable the "instance-privileged-allowed" setting to allow it'


@pytest.fixture(scope="module")
def kind_stack(cluster):
    if cluster.stack is None:
        pytest.skip("kind backend only: helm upgrade of the chart (--cluster=kind)")
    return cluster


class ReviewClient:
    """Submits a dry-run Instance every PERIOD seconds from a thread; counts outcomes."""

    def __init__(self, cluster):
        self.cluster = cluster
        doc = yaml.safe_load((MANIFESTS / "sliced-demo.yaml").read_text())
        doc["metadata"]["name"] = "review-probe"
        self.doc = json.dumps(doc)
        self.ok = 0
        self.failures: list[str] = []
        self.undefaulted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            out = self.cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=self.doc,
                                       check=False)
            if out.returncode != 0:
                self.failures.append(f"{time.strftime('%H:%M:%S')} {out.stderr.strip()}")
            else:
                self.ok += 1
                # the defaulting webhook fills the Instance's defaults (spec/instances.md: e.g. imagePullPolicy)
                if "imagePullPolicy" not in json.loads(out.stdout)["spec"]:
                    self.undefaulted += 1
            self._stop.wait(PERIOD)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(60)


def lease_holder(cluster) -> str:
    lease = json.loads(cluster.kubectl.stdout("-n", SYSTEM, "get", "lease", LEASE, "-o", "json"))
    return lease["spec"].get("holderIdentity") or ""


def wait(what: str, check, timeout: float = 600):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        value = check()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"{what} not reached in {timeout:.0f}s")


def edited_chart(tmp: Path) -> Path:
    """deploy/chart with its links resolved and the privileged-mode message edited."""
    from kind.stack import REPO
    chart = tmp / "chart"
    shutil.copytree(REPO / "deploy" / "chart", chart, symlinks=False)
    rule = chart / "files" / "rules" / "admission" / "instances-validation.yaml"
    text = rule.read_text()
    assert text.count(EDITED) == 1
    rule.write_text(text.replace(EDITED, EDITED + " (upgraded rules)"))
    return chart


def test_helm_upgrade_and_leader_loss_keep_admission_answering(kind_stack, tmp_path, record_step):
    from kind.stack import helm_values, load_images, run, tools
    cluster, stack = kind_stack, kind_stack.stack
    t = tools()
    new_image = f"{stack.image}-upgrade"
    run("docker", "tag", stack.image, new_image)
    load_images(t, stack.cluster, list(stack.kind_node.values()), [new_image])
    chart = edited_chart(tmp_path)
    pods_before = set(cluster.kubectl.stdout("-n", SYSTEM, "get", "pods", "-l", "app.kubernetes.io/component=controller",
                                             "-o", "name").split())
    with ReviewClient(cluster) as client:
        time.sleep(3)
        t0 = time.monotonic()
        run(t["helm"], "--kubeconfig", str(cluster.kubeconfig), "upgrade", "accelpolicy", str(chart), "-n", SYSTEM,
            "--wait", "--timeout", "10m", *helm_values(stack.kind_node, new_image), timeout=720)
        record_step("helm upgrade (new tag, edited rules) -> rolled out", time.monotonic() - t0, table=False)
        upgrade = (client.ok, len(client.failures))
        deployment = json.loads(cluster.kubectl.stdout("-n", SYSTEM, "get", "deploy", LEASE, "-o", "json"))
        assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == new_image
        pods_after = set(cluster.kubectl.stdout("-n", SYSTEM, "get", "pods", "-l",
                                                "app.kubernetes.io/component=controller", "-o", "name").split())
        assert pods_after and not pods_after & pods_before   # both replicas replaced

        holder = wait("a leader after the upgrade", lambda: lease_holder(cluster))
        leader_pod = holder.split("_")[0]
        t0 = time.monotonic()
        cluster.kubectl("-n", SYSTEM, "delete", "pod", leader_pod, "--wait=false")
        new_holder = wait("another replica taking the Lease",
                          lambda: (h := lease_holder(cluster)) and not h.startswith(leader_pod) and h)
        record_step("leader Pod deleted -> Lease taken over", time.monotonic() - t0, table=False)
        cluster.kubectl("-n", SYSTEM, "rollout", "status", f"deploy/{LEASE}", "--timeout=600s", timeout=660)
        time.sleep(3)
    record_step(f"admission reviews: {upgrade[0]} ok / {upgrade[1]} failed during the upgrade, {client.ok} ok / "
                f"{len(client.failures)} failed in all (leader {holder} -> {new_holder})", 0.0, table=False)
    print(f"\nadmission during upgrade: {upgrade[0]} reviews ok, {upgrade[1]} failed; in all {client.ok} ok, "
          f"{len(client.failures)} failed; leader {holder} -> {new_holder}")
    assert client.failures == []
    assert client.undefaulted == 0
    assert client.ok >= 20
    privileged = yaml.safe_load((MANIFESTS / "privileged-demo.yaml").read_text())
    out = cluster.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(privileged), check=False)
    assert out.returncode != 0 and EDITED + " (upgraded rules)" in out.stderr, out.stderr
