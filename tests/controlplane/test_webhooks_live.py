"""The controller serves the admission webhooks from its watch caches and registers them (docs/development/testing.md "Test layers"): real ``kubectl`` calls through kube-apiserver get our verdicts and patches.

The controller runs in this process as the ServiceAccount ``gpustack-system/gpustack-controller``
(a token from the TokenRequest API, bound to cluster-admin): the identity rules/controller.yaml
names as the one allowed to write InstanceTypeFlavors and delete Settings, so its own writes pass
its own webhooks. The server listens on a free loopback port with a self-signed CA; the
configurations point at ``https://127.0.0.1:<port><path>``.

The last test stops the controller and shows the registrations stay (a failurePolicy Fail webhook
with no server then refuses its requests); the module's teardown deletes them so later modules on
the shared cluster are not judged by a server that is gone.
"""
from __future__ import annotations

import base64
import contextlib
import copy
import json
import os
import re
import signal
import ssl
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from testing.hooks import ObservedController as Controller
from runtime.controller.webhooks import ControllerWebhooks, WebhookTls
from runtime.engine.admission import view_kinds
from runtime.engine.admission.registration import registration_of
from runtime.engine.policy import Policy
from runtime.kube.session import KubeApiError, connect
from runtime.rules.loader import load_rules
from runtime.webhook.host import ServingOptions
from runtime.webhook.server import self_signed
from testing.localcluster.testing import get_json, wait_for
from tests.controlplane.test_controller import _apply_seed_cluster, _clean, loop_running
from tests.controlplane.test_instances_live import _clean_instances
from tests.seedfiles import seed_object

POLICY = Policy(load_rules())
REG = registration_of(POLICY)
NS, SYSTEM = "default", "gpustack-system"
SA = "gpustack-controller"
A10G_ENTRANCE = "gpustack-fnv64-c4680bb149644f1c"
PRIVILEGED = ('spec.privileged: Forbidden: privileged mode is not allowed: enable the "instance-privileged-allowed" '
              'setting to allow it')   # seed troubleshooting table
PRIVILEGED_MESSAGE = f'Instance.worker.gpustack.ai "priv-demo" is invalid: {PRIVILEGED}'   # the webhook's message
PRIVILEGED_KUBECTL = f'The Instance "priv-demo" is invalid: {PRIVILEGED}'
FIGURES: dict[str, list[float]] = {}
ACCELPOLICY = Path(sys.executable).parent / "accelpolicy"


def _get(kubectl, *args) -> dict:
    return get_json(kubectl, *args)


def _wait(fetch, predicate, timeout=30.0, what="condition"):
    return wait_for(fetch, predicate, timeout, what)


def _controller_kubeconfig(cluster, kubectl, tmp) -> str:
    """A kubeconfig for the ServiceAccount the rules name as the controller (cluster-admin)."""
    kubectl("-n", SYSTEM, "create", "serviceaccount", SA, check=False)
    kubectl("create", "clusterrolebinding", "accelpolicy-test-controller", "--clusterrole=cluster-admin",
            f"--serviceaccount={SYSTEM}:{SA}", check=False)
    token = kubectl.stdout("-n", SYSTEM, "create", "token", SA, "--duration=2h").strip()
    server = yaml.safe_load(cluster.kubeconfig.read_text())["clusters"][0]["cluster"]
    path = tmp / "controller.kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "local", "cluster": server}],
        "users": [{"name": SA, "user": {"token": token}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": SA}}],
        "current-context": "local"}))
    return str(path)


def _delete_registrations(kubectl) -> None:
    kubectl("delete", "mutatingwebhookconfiguration", REG.configurations.mutating, "--ignore-not-found")
    kubectl("delete", "validatingwebhookconfiguration", REG.configurations.validating, "--ignore-not-found")


