"""The live-cluster source of the one-shot commands, without a cluster (docs/tasks/ask-the-cluster.md):
the list-once reader against the in-memory API of tests/fakeapi.py (pages, the settings Secret by name,
managedFields stripped, a CRD not installed), the errors in Kubernetes' words, AGE and the drift column,
completion.
The same commands against a real API server: tests/controlplane/test_cli_live.py."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import runtime.cli.source as source
from runtime.cli import main
from runtime.kube.listing import ListForbidden, Needs, list_cluster
from runtime.report.tables import KINDS, age_of, drift, human_duration, render
from testing.localcluster.testing import parse_table
from tests.fakeapi import FakeApi

SEED = "tests/fixtures/seed/common"
PLURALS = {"Node": ("v1", "nodes", False), "Secret": ("v1", "secrets", True),
           "InstanceType": ("worker.gpustack.ai/v1", "instancetypes", False)}


def served(objects: dict[str, list[dict]], page: int = 2, forbidden: tuple[str, ...] = ()) -> FakeApi:
    """The in-memory API serving ``objects`` (kind -> items) of the kinds in PLURALS, ``page`` items a
    page; ``forbidden``: kinds a list of is refused."""
    return FakeApi(objects, kinds=PLURALS, page=page, forbidden=forbidden)


def node(name: str) -> dict:
    return {"metadata": {"name": name, "managedFields": [{"manager": "kubelet"}], "labels": {"a": "b"}}}


def test_list_cluster_pages_each_kind_once_gets_the_settings_secret_by_name_and_strips_managed_fields():
    settings = {"metadata": {"name": "gpustack-settings", "namespace": "gpustack-system"}, "data": {}}
    other = {"metadata": {"name": "tls", "namespace": "gpustack-system"}, "data": {"key": "c2VjcmV0"}}
    session = served({"Node": [node(f"n{i}") for i in range(5)], "Secret": [settings, other]})
    read = list_cluster(session, Needs(("Node", "NodeFeature", "Secret"), ("gpustack-system", "gpustack-settings")))
    assert [o["metadata"]["name"] for o in read.objects] == ["n0", "n1", "n2", "n3", "n4", "gpustack-settings"]
    assert all("managedFields" not in o["metadata"] for o in read.objects)
    assert read.objects[0] == {"kind": "Node", "apiVersion": "v1", "metadata": {"name": "n0", "labels": {"a": "b"}}}
    assert read.missing == ["NodeFeature"]
    assert session.calls[0] == ("get", "/api/v1/nodes", {"limit": 500})
    assert [(m, p, q.get("continue")) for m, p, q in session.calls] == [
        ("get", "/api/v1/nodes", None), ("get", "/api/v1/nodes", "2"), ("get", "/api/v1/nodes", "4"),
        ("get", "/api/v1/namespaces/gpustack-system/secrets/gpustack-settings", None)]
    assert read.requests == 4


def test_a_forbidden_list_names_the_verb_and_resource():
    with pytest.raises(ListForbidden) as caught:
        list_cluster(served({}, forbidden=("Node",)), Needs(("Node",)))
    assert (caught.value.verb, caught.value.resource, caught.value.group, caught.value.namespace) == \
        ("list", "nodes", "", None)
    assert source.forbidden_message(caught.value) == (
        'nodes is forbidden: User "someone" cannot list resource "nodes" in API group "" at the cluster scope\n'
        '  missing permission: list nodes (apiGroup "") at the cluster scope; the ClusterRole accelpolicy-viewer '
        'of the chart grants what this command reads (docs/tasks/ask-the-cluster.md)')
    secret = ListForbidden("get", "secrets", "", "gpustack-system", "gpustack-settings", "secrets is forbidden")
    assert source.forbidden_message(secret).splitlines()[1] == (
        "  missing permission: get secrets 'gpustack-settings' (apiGroup \"\") in the namespace gpustack-system; "
        "the ClusterRole accelpolicy-viewer of the chart grants what this command reads "
        "(docs/tasks/ask-the-cluster.md)")


@pytest.fixture
def fake_cluster(monkeypatch):
    """The seed fixture's objects served by the in-memory API to every command (``connect`` replaced)."""
    from runtime.snapshots import read_objects

    docs, _ = read_objects([SEED])
    by_kind: dict[str, list[dict]] = {}
    for doc in docs:
        by_kind.setdefault(doc["kind"], []).append(doc)
    session = served(by_kind, page=3)
    monkeypatch.setattr(source, "connect_or_exit", lambda kubeconfig, context, *_, **__: session)
    monkeypatch.setitem(PLURALS, "NodeFeature", ("nfd.k8s-sigs.io/v1alpha1", "nodefeatures", True))
    monkeypatch.setitem(PLURALS, "Devices", ("worker.gpustack.ai/v1", "devices", False))
    return session


