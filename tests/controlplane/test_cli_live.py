"""The operator's commands against the live walkthrough cluster (docs/tasks/ask-the-cluster.md).

The seed walkthrough's cluster (testing/localcluster/walkthrough.py: four kwok Nodes, their agents, the
controller) is the cluster in front of the operator. Each command run against it prints what it prints
against ``accelpolicy snapshot`` of it; a what-if file layered over the cluster changes only the rows
of what it changes; with only the chart's ``accelpolicy-viewer`` ClusterRole every command works, and
with one permission less the error names it.
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from runtime.cli import main
from testing.localcluster import LocalCluster, MissingBinariesError
from testing.localcluster.testing import FULL_COMPONENTS, with_crds
from testing.localcluster.walkthrough import Walkthrough, tables_equal

REPO = Path(__file__).resolve().parents[2]
VIEWER_TEMPLATE = REPO / "deploy/chart/templates/viewer-rbac.yaml"
SLICED = str(REPO / "demo/sliced-demo.yaml")
AGE = re.compile(r"(?<= )\d+(s|m\d*s?|h\d*m?|d\d*h?|y\d*d?)(?= |$)", re.M)  # an AGE cell


def run(*args: str, kubeconfig: Path | None = None) -> "CliRunner.Result":
    extra = ["--kubeconfig", str(kubeconfig)] if kubeconfig is not None else []
    return CliRunner().invoke(main, [*args, *extra])


@pytest.fixture(scope="module")
def walk(tmp_path_factory):
    """The walkthrough on a cluster of this module's own (the scheduler, kwok, nfd-master and Kueue, which
    reports the queues Active), stopped afterwards: the seed Nodes it leaves would be in the way of the
    tests sharing ``full_cluster()``, which create them anew."""
    from runtime.engine.pools.kueueconfig import kueue_configuration
    from runtime.engine.policy import Policy
    from runtime.rules.loader import load_rules

    try:
        cluster, _ = with_crds(LocalCluster(scheduler=True, controller_manager=True, components=FULL_COMPONENTS,
                                            kueue_configuration=kueue_configuration(Policy(load_rules()))).start())
    except MissingBinariesError as e:
        pytest.fail(str(e), pytrace=False)
    w = Walkthrough(cluster.kubeconfig, workdir=tmp_path_factory.mktemp("walkthrough"), webhooks=False)
    try:
        w.start()
        deadline = time.monotonic() + 420
        last = None
        while True:   # settled: every seed pool Active (Kueue), no drift, the same twice 3 s apart
            out = run("get", "instancetypes", kubeconfig=cluster.kubeconfig).stdout
            if "DRIFT" not in out and "Activating" not in out and len(out.splitlines()) >= 4 and out == last:
                break
            assert time.monotonic() < deadline, out
            last = out
            time.sleep(3)
        yield w
    finally:
        w.stop()
        cluster.stop()


def viewer_role() -> dict:
    """The chart's accelpolicy-viewer ClusterRole, its template's only Helm expressions filled in."""
    text = VIEWER_TEMPLATE.read_text()
    text = re.sub(r"\{\{-? /\*.*?\*/ -?\}\}\n", "", text, flags=re.S)
    text = re.sub(r"\n\s*\{\{- include \"accelpolicy.labels\" \. \| nindent 4 \}\}", "", text)
    text = text.replace('{{ include "accelpolicy.settingsSecret" . }}', "gpustack-settings")
    return yaml.safe_load(text)


def bound_kubeconfig(kubectl, admin: Path, role: dict, name: str, path: Path) -> Path:
    """A ServiceAccount ``default/<name>`` bound to ``role`` (created as ClusterRole ``<name>``), and a
    kubeconfig of a token of it."""
    role = {**role, "metadata": {"name": name}}
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        role, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": "default"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "default"}]}]}))
    token = kubectl.stdout("-n", "default", "create", "token", name, "--duration=1h").strip()
    config = yaml.safe_load(Path(admin).read_text())
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "local",
        "clusters": [{"name": "local", "cluster": config["clusters"][0]["cluster"]}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": name}}]}))
    return path


COMMANDS = [
    ("get", "instancetypes"), ("get", "instancetypes", "-o", "wide"), ("get", "resourceflavors"),
    ("get", "clusterqueues"), ("get", "localqueues"), ("get", "admissionchecks"), ("get", "instancetypeflavors"),
    ("get", "devices", "-o", "wide"), ("derive",),
    ("explain", "instancetype", "gpustack--nvidia-a10g-linux-amd64"),
    ("explain", "admit", "-f", SLICED), ("admit", "-f", SLICED, "-o", "text"),
    ("audit", "-o", "json"),
]


UID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")  # a review's fresh uid
# a review's clock (the rules' request.time, whole seconds): the live and the snapshot run may fall in two seconds
NOW = re.compile(r'"time": "\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"')


def _same(text: str) -> str:
    return NOW.sub('"time": "<now>"', UID.sub("<uid>", AGE.sub("<age>", text)))


def test_each_command_prints_against_the_cluster_what_it_prints_against_a_snapshot_of_it(walk, tmp_path):
    snap = tmp_path / "snap"
    made = run("snapshot", "-o", str(snap), kubeconfig=walk.kubeconfig)
    assert made.exit_code == 0, made.output
    for args in COMMANDS:
        live = run(*args, kubeconfig=walk.kubeconfig)
        offline = run(*args, "--snapshot", str(snap))
        assert (live.exit_code, _same(live.stdout)) == (offline.exit_code, _same(offline.stdout)), args
        assert live.exit_code in (0, 1) and live.stdout, (args, live.output)
    # what the cluster holds now, as kubectl prints it
    assert run("get", "instancetypes", kubeconfig=walk.kubeconfig).stdout.rstrip() == \
        walk.kubectl.stdout("get", "instancetypes").rstrip()


def test_snapshot_holds_one_file_per_kind_the_settings_secret_alone_and_no_managed_fields(walk, tmp_path):
    made = run("snapshot", "-o", str(tmp_path), kubeconfig=walk.kubeconfig)
    assert made.exit_code == 0, made.output
    secrets = yaml.safe_load((tmp_path / "secrets.yaml").read_text())["items"]
    assert [(s["metadata"]["namespace"], s["metadata"]["name"]) for s in secrets] == [("gpustack-system", "gpustack-settings")]
    assert {"nodes.yaml", "nodefeatures.yaml", "devices.yaml", "instancetypes.yaml", "workloads.yaml"} <= \
        {p.name for p in tmp_path.iterdir()}
    assert "managedFields" not in "".join(p.read_text() for p in tmp_path.iterdir())
    nodes = yaml.safe_load((tmp_path / "nodes.yaml").read_text())["items"]
    assert {"node-a10g", "node-cpu", "node-t4-a", "node-t4-b"} <= {n["metadata"]["name"] for n in nodes}
    assert len(nodes) == len(walk.kubectl.stdout("get", "nodes", "-o", "name").split())


def test_a_what_if_file_over_the_cluster_changes_exactly_the_rows_it_should(walk, tables, tmp_path):
    """The seed's step 2 as a what-if: node-a10g's NodeFeature says managed=false. The table becomes the
    seed's table after that patch (the a10g pool loses its accelerator, the generic pool the node's
    CPU; the T4 row stays), as when the same file is layered over a snapshot of the cluster."""
    snap = tmp_path / "snap"
    assert run("snapshot", "-o", str(snap), kubeconfig=walk.kubeconfig).exit_code == 0
    feature = json.loads(walk.kubectl.stdout("-n", "gpustack-system", "get", "nodefeature",
                                             "node-a10g-gpustack-worker", "-o", "json"))
    feature["spec"]["labels"]["gpustack.ai/managed"] = "false"
    whatif = tmp_path / "whatif.yaml"
    whatif.write_text(yaml.safe_dump(feature))
    before = run("get", "instancetypes", kubeconfig=walk.kubeconfig).stdout.splitlines()
    after = run("get", "instancetypes", "--cluster", "--snapshot", str(whatif), kubeconfig=walk.kubeconfig)
    assert after.exit_code == 0, after.output
    assert tables_equal("\n".join(before), tables["step2-after-readmit"])      # the step 1 table
    assert tables_equal(after.stdout, tables["step2-after-unmanage"]), after.stdout
    changed = {line.split()[0] for line in set(after.stdout.splitlines()) ^ set(before)}
    assert changed == {"gpustack--generic-linux-amd64", "gpustack--nvidia-a10g-linux-amd64"}
    assert after.stdout == run("get", "instancetypes", "--snapshot", str(snap), "--snapshot", str(whatif)).stdout
    # the cluster itself is unchanged
    assert run("get", "instancetypes", kubeconfig=walk.kubeconfig).stdout.splitlines() == before


def test_the_viewer_role_suffices_and_one_permission_less_is_named(walk, tmp_path):
    admin = walk.kubeconfig
    viewer = bound_kubeconfig(walk.kubectl, admin, viewer_role(), "accelpolicy-viewer-test", tmp_path / "viewer")
    for args in COMMANDS:
        as_admin, as_viewer = run(*args, kubeconfig=admin), run(*args, kubeconfig=viewer)
        assert (as_viewer.exit_code, _same(as_viewer.stdout)) == (as_admin.exit_code, _same(as_admin.stdout)), \
            (args, as_viewer.output)
    assert run("snapshot", "-o", str(tmp_path / "snap"), kubeconfig=viewer).exit_code == 0
    role = viewer_role()
    role["rules"] = [r for r in role["rules"] if r["resources"] != ["nodefeatures"]]
    less = bound_kubeconfig(walk.kubectl, admin, role, "accelpolicy-less-test", tmp_path / "less")
    result = run("get", "instancetypes", kubeconfig=less)
    assert result.exit_code == 2
    assert result.stderr == (
        'error: nodefeatures.nfd.k8s-sigs.io is forbidden: User "system:serviceaccount:default:accelpolicy-less-test" '
        'cannot list resource "nodefeatures" in API group "nfd.k8s-sigs.io" at the cluster scope\n'
        '  missing permission: list nodefeatures (apiGroup nfd.k8s-sigs.io) at the cluster scope; the ClusterRole '
        'accelpolicy-viewer of the chart grants what this command reads (docs/tasks/ask-the-cluster.md)\n')


def test_explain_instancetype_adds_the_pools_workloads(walk):
    """The seed's step 3 Instance (a 20 % slice on the a10g pool): its Pod's Workload is admitted in the
    pool, and the check gpustack-node-devices answered Ready on it (last: it changes the cluster)."""
    a10g = "gpustack--nvidia-a10g-linux-amd64"
    assert json.loads(run("explain", "instancetype", a10g, "-o", "json", kubeconfig=walk.kubeconfig).stdout)[
        "workloads"] == []
    walk.kubectl("apply", "-f", SLICED)
    try:
        deadline = time.monotonic() + 240
        while True:
            result = run("explain", "instancetype", a10g, "-o", "json", kubeconfig=walk.kubeconfig)
            assert result.exit_code == 0, result.output
            workloads = json.loads(result.stdout)["workloads"]
            if [w["state"] for w in workloads] == ["admitted"]:
                break
            assert time.monotonic() < deadline, workloads
            time.sleep(3)
        (workload,) = workloads
        assert workload["namespace"] == "default" and workload["check"]["state"] == "Ready", workload
        text = run("explain", "instancetype", a10g, kubeconfig=walk.kubeconfig).stdout.splitlines()
        at = text.index("workloads (Kueue, live):")
        assert text[at + 1] == f"  default/{workload['name']}: admitted; check Ready: {workload['check']['message']}"
        # the other pools hold none of it
        t4 = json.loads(run("explain", "instancetype", "gpustack--nvidia-tesla-t4-linux-amd64", "-o", "json",
                            kubeconfig=walk.kubeconfig).stdout)
        assert t4["workloads"] == []
    finally:
        walk.kubectl("delete", "-f", SLICED, "--wait=false")


def test_diff_tries_an_edit_on_the_cluster_as_on_a_snapshot_of_it(walk, tmp_path):
    """``accelpolicy diff --rules NEW`` without --snapshot: the reload gate's trial on the live cluster,
    the same lines as on a snapshot of it; the viewer role suffices."""
    import shutil

    from runtime.rules.loader import DEFAULT_RULES_DIR

    edited = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, edited, ignore=shutil.ignore_patterns("tests"))
    constants = edited / "constants.yaml"
    assert "sharesPerAccelerator: 10 " in constants.read_text()
    constants.write_text(constants.read_text().replace("sharesPerAccelerator: 10 ", "sharesPerAccelerator: 20 "))
    snap = tmp_path / "snap"
    assert run("snapshot", "-o", str(snap), kubeconfig=walk.kubeconfig).exit_code == 0
    live = run("diff", "--rules", str(edited), kubeconfig=walk.kubeconfig)
    offline = run("diff", "--rules", str(edited), "--snapshot", str(snap))
    assert (live.exit_code, live.stdout) == (offline.exit_code, offline.stdout) == (1, live.stdout)
    assert any(line.startswith('  changed InstanceType gpustack--nvidia-a10g-linux-amd64: '
                               'status.acceleratorShared.capacity: "10" -> "20", ') for line in live.stdout.splitlines())
    viewer = bound_kubeconfig(walk.kubectl, walk.kubeconfig, viewer_role(), "accelpolicy-viewer-diff", tmp_path / "v")
    as_viewer = run("diff", "--rules", str(edited), kubeconfig=viewer)
    assert (as_viewer.exit_code, as_viewer.stdout) == (1, live.stdout), as_viewer.output
