"""The chart's least-privilege RBAC and the shared serving certificate on a real API server
(``--authorization-mode=RBAC``): the controller and the agent run as the chart's ServiceAccounts with
only the chart's Roles, do their whole job, and are never refused."""
from __future__ import annotations

import base64
import json
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from runtime.controller.servingcert import ServingCertificate, issue, rotation_reason
from runtime.kube.session import connect
from tests.controlplane.test_controller import _apply_seed_cluster, _clean, rows
from tests.deploy.test_chart import render

ACCELPOLICY = Path(sys.executable).parent / "accelpolicy"
REPO = Path(__file__).resolve().parents[2]
NS = "gpustack-system"
TLS_SECRET = "gpustack-operator-worker-webhook-tls"
CA_CONFIGMAP = "gpustack-operator-worker-webhook-ca"
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
WEBHOOK_CONFIGS = (("mutatingwebhookconfiguration", "gpustack-worker-mutation"),
                   ("validatingwebhookconfiguration", "gpustack-worker-validation"))


def _cleanup_webhooks(kubectl) -> None:
    for kind, name in WEBHOOK_CONFIGS:
        kubectl("delete", kind, name, "--ignore-not-found")
    kubectl("delete", "secret", TLS_SECRET, "-n", NS, "--ignore-not-found")
    kubectl("delete", "configmap", CA_CONFIGMAP, "-n", NS, "--ignore-not-found")


@pytest.fixture(scope="module")
def chart_rbac(control_plane, tmp_path_factory):
    """The seed cluster plus the chart's ServiceAccounts, ClusterRoles, Roles and bindings."""
    cluster, kubectl = control_plane
    _clean(kubectl)
    _cleanup_webhooks(kubectl)
    _apply_seed_cluster(kubectl)
    docs = [d for d in render() if d["kind"] in RBAC_KINDS]
    manifest = tmp_path_factory.mktemp("rbac") / "rbac.yaml"
    manifest.write_text(yaml.safe_dump_all(docs))
    kubectl("apply", "-f", str(manifest))
    yield cluster, kubectl
    _cleanup_webhooks(kubectl)
    kubectl("delete", "-f", str(manifest), "--ignore-not-found")
    _clean(kubectl)


def test_helm_install_and_uninstall_on_the_api_server(control_plane):
    """The API server accepts every object of the chart (schemas, field names), and uninstall removes
    them (the CRDs stay, as Helm leaves crds/ alone)."""
    from tests.deploy.test_chart import CHART, helm

    cluster, kubectl = control_plane
    kubectl("create", "namespace", NS, check=False)
    env = ["--kubeconfig", str(cluster.kubeconfig), "-n", NS]
    # crds.install=false: this API server holds our CRDs already, applied without Helm (testing.localcluster)
    installed = helm("install", "accelpolicy-live", str(CHART), *env, "--set", "agent.backend=fake",
                     "--set", "crds.install=false",
                     "--set-json", 'agent.recordedFacts={"node-a10g": {"node": "node-a10g"}}', check=False)
    try:
        assert installed.returncode == 0, installed.stderr
        for kind, name in (("deployment", "gpustack-operator-worker"), ("daemonset", "gpustack-operator-device-manager"),
                           ("validatingadmissionpolicy", "accelpolicy-agent-node"),
                           ("service", "gpustack-operator-worker"), ("poddisruptionbudget", "gpustack-operator-worker"),
                           ("configmap", "accelpolicy-rules"), ("role", "gpustack-operator-worker")):
            assert kubectl("get", kind, name, "-n", NS, check=False).returncode == 0, (kind, name)
        assert kubectl("get", "clusterrole", "gpustack-operator-worker", check=False).returncode == 0
    finally:
        removed = helm("uninstall", "accelpolicy-live", *env, "--wait", check=False)
    assert removed.returncode == 0, removed.stderr
    assert kubectl("get", "deployment", "gpustack-operator-worker", "-n", NS, check=False).returncode != 0
    assert kubectl("get", "clusterrole", "gpustack-operator-worker", check=False).returncode != 0


