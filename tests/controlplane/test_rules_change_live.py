"""A rules change's blast radius is bounded, live (docs/rule-authoring.md "How a rules change goes live").

On the shared control plane: the seed cluster, the controller (as its ServiceAccount, registering the
webhooks for the admission replica, ``--webhook-registration-only``'s layout) and an ``accelpolicy
admission`` replica on loopback, both following the rules ConfigMap; a client keeps sending reviews to the
replica and an Instance runs on the A10G pool. Edits saved into the rules directory (swapped in one rename,
as kubelet updates a mounted ConfigMap):

1. a new policy at a new path, in a generation the admission replica refuses (its recent reviews) and the
   controller would accept: refused everywhere, no webhook registered for the path (no phantom); the
   revert leaves the registrations exactly as they were;
2. a misspelt managed label key (every pool emptied) and a flavor ``when`` no node meets: held, the pools
   untouched;
3. ``expression: "false"``: held against the replica's recent reviews;
4. the held pool edit approved by its hash (``accelpolicy approve``): live, its pools kept under Hold, the
   Instance untouched; its revert brings the pools back without a manual step.

Every review before, during and after is answered (0 failed), and the Instance is never stopped.
"""
from __future__ import annotations

import json
import os
import shutil
import ssl
import threading
import time
from pathlib import Path

import httpx
from click.testing import CliRunner

from runtime.cli import main
from runtime.cli.controller import rules_holder
from runtime.cli.registration import Registration
from runtime.controller.admission import AdmissionServer
from runtime.controller.webhooks import WebhookTls
from runtime.engine.admission import review_for, view_kinds
from runtime.engine.policy import Policy
from runtime.kube.session import connect
from runtime.reload.watcher import content_hash, generation_id
from runtime.rules.loader import load_rules
from runtime.webhook.host import ServingOptions
from runtime.webhook.server import self_signed
from testing.hooks import ObservedController as Controller
from testing.localcluster.testing import service_account_kubeconfig, wait_for
from tests.controller.test_registration_both_ways import PHANTOM, add_copy
from tests.controller.test_reload_gate import EVAL_ERROR, ONE_FAMILY, RULE_1A, TWO_FAMILIES, _edit
from tests.controlplane.test_controller import _clean
from tests.controlplane.test_reload_gate_live import CONFIGMAP, SYSTEM, Reviewer, seed_with_rules_configmap

A10G = "gpustack--nvidia-a10g-linux-amd64"
MARK = "schedule.gpustack.ai/emptied-by-rules"
INSTANCE = {"apiVersion": "worker.gpustack.ai/v1", "kind": "Instance",
            "metadata": {"name": "steady", "namespace": "default"},
            "spec": {"type": A10G, "image": "ubuntu:24.04", "command": ["sleep", "86400"],
                     "resources": {"accelerator": "1"}, "volume": {"ephemeral": {"capacity": "1Gi"}}}}


def swap(tmp: Path, rules: Path, version: str, edit=None, base: Path | None = None) -> str:
    """A new version of the rules (a copy of ``base``, default v1), edited, swapped in by one rename;
    returns its generation id."""
    shutil.copytree(base or tmp / "v1", tmp / version)
    if edit is not None:
        edit(tmp / version)
    (tmp / "rules.new").symlink_to(tmp / version)
    os.replace(tmp / "rules.new", rules)
    return generation_id(content_hash(rules))


def annotations(kubectl) -> dict:
    return json.loads(kubectl.stdout("-n", SYSTEM, "get", "configmap", CONFIGMAP, "-o", "json"))[
        "metadata"].get("annotations") or {}


def verdict(kubectl) -> str:
    return annotations(kubectl).get("rules.accelpolicy.dev/verdict", "")


def hooks(kubectl) -> dict[str, list[str]]:
    """Webhook names per configuration, as registered."""
    out = {}
    for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        for item in json.loads(kubectl.stdout("get", kind, "-o", "json"))["items"]:
            out[item["metadata"]["name"]] = sorted(w["name"] for w in item.get("webhooks") or [])
    return out


def with_new_path(d: Path) -> None:
    """pods-validation copied under /validate-pods-copy, and its rule 1a failing on the recent reviews."""
    add_copy(d)
    _edit(d / "admission" / "pods.yaml", RULE_1A, EVAL_ERROR)