def test_get_on_the_cluster_equals_get_of_the_same_objects_as_files_plus_the_drift_column(fake_cluster):
    live = CliRunner().invoke(main, ["get", "instancetypes"])
    offline = CliRunner().invoke(main, ["get", "instancetypes", "--snapshot", SEED])
    assert live.exit_code == offline.exit_code == 0, live.output
    # the seed cluster before any reconcile: every derived type is missing from the cluster; with no
    # ClusterQueue yet, Kueue reports none Active (a snapshot reads a queue as Kueue soon will: Active)
    headers, rows = parse_table(live.stdout)
    want_headers, want = parse_table(offline.stdout)
    assert headers == want_headers + ["DRIFT"]
    assert rows == [{**row, "PHASE": "Activating", "DRIFT": "missing: derived, not in the cluster"} for row in want]
    assert {row["PHASE"] for row in want} == {"Active"}
    # the same files layered over the cluster: the derived state, as offline (the phases as Kueue's now)
    layered = CliRunner().invoke(main, ["get", "instancetypes", "--cluster", "--snapshot", SEED])
    assert parse_table(layered.stdout) == (want_headers, [{**row, "PHASE": "Activating"} for row in want])
    assert "warning: the server doesn't have a resource type for Workload" not in live.stderr


def test_a_kind_whose_crd_is_missing_is_named_with_what_the_command_still_answers(fake_cluster):
    result = CliRunner().invoke(main, ["explain", "instancetype", "nope"])
    assert result.exit_code == 2
    assert ("warning: the server doesn't have a resource type for Workload (its CRD is not installed): explain "
            "instancetype answers without it (no Workloads admitted or pending in the pools)") in result.stderr


def test_no_kubeconfig_and_an_unreachable_server_in_kubectls_words(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nope.yaml"))
    result = CliRunner().invoke(main, ["get", "instancetypes"])
    assert (result.exit_code, result.stderr) == (2, (
        f"error: no configuration has been provided ({tmp_path}/nope.yaml: Invalid kube-config file. No "
        "configuration found.); give --kubeconfig FILE or set KUBECONFIG, or --snapshot PATH to read files instead\n"))
    config = tmp_path / "config"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "x", "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "x", "user": "u"}}]}))
    result = CliRunner().invoke(main, ["derive", "--kubeconfig", str(config), "--context", "other"])
    assert (result.exit_code, result.stderr) == (2, f'error: context "other" does not exist in {config}\n')
    result = CliRunner().invoke(main, ["audit", "--kubeconfig", str(config)])
    assert (result.exit_code, result.stderr) == (1, (
        "error: the connection to the server https://127.0.0.1:1 was refused - did you specify the right host "
        "or port? (Connection refused)\n"))


def test_age_is_kubectls_human_duration():
    assert [human_duration(s) for s in (-5, -1, 0, 119, 120, 125, 600, 10799, 10800, 3 * 3600 + 60, 8 * 3600,
                                        47 * 3600, 48 * 3600, 49 * 3600, 8 * 86400, 730 * 86400, 731 * 86400,
                                        9 * 365 * 86400)] == \
        ["<invalid>", "0s", "0s", "119s", "2m", "2m5s", "10m", "179m", "3h", "3h1m", "8h", "47h", "2d", "2d1h",
         "8d", "2y", "2y1d", "9y"]
    obj = {"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"}}
    assert age_of(obj, now=1767225600 + 3 * 86400 + 7200) == "3d2h"
    assert age_of({"metadata": {}}) == "<unknown>"


def test_drift_marks_what_the_derived_state_would_change():
    table = next(t for t in KINDS if t.kind == "InstanceType")
    held = [{"metadata": {"name": "a"}, "status": {"phase": "Pending", "entrance": "x"}},
            {"metadata": {"name": "c"}, "status": {"phase": "Ready"}}, {"metadata": {"name": "d"}}]
    derived = [{"metadata": {"name": "a"}, "status": {"phase": "Ready", "entrance": "x"}},
               {"metadata": {"name": "b"}, "status": {"phase": "Ready"}}, {"metadata": {"name": "c"}, "status": {"phase": "Ready"}}]
    objects, marks = drift(table, held, derived)
    assert [o["metadata"]["name"] for o in objects] == ["a", "b", "c", "d"]
    assert marks == ["derived: PHASE=Ready", "missing: derived, not in the cluster", "",
                     "not derived: deleted on reconcile"]
    assert render(table, objects, marks=marks).splitlines()[0].split() == [
        "NAME", "ENTRANCE", "UNIT(CPU/RAM)/STORAGE", "ACCELERATOR(EX/SH/SL/PT)", "CPU", "PHASE", "DRIFT"]
    assert "DRIFT" not in render(table, objects, marks=["", "", "", ""])