def test_kueue_and_nfd_manifests_are_accepted_by_the_api_server(control_plane, tmp_path):
    """deploy/components/render.py's output passes the API server's validation (server-side dry run)."""
    cluster, kubectl = control_plane
    proc = subprocess.run([sys.executable, str(REPO / "deploy/components/render.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for name in ("kueue", "nfd"):
        docs = [d for d in yaml.safe_load_all((tmp_path / f"{name}.yaml").read_text()) if d]
        kubectl("create", "namespace", docs[0]["metadata"]["name"], check=False)
        result = kubectl("apply", "--dry-run=server", "--server-side", "--force-conflicts", "-f",
                         str(tmp_path / f"{name}.yaml"), check=False)
        assert result.returncode == 0, result.stderr
        assert result.stdout.count("serverside-applied (server dry run)") == len(docs)


def _sa_kubeconfig(cluster, kubectl, account: str, path: Path) -> Path:
    """A kubeconfig of ``account``'s token, self-contained (the CA embedded)."""
    token = kubectl.stdout("create", "token", account, "-n", NS, "--duration", "1h").strip()
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    clusters = [{"name": c["name"], "cluster": {
        "server": c["cluster"]["server"],
        "certificate-authority-data": base64.b64encode(Path(c["cluster"]["certificate-authority"]).read_bytes())
        .decode()}} for c in admin["clusters"]]
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "clusters": clusters,
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": account, "context": {"cluster": admin["clusters"][0]["name"], "user": account}}],
        "current-context": account}))
    return path


def _presented(port: int, ca_pem: bytes) -> int | None:
    """Serial of the certificate the server on 127.0.0.1:``port`` presents, when ``ca_pem`` verifies it."""
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    ctx.check_hostname = False
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, ctx.wrap_socket(raw) as tls:
            return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True)).serial_number
    except ssl.SSLError:
        return None


def _manage_a10g(kubectl, managed: str, cpu: str, proc, lines: list[str]) -> None:
    """Set node-a10g's managed label (its NodeFeature) and wait for the first InstanceType row's CPU."""
    kubectl("-n", NS, "patch", "nodefeature", "node-a10g-gpustack-worker", "--type=merge",
            "-p", json.dumps({"spec": {"labels": {"gpustack.ai/managed": managed}}}))
    deadline = time.monotonic() + 30
    while [r["CPU"] for r in rows(kubectl)][:1] != [cpu]:
        assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)
        time.sleep(0.2)


def _refusals(text: str) -> list[str]:
    return [line for line in text.splitlines() if "forbidden" in line.lower() or " 403 " in line]