def pools(kubectl) -> dict:
    """The A10G pool as the cluster holds it: its queue's stopPolicy and mark, its flavors, its type's summary."""
    queue = json.loads(kubectl.stdout("get", "clusterqueues.kueue.x-k8s.io", A10G, "-o", "json"))
    it = json.loads(kubectl.stdout("get", "instancetypes.worker.gpustack.ai", A10G, "-o", "json"))
    flavors = kubectl.stdout("get", "resourceflavors.kueue.x-k8s.io", "-o", "name").split()
    return {"stopPolicy": queue["spec"].get("stopPolicy", "None"),
            "mark": (queue["metadata"].get("annotations") or {}).get(MARK),
            "flavors": sorted(flavors), "accelerator": it["status"]["summary"]["accelerator"],
            "phaseMessage": it["status"].get("phaseMessage")}


def settled(kubectl) -> dict:
    """:func:`pools` once it reads the same twice, 2 s apart (the controller's passes done)."""
    last: list = [None]

    def again():
        now, previous = pools(kubectl), last[0]
        last[0] = now
        time.sleep(2)
        return now == previous and now
    return wait_for(again, bool, timeout=60, what="the pools settled")[1]


def test_rule_edits_are_refused_or_held_everywhere_and_an_approved_one_destroys_no_work(control_plane, tmp_path):
    cluster, kubectl = control_plane
    rules = seed_with_rules_configmap(kubectl, tmp_path)
    policy = Policy(load_rules(rules))
    controller = policy.controller
    identity = service_account_kubeconfig(kubectl, cluster.kubeconfig, controller.systemNamespace,
                                          controller.controllerServiceAccount, tmp_path / "controller.kubeconfig")
    tls = self_signed(tmp_path / "tls")
    admin = connect(cluster.kubeconfig)
    replica = AdmissionServer(admin, Policy(load_rules(rules)), tls["cert"], tls["key"], SYSTEM,
                              ServingOptions(port=0), watch_rules_seconds=0.2,
                              rules_configmap=(SYSTEM, CONFIGMAP)).serve()
    session = connect(identity)
    controller = Controller(session, policy, coalesce_seconds=0.1, env={}, fit_coalesce_seconds=0,
                            extra_kinds=view_kinds(policy))
    url = f"https://127.0.0.1:{replica.server.port}"
    registration = Registration(session, WebhookTls(None, None, tls["ca"].read_bytes()), None, url, None)
    stop = threading.Event()
    holder = reviewer = halt = None
    loop = threading.Thread(target=controller.run, args=(stop,), daemon=True)
    try:
        controller.start()
        loop.start()
        wait_for(lambda: kubectl.stdout("get", "instancetypes.worker.gpustack.ai", "-o", "name"),
                 lambda out: A10G in out, timeout=60, what="the pools published")
        replica.start(sync_timeout=60)
        holder = rules_holder(controller, rules, None, None, 0.2, (SYSTEM, CONFIGMAP), registration).start()
        halt = registration.start(controller, stop)
        registered = wait_for(lambda: hooks(kubectl), lambda h: len(h) == 2, timeout=60, what="registration")[1]
        assert PHANTOM not in registered["gpustack-worker-validation"]
        kubectl("apply", "-f", "-", input=json.dumps(INSTANCE))             # through the replica's webhooks
        wait_for(lambda: kubectl.stdout("get", "pods", "-n", "default", "-o", "name"),
                 lambda out: "pod/steady" in out, timeout=60, what="the Instance's Pod")
        reviewer = Reviewer(f"{url}/validate-pods", tls["ca"], (ONE_FAMILY, TWO_FAMILIES))   # one allowed, one denied
        reviewer.start()
        wait_for(lambda: reviewer.answered, lambda n: n >= 40, timeout=30, what="reviews before")
        first = holder.id

        # 1. a new path, refused by the admission replica (its recent reviews): refused everywhere, no phantom
        tried = swap(tmp_path, rules, "v2", with_new_path)
        wait_for(lambda: verdict(kubectl), lambda v: v == f"refused:{tried}", timeout=90, what="refused")
        status = annotations(kubectl)["rules.accelpolicy.dev/status"]
        assert f"replica: 127.0.0.1:{replica.server.port}: replay-review: a review answered recently" in status
        assert holder.id == first and replica.reload.id == first
        assert hooks(kubectl) == registered
        assert httpx.post(f"{url}/validate-pods-copy", verify=ssl.create_default_context(cafile=str(tls["ca"])),
                          json=review_for(ONE_FAMILY, uid="x")).status_code == 404
        swap(tmp_path, rules, "v2r")                                   # the revert: v1's content again
        wait_for(lambda: verdict(kubectl), lambda v: v == f"accepted:{first}", timeout=60, what="the revert")
        assert hooks(kubectl) == registered

        # 2. pool-emptying edits: held, the pools untouched
        before = settled(kubectl)
        assert before["stopPolicy"] == "None" and before["accelerator"] != "0/0 0/0 0/0 0/0"
        misspelt = swap(tmp_path, rules, "v3", lambda d: _edit(d / "labels.yaml", "    managed: gpustack.ai/managed\n",
                                                               "    managed: gpustack.ai/manged\n"))
        wait_for(lambda: verdict(kubectl), lambda v: v == f"held:{misspelt}", timeout=90, what="held")
        assert "hold.maxCapacityRemovedPercent" in annotations(kubectl)["rules.accelpolicy.dev/status"]
        flavor_when = swap(tmp_path, rules, "v4", lambda d: _edit(d / "pools" / "derivation.yaml",
                                                                  "      when: 'count > 0'\n",
                                                                  "      when: 'count > 100'\n"))
        wait_for(lambda: verdict(kubectl), lambda v: v == f"held:{flavor_when}", timeout=90, what="held")
        assert pools(kubectl) == before and holder.id == first and replica.reload.id == first

        # 3. expression: "false", held against the replica's recent reviews
        false = swap(tmp_path, rules, "v5", lambda d: _edit(d / "admission" / "pods.yaml", RULE_1A,
                                                            '      expression: "false"\n'))
        wait_for(lambda: verdict(kubectl), lambda v: v == f"held:{false}", timeout=90, what="held")
        assert "recent review(s)" in annotations(kubectl)["rules.accelpolicy.dev/status"]
        seen = reviewer.answered
        wait_for(lambda: reviewer.answered, lambda n: n >= seen + 20, timeout=30, what="reviews while held")
        assert reviewer.last["one"] is True                               # the old generation answers

        # 4. the pool edit approved by its hash: live, pools kept under Hold, the Instance untouched
        assert swap(tmp_path, rules, "v6", lambda d: _edit(d / "labels.yaml", "    managed: gpustack.ai/managed\n",
                                                           "    managed: gpustack.ai/manged\n")) == misspelt
        wait_for(lambda: verdict(kubectl), lambda v: v == f"held:{misspelt}", timeout=90, what="held again")
        approved = CliRunner().invoke(main, ["approve", misspelt, "--kubeconfig", str(cluster.kubeconfig),
                                             "--namespace", SYSTEM, "--configmap", CONFIGMAP])
        assert approved.exit_code == 0, approved.output
        wait_for(lambda: verdict(kubectl), lambda v: v == f"approved:{misspelt}", timeout=60, what="approved")
        wait_for(lambda: replica.reload.id, lambda g: g == misspelt, timeout=30, what="the replica follows")
        kept = wait_for(lambda: pools(kubectl), lambda p: p["accelerator"] == "0/0 0/0 0/0 0/0", timeout=60,
                        what="the pools emptied")[1]
        assert (kept["stopPolicy"], kept["mark"], kept["flavors"]) == ("Hold", misspelt, before["flavors"])
        events = json.loads(kubectl.stdout("get", "events", "-n", SYSTEM, "-o", "json",
                                           f"--field-selector=involvedObject.name={CONFIGMAP},reason=RulesApproved"))
        assert [e["message"].split(" at ")[0] for e in events["items"]] == [
            f"rules generation {misspelt} approved by {admin.username()}"]

        # its revert (the parent): never held, the pools back without a manual step
        swap(tmp_path, rules, "v7")
        wait_for(lambda: verdict(kubectl), lambda v: v == f"accepted:{first}", timeout=60, what="the revert")
        wait_for(lambda: pools(kubectl), lambda p: p == before, timeout=60, what="the pools back as they were")
        instance = json.loads(kubectl.stdout("get", "instances.worker.gpustack.ai", "steady", "-o", "json"))
        assert not (instance.get("spec") or {}).get("stop")                # never stopped
        seen = reviewer.answered
        wait_for(lambda: reviewer.answered, lambda n: n >= seen + 20, timeout=30, what="reviews after")
        assert reviewer.failed == []
        print(f"reviews answered: {reviewer.answered}, failed: {len(reviewer.failed)}")
    finally:
        if reviewer is not None:
            reviewer.stop.set()
            reviewer.join(10)
        stop.set()
        if halt is not None:
            halt()
        if holder is not None:
            holder.stop()
        loop.join(10)
        replica.stop()
        controller.stop()
        for kind, name in (("mutatingwebhookconfiguration", "gpustack-worker-mutation"),
                           ("validatingwebhookconfiguration", "gpustack-worker-validation")):
            kubectl("delete", kind, name, "--ignore-not-found")
        kubectl("-n", SYSTEM, "delete", "configmap", CONFIGMAP, f"{CONFIGMAP}-serving", "--ignore-not-found")
        _clean(kubectl)