@pytest.fixture(scope="module")
def sa_kubeconfig(control_plane, tmp_path_factory):
    """The seed cluster and a kubeconfig of the controller's ServiceAccount; cleans up afterwards."""
    cluster, kubectl = control_plane
    _delete_registrations(kubectl)
    _clean(kubectl)
    _clean_instances(kubectl)
    _apply_seed_cluster(kubectl)
    yield _controller_kubeconfig(cluster, kubectl, tmp_path_factory.mktemp("sa"))
    _delete_registrations(kubectl)
    # the webhook-defaulted custom type carries our finalizer and nobody runs to remove it now
    kubectl("patch", "instancetype", "a10g-12c128g", "--type=merge", "-p", '{"metadata":{"finalizers":null}}',
            check=False)
    _clean_instances(kubectl)
    _clean(kubectl)
    kubectl("delete", "clusterrolebinding", "accelpolicy-test-controller", "--ignore-not-found")
    kubectl("-n", SYSTEM, "delete", "serviceaccount", SA, "--ignore-not-found")


@contextlib.contextmanager
def serving(kubeconfig: str, policy: Policy, tmp: Path):
    """The controller for ``policy`` (caches, webhook server, registrar) in this process as ``kubeconfig``'s
    identity, its webhooks registered and its loop running: yields the webhooks; stops both after."""
    controller = Controller(connect(kubeconfig), policy, coalesce_seconds=0.1,
                            env={}, fit_coalesce_seconds=0, extra_kinds=view_kinds(policy))
    paths = self_signed(tmp / "tls")
    webhooks = ControllerWebhooks(controller, WebhookTls(paths["cert"], paths["key"], paths["ca"].read_bytes()),
                                  ServingOptions(port=0))
    webhooks.serve()
    try:
        controller.start()
        webhooks.ready()
        assert controller.reconcile().errors == []
        webhooks.register()
        with loop_running(controller):
            yield webhooks
    finally:
        webhooks.stop()
        controller.stop()


@pytest.fixture(scope="module")
def served(sa_kubeconfig, tmp_path_factory):
    """The controller's caches, webhook server and registrar in this process; its loop running."""
    with serving(sa_kubeconfig, POLICY, tmp_path_factory.mktemp("webhooks")) as webhooks:
        try:
            yield webhooks
        finally:
            FIGURES["live view rebuild (snapshot of the view kinds + derive), seconds"] = \
                webhooks.view.rebuild_seconds
            FIGURES["reconcile pass, seconds (the alternative: a view per reconcile)"] = [
                r.seconds for r in webhooks.controller.reconciles]
    for key, values in FIGURES.items():
        print(f"\n[webhook figure] {key}: {', '.join(f'{v:.3f}' for v in values)}"
              + (f" (median {statistics.median(values):.3f})" if len(values) > 1 else ""))


def _instance(name: str, **spec) -> dict:
    doc = {"apiVersion": "worker.gpustack.ai/v1", "kind": "Instance", "metadata": {"name": name, "namespace": NS},
           "spec": {"type": "gpustack--generic-linux-amd64", "image": "ubuntu:24.04",
                    "volume": {"ephemeral": {"capacity": "1Gi"}}}}
    doc["spec"].update(spec)
    return doc


def _create(kubectl, doc: dict, check: bool = False):
    return kubectl("create", "-f", "-", input=yaml.safe_dump(doc), check=check)


def _denied(proc, stderr: str) -> None:
    """kubectl failed and printed exactly ``stderr`` (kubectl renders a 422 Invalid answer as
    ``The <Kind> "<name>" is invalid: <causes>``; the causes are the webhook's)."""
    assert proc.returncode != 0, proc.stdout
    assert proc.stderr.strip() == stderr, proc.stderr