def test_the_controller_does_its_job_with_the_charts_rbac_alone(chart_rbac, tmp_path):
    cluster, kubectl = chart_rbac
    config = _sa_kubeconfig(cluster, kubectl, "gpustack-controller", tmp_path / "controller.kubeconfig")
    once = subprocess.run([str(ACCELPOLICY), "controller", "--kubeconfig", str(config), "--once",
                           "--audit-interval", "0"],
                          capture_output=True, text=True, timeout=120)
    assert once.returncode == 0, once.stderr
    assert _refusals(once.stdout + once.stderr) == []
    assert "create InstanceType gpustack--nvidia-a10g-linux-amd64" in once.stdout.splitlines()
    assert [r["CPU"] for r in rows(kubectl)] == ["48/72", "0/0", "0/0"]

    # leader election, webhook registration and the shared serving certificate, as the ServiceAccount
    proc = subprocess.Popen([str(ACCELPOLICY), "controller", "--kubeconfig", str(config), "--identity", "rbac-a",
                             "--webhook-port", "0", "--webhook-cert-secret", TLS_SECRET,
                             "--webhook-cert-dir", str(tmp_path / "tls"), "--coalesce-seconds", "0.1",
                             # as the chart runs it: the configurations owned by its ClusterRole (watched by
                             # name), the CA certificate published for clients
                             "--webhook-owner-clusterrole", "gpustack-operator-worker",
                             "--webhook-ca-configmap", CA_CONFIGMAP,
                             "--audit-interval", "0",  # as the chart runs it (values.yaml auditInterval)
                             "--webhook-cert-check-seconds", "0.5"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while not any("registered ValidatingWebhookConfiguration" in line for line in lines):
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.2)
        # a write through the registered webhooks, admitted: un-manage node-a10g and see the table follow
        _manage_a10g(kubectl, "false", "48/68", proc, lines)
        secret = json.loads(kubectl.stdout("get", "secret", TLS_SECRET, "-n", NS, "-o", "json"))
        assert secret["type"] == "kubernetes.io/tls"
        ca = base64.b64decode(secret["data"]["ca.crt"])
        owner = json.loads(kubectl.stdout("get", "clusterrole", "gpustack-operator-worker", "-o", "json"))
        for kind, name in WEBHOOK_CONFIGS:
            registered = json.loads(kubectl.stdout("get", kind, name, "-o", "json"))
            assert {base64.b64decode(w["clientConfig"]["caBundle"]) for w in registered["webhooks"]} == {ca}
            assert registered["metadata"]["ownerReferences"] == [
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "name": "gpustack-operator-worker",
                 "uid": owner["metadata"]["uid"]}]
        published = json.loads(kubectl.stdout("get", "configmap", CA_CONFIGMAP, "-n", NS, "-o", "json"))
        assert published["data"] == {"ca.crt": ca.decode()}   # the CA certificate only, never a key
        assert (tmp_path / "tls" / "tls.crt").read_bytes() == base64.b64decode(secret["data"]["tls.crt"])

        # someone else (e.g. cert-manager) puts a certificate of another CA into the Secret: the running
        # server presents it and the leader registers the new caBundle, without a restart
        port = int(next(re.search(r"https://127\.0\.0\.1:(\d+)/", line).group(1) for line in lines
                        if "serving " in line and "https://127.0.0.1:" in line))
        new = issue(("127.0.0.1", "localhost"), days=90)
        kubectl("-n", NS, "patch", "secret", TLS_SECRET, "--type=merge", "-p", json.dumps(
            {"data": {k: base64.b64encode(v).decode() for k, v in new.items()}}))
        deadline = time.monotonic() + 30
        while _presented(port, new["ca.crt"]) != x509.load_pem_x509_certificate(new["tls.crt"]).serial_number or \
                any({base64.b64decode(w["clientConfig"]["caBundle"]) for w in json.loads(
                    kubectl.stdout("get", kind, name, "-o", "json"))["webhooks"]} != {new["ca.crt"]}
                    for kind, name in WEBHOOK_CONFIGS):
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.3)
        deadline = time.monotonic() + 30   # the leader publishes the new CA certificate too
        while json.loads(kubectl.stdout("get", "configmap", CA_CONFIGMAP, "-n", NS, "-o", "json"))["data"] != \
                {"ca.crt": new["ca.crt"].decode()}:
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.3)
        # the API server reaches the webhooks with the new bundle: a reviewed write goes through
        _manage_a10g(kubectl, "true", "48/72", proc, lines)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(20)
        reader.join(5)
        kubectl("-n", NS, "patch", "nodefeature", "node-a10g-gpustack-worker", "--type=merge",
                "-p", '{"spec":{"labels":{"gpustack.ai/managed":"true"}}}')
        _cleanup_webhooks(kubectl)
    assert code == 0, "".join(lines)
    assert _refusals("".join(lines)) == []