def test_completion_scripts_and_names_from_the_cluster(monkeypatch):
    bash = CliRunner().invoke(main, ["completion", "bash"])
    assert bash.exit_code == 0 and "_ACCELPOLICY_COMPLETE=bash_complete" in bash.stdout
    plugin = CliRunner().invoke(main, ["completion", "zsh", "--program", "kubectl-accelpolicy"])
    assert "_KUBECTL_ACCELPOLICY_COMPLETE=zsh_complete" in plugin.stdout and "#compdef kubectl-accelpolicy" in plugin.stdout
    import runtime.kube.session as session_module
    from runtime.cli.completion import names_of

    fake = served({"InstanceType": [{"metadata": {"name": n}} for n in ("gpu-b", "cpu", "gpu-a")]})
    monkeypatch.setattr(session_module, "connect", lambda kubeconfig, context: fake)
    assert names_of("instype", "gpu", None, None) == ["gpu-a", "gpu-b"]
    assert names_of("nosuchkind", "", None, None) == []
    monkeypatch.setattr(session_module, "connect", lambda kubeconfig, context: 1 / 0)
    assert names_of("instancetypes", "", None, None) == []


def test_kubectl_runs_the_plugin_from_path():
    """The `kubectl-accelpolicy` console script (pyproject.toml) is what `kubectl accelpolicy` executes."""
    import os
    import subprocess
    import sys

    from testing.localcluster.kubectl import find_kubectl

    bindir = Path(sys.executable).parent
    if not (bindir / "kubectl-accelpolicy").exists():
        pytest.skip("kubectl-accelpolicy is not installed in this environment (`make install`)")
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run([str(find_kubectl()), "accelpolicy", "get", "instancetypes", "--snapshot", SEED,
                             "--no-headers", "-o", "name"], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == CliRunner().invoke(
        main, ["get", "instancetypes", "--snapshot", SEED, "-o", "name"]).stdout.splitlines()
    usage = subprocess.run([str(bindir / "kubectl-accelpolicy"), "explain", "--help"], capture_output=True,
                           text=True, env=env, timeout=120).stdout
    assert usage.startswith("Usage: kubectl accelpolicy explain [OPTIONS] COMMAND [ARGS]...")


def test_completion_offers_the_clusters_names_through_clicks_protocol(monkeypatch):
    import runtime.kube.session as session_module

    fake = served({"InstanceType": [{"metadata": {"name": n}} for n in ("gpu-b", "cpu")]})
    monkeypatch.setattr(session_module, "connect", lambda kubeconfig, context: fake)
    monkeypatch.setenv("COMP_WORDS", "accelpolicy explain instancetype g")
    monkeypatch.setenv("COMP_CWORD", "3")
    result = CliRunner().invoke(main, [], prog_name="accelpolicy", env={"_ACCELPOLICY_COMPLETE": "bash_complete"})
    assert result.stdout.split() == ["plain,gpu-b"]


def test_snapshot_writes_one_file_per_kind_reads_only_the_settings_secret_and_replays(fake_cluster, tmp_path):
    from runtime.cli.snapshot import file_name

    assert [file_name(k) for k in ("Node", "Devices", "StorageClass", "ResourceClaim")] == \
        ["nodes.yaml", "devices.yaml", "storageclasses.yaml", "resourceclaims.yaml"]
    fake_cluster.objects.setdefault("Secret", []).append(
        {"metadata": {"name": "tls", "namespace": "gpustack-system"}, "data": {"key": "c2VjcmV0"}})
    result = CliRunner().invoke(main, ["snapshot", "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["devices.yaml", "instancetypes.yaml", "nodefeatures.yaml",
                                                         "nodes.yaml", "secrets.yaml"]
    assert [p for _, p, _ in fake_cluster.calls if "/secrets" in p] == \
        ["/api/v1/namespaces/gpustack-system/secrets/gpustack-settings"]
    secrets = yaml.safe_load((tmp_path / "secrets.yaml").read_text())
    assert [s["metadata"]["name"] for s in secrets["items"]] == ["gpustack-settings"] and secrets["kind"] == "List"
    assert result.stderr.startswith(f"warning: the server doesn't have a resource type for Namespace")
    assert result.stderr.splitlines()[-1].startswith(f"wrote {tmp_path}: ")
    replay = CliRunner().invoke(main, ["get", "devices", "--snapshot", str(tmp_path)])
    assert replay.stdout == CliRunner().invoke(main, ["get", "devices"]).stdout


def test_in_a_pod_the_settings_secret_is_read_from_the_pods_namespace(fake_cluster, monkeypatch):
    """rules/settings.yaml namespaceEnv (KUBERNETES_POD_NAMESPACE) names where the Secret lives: it is
    asked for there by name, and the derivation reads it there (the answer equals the offline one)."""
    monkeypatch.setenv("KUBERNETES_POD_NAMESPACE", "ops")
    for secret in fake_cluster.objects["Secret"]:
        secret["metadata"]["namespace"] = "ops"
    result = CliRunner().invoke(main, ["get", "instancetypes", "-o", "name"])
    assert result.exit_code == 0, result.output
    assert [p for _, p, _ in fake_cluster.calls if "/secrets" in p] == ["/api/v1/namespaces/ops/secrets/gpustack-settings"]
    offline = CliRunner().invoke(main, ["get", "instancetypes", "-o", "name", "--snapshot", SEED])
    assert result.stdout == offline.stdout