def test_configurations_are_rendered_from_the_rule_files(served, kubectl):
    port, ca = served.server.port, base64.b64encode(served.tls.ca_pem).decode()
    mutating = _get(kubectl, "mutatingwebhookconfiguration", "gpustack-worker-mutation", "--show-managed-fields")
    validating = _get(kubectl, "validatingwebhookconfiguration", "gpustack-worker-validation", "--show-managed-fields")
    assert "gpustack-worker-mutation" < "kueue-mutating-webhook-configuration"
    for config in (mutating, validating):
        assert config["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "accelpolicy"}
        assert {f["manager"] for f in config["metadata"]["managedFields"]} == {"accelpolicy"}
    table = {w["name"]: (w["rules"][0]["apiGroups"], w["rules"][0]["apiVersions"], w["rules"][0]["resources"],
                         w["rules"][0]["operations"], w["failurePolicy"], w["clientConfig"]["url"])
             for w in mutating["webhooks"] + validating["webhooks"]}
    base = f"https://127.0.0.1:{port}"
    assert table == {   # docs/reference/controller.md "Controller and webhooks" "Serves every admission webhook"
        "instances.mutation.worker.gpustack.ai": (["worker.gpustack.ai"], ["v1"], ["instances"], ["CREATE", "UPDATE"],
                                                  "Fail", f"{base}/mutate-instances"),
        "instancetypes.mutation.worker.gpustack.ai": (["worker.gpustack.ai"], ["v1"], ["instancetypes"],
                                                      ["CREATE", "UPDATE"], "Fail", f"{base}/mutate-instancetypes"),
        "pods.mutation.worker.gpustack.ai": ([""], ["v1"], ["pods"], ["CREATE"], "Fail", f"{base}/mutate-pods"),
        "workloads.mutation.worker.gpustack.ai": (["kueue.x-k8s.io"], ["v1beta2"], ["workloads"], ["CREATE", "UPDATE"],
                                                  "Ignore", f"{base}/mutate-workloads"),
        "instances.validation.worker.gpustack.ai": (["worker.gpustack.ai"], ["v1"], ["instances"],
                                                    ["CREATE", "UPDATE"], "Fail", f"{base}/validate-instances"),
        "instancetypes.validation.worker.gpustack.ai": (["worker.gpustack.ai"], ["v1"], ["instancetypes"],
                                                        ["CREATE", "UPDATE"], "Fail", f"{base}/validate-instancetypes"),
        "instancetypeflavors.validation.worker.gpustack.ai": (["worker.gpustack.ai"], ["v1"], ["instancetypeflavors"],
                                                              ["CREATE", "UPDATE", "DELETE"], "Fail",
                                                              f"{base}/validate-instancetypeflavors"),
        "pods.validation.worker.gpustack.ai": ([""], ["v1"], ["pods"], ["CREATE"], "Fail", f"{base}/validate-pods"),
        "settings.validation.gpustack.ai": (["gpustack.ai"], ["v1"], ["settings"], ["CREATE", "UPDATE", "DELETE"],
                                            "Fail", f"{base}/validate-settings"),
        "policyexceptions.validation.worker.gpustack.ai": (["worker.gpustack.ai"], ["v1"], ["policyexceptions"],
                                                           ["CREATE", "UPDATE"], "Fail",
                                                           f"{base}/validate-policyexceptions"),
    }
    for hook in mutating["webhooks"] + validating["webhooks"]:
        assert hook["clientConfig"]["caBundle"] == ca
        assert (hook["sideEffects"], hook["admissionReviewVersions"], hook["timeoutSeconds"]) == ("None", ["v1"], 10)
        if hook["name"].startswith("pods."):
            assert hook["objectSelector"] == {"matchExpressions": [{"key": "kueue.x-k8s.io/queue-name",
                                                                    "operator": "Exists"}]}
            assert hook["namespaceSelector"] == {"matchExpressions": [{
                "key": "kubernetes.io/metadata.name", "operator": "NotIn",   # decision 17
                "values": [SYSTEM, "kube-system", "kube-public", "kube-node-lease"]}]}
        else:
            assert hook["objectSelector"] == {} and hook["namespaceSelector"] == {}


def test_privileged_instance_is_refused_with_the_troubleshooting_message(served, kubectl):
    t0 = time.monotonic()
    proc = _create(kubectl, _instance("priv-demo", privileged=True))
    FIGURES.setdefault("kubectl create Instance -> denial, seconds", []).append(time.monotonic() - t0)
    _denied(proc, PRIVILEGED_KUBECTL)
    assert _get(kubectl, "instance", "priv-demo", "-n", NS) == {}


def test_pod_with_two_families_is_refused_with_rule_1(served, kubectl):
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "demo", "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": A10G_ENTRANCE}},
           "spec": {"containers": [{"name": "main", "image": "ubuntu:24.04", "resources": {"limits": {
               "nvidia.com/gpu": "1", "nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "20"}}}]}}
    proc = _create(kubectl, pod)
    # the mutating webhook folds first (units, cores), then the validating one answers (docs/reference/controller.md "Pod admission")
    _denied(proc, 'The Pod "demo" is invalid: spec: Forbidden: a Pod may request only one accelerator family, '
                  'found [exclusive sliced]')
    # without the queue label the objectSelector keeps the Pod away from the webhooks
    plain = copy.deepcopy(pod)
    plain["metadata"]["labels"] = {}
    assert _create(kubectl, plain).returncode == 0
    kubectl("delete", "pod", "demo", "-n", NS, "--wait=true")


def test_instance_create_is_defaulted_by_the_mutating_webhook(served, kubectl):
    doc = seed_object("step3-instance-sliced-demo.yaml")
    assert "cpu" not in doc["spec"]["resources"]
    assert _create(kubectl, doc).returncode == 0
    stored = _get(kubectl, "instance", "sliced-demo", "-n", NS)
    # docs/concepts/instances.md "Defaulting", rules/tests/admission/instances.yaml "seed step 3 sliced-demo"
    assert stored["spec"]["resources"] == {"accelerator": "1", "acceleratorSlicedMemoryPercentage": 20,
                                           "acceleratorSlicedCoresPercentage": 100, "cpu": "1", "ram": "12Gi",
                                           "localStorage": "15Gi"}
    assert (stored["spec"]["imagePullPolicy"], stored["spec"]["volumeMount"]) == ("IfNotPresent", "/workspace")
    # the controller's own Pod for it passes the Pod webhooks (queue label set, units folded)
    _, pod = _wait(lambda: _get(kubectl, "pod", "sliced-demo", "-n", NS), bool, what="Pod sliced-demo")
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == A10G_ENTRANCE
    # the fold of docs/reference/controller.md "Pod admission": 20 % of D = 1,600,000 credits (the controller renders no units key)
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu.sliced.units"] == "320k"


def test_a_new_instancetype_is_enriched_and_seen_by_the_instance_webhook(served, kubectl):
    late = _instance("custom-late", type="a10g-12c128g", resources={"accelerator": "1"})
    _denied(_create(kubectl, late), 'The Instance "custom-late" is invalid: spec.type: Not found: "a10g-12c128g"')
    doc = seed_object("step4-instancetype-a10g-12c128g.yaml")
    before = served.view.rebuilds
    session = served.controller.session
    session.call("post", session.ref("InstanceType").path(), body=doc)   # through the API server's webhooks
    seconds, _ = _wait(lambda: served.view().get("InstanceType", "a10g-12c128g"), bool, timeout=20,
                       what="a10g-12c128g in the webhook view")
    FIGURES.setdefault("InstanceType created (API answer) -> webhook view has it, seconds", []).append(seconds)
    assert served.view.rebuilds > before
    stored = _get(kubectl, "instancetype", "a10g-12c128g")
    # rules/tests/admission/instancetypes-settings.yaml "seed step 4 custom type" (docs/concepts/pools-and-flavors.md "InstanceType admission")
    assert stored["metadata"]["labels"]["schedule.gpustack.ai/queue-entrance"] == "gpustack-fnv64-d4c0e6cd72686015"
    assert stored["metadata"]["finalizers"] == ["gpustack.ai/controlled"]
    assert {k: stored["spec"][k] for k in ("manufacturer", "product", "family", "memory", "cores", "generalGroup")} \
        == {"manufacturer": "nvidia", "product": "NVIDIA-A10G", "family": "Ampere", "memory": "24Gi",
            "cores": "10240", "generalGroup": "generic"}
    # now the Instance webhooks find it: admitted, defaulted from its unit resources (docs/concepts/instances.md "Defaulting")
    assert _create(kubectl, late).returncode == 0
    resources = _get(kubectl, "instance", "custom-late", "-n", NS)["spec"]["resources"]
    assert resources == {"accelerator": "1", "cpu": "12", "ram": "128Gi", "localStorage": "15Gi"}


def test_review_latency_through_the_api_server(served, kubectl):
    session = served.controller.session
    path = session.ref("Instance").path(namespace=NS)
    body = _instance("latency-demo", privileged=True)
    for _ in range(7):
        t0 = time.perf_counter()
        with pytest.raises(KubeApiError) as err:
            session.call("post", path, body=body, query={"dryRun": "All"})
        FIGURES.setdefault("API create Instance (dry run) -> webhook denial, seconds", []).append(
            time.perf_counter() - t0)
        assert (err.value.status, err.value.reason, err.value.message) == (
            422, "Invalid", 'admission webhook "instances.validation.worker.gpustack.ai" denied the request: '
                            + PRIVILEGED_MESSAGE.replace('"priv-demo"', '"latency-demo"'))
    for _ in range(3):
        t0 = time.monotonic()
        _denied(_create(kubectl, _instance("priv-demo", privileged=True)), PRIVILEGED_KUBECTL)
        FIGURES.setdefault("kubectl create Instance -> denial, seconds", []).append(time.monotonic() - t0)


def test_allowing_privileged_takes_effect_without_restart(served, kubectl):
    kubectl("-n", SYSTEM, "patch", "setting", "instance-privileged-allowed", "--type", "merge",
            "-p", '{"spec":{"value":"true"}}')
    t0 = time.monotonic()
    seconds, proc = _wait(lambda: _create(kubectl, _instance("priv-demo", privileged=True)),
                          lambda p: p.returncode == 0, what="privileged Instance admitted")
    FIGURES.setdefault("patch Setting -> privileged Instance admitted, seconds", []).append(time.monotonic() - t0)
    assert _get(kubectl, "instance", "priv-demo", "-n", NS)["spec"]["privileged"] is True
    kubectl("-n", SYSTEM, "patch", "setting", "instance-privileged-allowed", "--type", "merge",
            "-p", '{"spec":{"value":"false"}}')


def test_a_drifted_ca_bundle_is_put_back(served, kubectl):
    ca = base64.b64encode(served.tls.ca_pem).decode()
    other = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nnot ours\n-----END CERTIFICATE-----\n").decode()
    kubectl("patch", "validatingwebhookconfiguration", "gpustack-worker-validation", "--type=json",
            "-p", json.dumps([{"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": other}]))
    seconds, config = _wait(lambda: _get(kubectl, "validatingwebhookconfiguration", "gpustack-worker-validation"),
                            lambda c: c["webhooks"][0]["clientConfig"]["caBundle"] == ca, what="caBundle restored")
    FIGURES.setdefault("caBundle edit -> put back, seconds", []).append(seconds)
    assert [w["clientConfig"]["caBundle"] for w in config["webhooks"]] == [ca] * len(config["webhooks"])


def test_stopping_the_controller_leaves_the_registrations(served, kubectl):
    served.stop()
    served.controller.stop()
    assert _get(kubectl, "mutatingwebhookconfiguration", "gpustack-worker-mutation")["webhooks"]
    assert _get(kubectl, "validatingwebhookconfiguration", "gpustack-worker-validation")["webhooks"]
    # failurePolicy Fail with no server: the API server refuses (a restarted controller serves again)
    proc = _create(kubectl, _instance("after-stop"))
    assert proc.returncode != 0
    assert 'failed calling webhook "instances.mutation.worker.gpustack.ai"' in proc.stderr, proc.stderr


def test_the_controller_command_serves_and_registers(sa_kubeconfig, kubectl, tmp_path):
    """`accelpolicy controller --webhook-port 0 --webhook-self-signed DIR`: serves, leads, registers
    (re-pointing the configurations the stopped in-process server left), answers; SIGTERM exits 0."""
    log = tmp_path / "controller.log"
    argv = [str(ACCELPOLICY), "controller", "--kubeconfig", sa_kubeconfig, "--coalesce-seconds", "0.1",
            "--webhook-port", "0", "--webhook-self-signed", str(tmp_path / "tls")]
    with open(log, "w") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, "KUBECONFIG": ""})
    try:
        _wait(lambda: log.read_text(), lambda t: "registered ValidatingWebhookConfiguration" in t or proc.poll() is not None,
              timeout=90, what="registration")
        text = log.read_text()
        assert proc.poll() is None, text
        port = int(re.search(r"serving \S+ at https://127.0.0.1:(\d+)/", text).group(1))
        assert "webhooks ready (watch caches synced)" in text
        ctx = ssl.create_default_context(cafile=str(tmp_path / "tls" / "ca.crt"))
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=ctx, timeout=10) as answer:
            assert answer.status == 200
        hook = _get(kubectl, "validatingwebhookconfiguration", "gpustack-worker-validation")["webhooks"][0]
        assert hook["clientConfig"] == {"url": f"https://127.0.0.1:{port}/validate-instances",
                                        "caBundle": base64.b64encode((tmp_path / "tls" / "ca.crt").read_bytes()).decode()}
        _wait(lambda: _create(kubectl, _instance("priv-demo", privileged=True)),
              lambda p: p.stderr.strip() == PRIVILEGED_KUBECTL, what="the command's webhook answers")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _get(kubectl, "validatingwebhookconfiguration", "gpustack-worker-validation")["webhooks"]


def test_the_admission_process_serves_while_the_controller_only_registers(sa_kubeconfig, kubectl, tmp_path):
    """The chart's layout (docs/availability.md "Admission apart from reconciling"): `accelpolicy admission` serves the webhooks from its own
    caches; `accelpolicy controller --webhook-registration-only` registers them for it. The webhooks keep
    answering while the controller is SIGKILLed; with the admission process gone they fail closed."""
    from testing.localcluster.processes import free_port

    port, tls = free_port(), tmp_path / "tls"
    logs = {name: tmp_path / f"{name}.log" for name in ("admission", "controller")}
    procs = {}
    env = {**os.environ, "KUBECONFIG": ""}
    try:
        with open(logs["admission"], "w") as err:
            procs["admission"] = subprocess.Popen(
                [str(ACCELPOLICY), "admission", "--kubeconfig", sa_kubeconfig, "--webhook-port", str(port), "--webhook-self-signed",
                 str(tls)], stdout=subprocess.DEVNULL, stderr=err, env=env)

        def readyz():
            try:
                ctx = ssl.create_default_context(cafile=str(tls / "ca.crt"))
                with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=ctx, timeout=5) as answer:
                    return answer.status
            except OSError:
                return procs["admission"].poll()
        _wait(readyz, lambda status: status == 200 or procs["admission"].poll() is not None, timeout=90,
              what="admission ready")
        assert procs["admission"].poll() is None, logs["admission"].read_text()
        with open(logs["controller"], "w") as err:
            procs["controller"] = subprocess.Popen(
                [str(ACCELPOLICY), "controller", "--kubeconfig", sa_kubeconfig, "--coalesce-seconds", "0.1",
                 "--webhook-registration-only", "--webhook-url-base", f"https://127.0.0.1:{port}",
                 "--webhook-ca", str(tls / "ca.crt")], stdout=subprocess.DEVNULL, stderr=err, env=env)
        _wait(lambda: logs["controller"].read_text(),
              lambda t: "registered ValidatingWebhookConfiguration gpustack-worker-validation for the admission "
                        "replicas" in t or procs["controller"].poll() is not None, timeout=90, what="registration")
        assert procs["controller"].poll() is None, logs["controller"].read_text()
        hook = _get(kubectl, "validatingwebhookconfiguration", "gpustack-worker-validation")["webhooks"][0]
        assert hook["clientConfig"] == {"url": f"https://127.0.0.1:{port}/validate-instances",
                                        "caBundle": base64.b64encode((tls / "ca.crt").read_bytes()).decode()}
        _wait(lambda: _create(kubectl, _instance("priv-demo", privileged=True)),
              lambda p: p.stderr.strip() == PRIVILEGED_KUBECTL, what="the admission process answers")
        procs["controller"].kill()
        procs["controller"].wait(30)
        _denied(_create(kubectl, _instance("priv-demo", privileged=True)), PRIVILEGED_KUBECTL)  # no controller
        text = logs["admission"].read_text()
        assert "admission ready: 7 kinds listed" in text
        assert "Pod" not in re.findall(r"not watching (\w+)", text)
        procs["admission"].send_signal(signal.SIGTERM)
        assert procs["admission"].wait(30) == 0, logs["admission"].read_text()
        closed = _create(kubectl, _instance("priv-demo", privileged=True))
        assert closed.returncode != 0 and "failed calling webhook" in closed.stderr, closed.stderr
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


def test_identity_warning_names_a_controller_user_the_rules_do_not_allow(served, control_plane):
    assert served.identity_warning() is None   # the ServiceAccount of rules/controller.yaml
    admin = ControllerWebhooks(Controller(connect(control_plane[0].kubeconfig), POLICY, env={}), served.tls)
    assert admin.identity_warning() == (
        "the controller runs as 'accelpolicy-admin', not as one of the controllerUsers "
        "['system:serviceaccount:gpustack-system:gpustack-controller'] of rules/controller.yaml: once "
        "registered, its own webhooks refuse its InstanceTypeFlavor writes and Setting deletes")