def test_the_agent_does_its_job_with_the_charts_rbac_alone(chart_rbac, tmp_path):
    cluster, kubectl = chart_rbac
    config = _sa_kubeconfig(cluster, kubectl, "gpustack-device-manager", tmp_path / "agent.kubeconfig")
    kubectl("delete", "nodefeatures.nfd.k8s-sigs.io", "-n", NS, "node-a10g-gpustack-worker",
            "node-a10g-gpustack-device-manager", "--ignore-not-found")
    kubectl("delete", "devices.worker.gpustack.ai", "node-a10g", "--ignore-not-found")
    result = subprocess.run([str(ACCELPOLICY), "agent", "--kubeconfig", str(config), "--once", "--node", "node-a10g",
                             "--backend", "fake", "--facts", str(REPO / "probes/recorded/node-a10g.yaml"),
                             "--allocation-source", "annotation"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert _refusals(result.stdout + result.stderr) == []
    assert "created NodeFeature node-a10g-gpustack-worker" in result.stderr
    assert "created Devices node-a10g" in result.stderr
    devices = json.loads(kubectl.stdout("get", "devices.worker.gpustack.ai", "node-a10g", "-o", "json"))
    assert devices["status"]  # the ledger went through the status subresource


def test_the_serving_certificate_is_created_once_and_rotated_by_the_leader_only(control_plane, tmp_path):
    cluster, kubectl = control_plane
    kubectl("create", "namespace", NS, check=False)
    kubectl("delete", "secret", TLS_SECRET, "-n", NS, "--ignore-not-found")
    session = connect(cluster.kubeconfig)
    names = ("127.0.0.1", "localhost")
    a = ServingCertificate(session, NS, TLS_SECRET, names, tmp_path / "a")
    b = ServingCertificate(session, NS, TLS_SECRET, names, tmp_path / "b")
    try:
        first = a.ensure(wait_seconds=10)
        assert b.ensure(wait_seconds=10)["tls.crt"] == first["tls.crt"]   # the second replica reads it
        assert (tmp_path / "b" / "tls.crt").read_bytes() == first["tls.crt"]
        assert a.check() is None and b.check() is None                    # nothing due
        # the Service names change: only the leader re-issues
        a.names = b.names = ("127.0.0.1", "localhost", "gpustack-operator-worker.gpustack-system.svc")
        assert b.check() is None
        a.leading.set()
        assert a.check() == f"rotated (names {sorted(names)} differ from {sorted(a.names)})"
        seen: list[bytes] = []
        b.listeners.append(lambda data: seen.append(data["tls.crt"]))
        assert b.check() == "reloaded" and seen == [a.data["tls.crt"]]
        leaf = x509.load_pem_x509_certificate((tmp_path / "b" / "tls.crt").read_bytes())
        assert "gpustack-operator-worker.gpustack-system.svc" in [
            str(n) for n in leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            .get_values_for_type(x509.DNSName)]
        assert rotation_reason(a.data, a.names, a.days, a.renew_days) is None
        assert a.data["ca.crt"] == first["ca.crt"]   # same CA: caBundle unchanged
        # external mode (cert-manager) never writes
        kubectl("delete", "secret", TLS_SECRET, "-n", NS)
        external = ServingCertificate(session, NS, TLS_SECRET, names, tmp_path / "c", manage=False)
        with pytest.raises(TimeoutError, match=f"Secret {NS}/{TLS_SECRET} with ca.crt, tls.crt and tls.key"):
            external.ensure(wait_seconds=2)
        assert kubectl("get", "secret", TLS_SECRET, "-n", NS, check=False).returncode != 0
    finally:
        kubectl("delete", "secret", TLS_SECRET, "-n", NS, "--ignore-not-found")


def test_the_image_runs_controller_and_agent_read_only_as_the_service_accounts(chart_rbac, tmp_path):
    """The image (deploy/image/build.sh) against the API server on 127.0.0.1 (host network only for
    that): non-root, read-only root filesystem, no capabilities, the chart's RBAC."""
    import shutil

    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        pytest.skip("no docker daemon: start the guarded one with `bash e2e/kind/dockerd.sh start`")
    built = subprocess.run(["bash", str(REPO / "deploy/image/build.sh")], capture_output=True, text=True,
                           timeout=1200, cwd=REPO)
    assert built.returncode == 0, built.stderr[-3000:]
    image = built.stdout.split()[-1]
    cluster, kubectl = chart_rbac
    tmp_path.chmod(0o755)  # mounted at /cfg for uid 65532
    for account in ("gpustack-controller", "gpustack-device-manager"):
        _sa_kubeconfig(cluster, kubectl, account, tmp_path / f"{account}.kubeconfig").chmod(0o644)
    base = ["docker", "run", "--rm", "--read-only", "--network", "host", "--cap-drop", "ALL",
            "--security-opt", "no-new-privileges", "--tmpfs", "/tmp",   # the chart's /tmp emptyDir
            "-v", f"{tmp_path}:/cfg:ro",
            "-v", f"{REPO / 'probes/recorded'}:/facts:ro"]
    controller = subprocess.run(base + [image, "controller", "--kubeconfig", "/cfg/gpustack-controller.kubeconfig",
                                        "--once"], capture_output=True, text=True, timeout=180)
    assert controller.returncode == 0, controller.stderr
    assert _refusals(controller.stdout + controller.stderr) == []
    assert [r["CPU"] for r in rows(kubectl)] == ["48/72", "0/0", "0/0"]
    agent = subprocess.run(base + [image, "agent", "--kubeconfig", "/cfg/gpustack-device-manager.kubeconfig",
                                   "--once", "--node", "node-a10g", "--backend", "fake",
                                   "--facts", "/facts/node-a10g.yaml", "--allocation-source", "annotation"],
                           capture_output=True, text=True, timeout=180)
    assert agent.returncode == 0, agent.stderr
    assert _refusals(agent.stdout + agent.stderr) == []


def test_an_agent_that_may_not_read_the_settings_secret_plans_with_defaults(chart_rbac, tmp_path):
    """The chart's agent ClusterRole and its NodeFeature rule, but no Secret rule: the settings watch is
    refused (403) and the agent still does its job on the default settings, with a warning naming the
    Secret and the refusal (docs/agent.md "Labels, annotations and NodeFeatures"), instead of failing every pass."""
    cluster, kubectl = chart_rbac
    account = "agent-without-secrets"
    rbac = [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": NS}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": account},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": "gpustack-operator-device-manager"},
             "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": NS}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": account, "namespace": NS},
             "rules": [{"apiGroups": ["nfd.k8s-sigs.io"], "resources": ["nodefeatures"],
                        "verbs": ["create", "delete", "get", "list", "update", "watch"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": account, "namespace": NS},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
             "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": NS}]}]
    manifest = tmp_path / "rbac.yaml"
    manifest.write_text(yaml.safe_dump_all(rbac))
    kubectl("apply", "-f", str(manifest))
    try:
        config = _sa_kubeconfig(cluster, kubectl, account, tmp_path / "agent.kubeconfig")
        kubectl("delete", "devices.worker.gpustack.ai", "node-a10g", "--ignore-not-found")
        result = subprocess.run([str(ACCELPOLICY), "agent", "--kubeconfig", str(config), "--once", "--node",
                                 "node-a10g", "--backend", "fake", "--facts",
                                 str(REPO / "probes/recorded/node-a10g.yaml"), "--allocation-source", "annotation"],
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        warning = next(ln for ln in result.stderr.splitlines()
                       if "cannot read Secret gpustack-system/gpustack-settings, using defaults: not listed:" in ln)
        assert "403" in warning and "forbidden" in warning.lower(), warning
        assert "created Devices node-a10g" in result.stderr
    finally:
        kubectl("delete", "-f", str(manifest), "--ignore-not-found")
