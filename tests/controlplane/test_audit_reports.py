"""The audit's openreports.io Report/ClusterReport objects apply to a real API server (docs/audit.md "Reports (`-o yaml`)").

The CRDs come from their own Go module, github.com/openreports/reports-api (pinned in
e2e/crdsources/go.mod, hashes in its go.sum), fetched into Go's module cache with `go mod download`;
nothing is copied into this tree. The API server validates the objects against those schemas.
"""
from __future__ import annotations

import json

from click.testing import CliRunner

from runtime.cli import main
from testing.localcluster.crds import install_crds, openreports_crds


def test_audit_reports_apply_with_the_crds_from_their_module(kubectl):
    crds = openreports_crds()
    assert sorted(c["metadata"]["name"] for c in crds) == ["clusterreports.openreports.io", "reports.openreports.io"]
    install_crds(kubectl, crds)
    result = CliRunner().invoke(main, ["audit", "--snapshot", "tests/fixtures/seed/common", "--snapshot",
                                       "tests/fixtures/audit/seed-cluster", "-o", "yaml"])
    assert result.exit_code == 1
    kubectl("apply", "--server-side", "--field-manager=accelpolicy-audit", "-f", "-", input=result.stdout)
    report = json.loads(kubectl("get", "reports.openreports.io", "-n", "default", "accelpolicy-audit",
                                "-o", "json").stdout)
    assert report["summary"] == {"pass": 4, "fail": 2, "warn": 1, "error": 1, "skip": 0}
    assert [(r["result"], r["policy"], r["resources"][0]["name"]) for r in report["results"]
            if r["result"] != "pass"] == [
        ("warn", "host-access", "held-privileged"), ("fail", "derived-state", "gpustack-fnv64-6b371caa2da0b799"),
        ("error", "device-ledger", "bad-ledger"), ("fail", "pods-validation", "two-families")]
    cluster = json.loads(kubectl("get", "clusterreports.openreports.io", "accelpolicy-audit", "-o", "json").stdout)
    assert cluster["summary"] == {"pass": 8, "fail": 3, "warn": 1, "error": 0, "skip": 3}


def test_audit_of_a_live_cluster_matches_the_offline_audit_of_its_objects(control_plane):
    """`--kubeconfig` lists every kind accelpolicy reads once; the findings equal those of the same
    objects given as a snapshot (the seed nodes before any reconcile: every derived object missing)."""
    from tests.controlplane.test_controller import _apply_seed_cluster, _clean

    cluster, kubectl = control_plane
    _clean(kubectl)
    _apply_seed_cluster(kubectl)
    try:
        live = CliRunner().invoke(main, ["audit", "--kubeconfig", str(cluster.kubeconfig), "-o", "json"])
        offline = CliRunner().invoke(main, ["audit", "--snapshot", "tests/fixtures/seed/common", "-o", "json"])
        assert live.exit_code == offline.exit_code == 1, live.output
        key = lambda r: (r["result"], r["policy"], r["rule"], r["resource"]["kind"], r["resource"]["name"], r["message"])  # noqa: E731
        ours = [key(r) for r in json.loads(live.stdout) if r["policy"] == "derived-state"]
        theirs = [key(r) for r in json.loads(offline.stdout)]
        assert len(theirs) == 17
        # the shared cluster may hold more Namespaces (other tests'): one LocalQueue each, also missing
        assert [k for k in ours if k[3] != "LocalQueue"] == [k for k in theirs if k[3] != "LocalQueue"]
        assert set(k for k in theirs if k[3] == "LocalQueue") <= set(ours)
    finally:
        _clean(kubectl)
