"""Smoke test on any backend: CRDs Established and every seed object accepted by the server.

Seed objects are sent with ``--dry-run=server``, so the schemas and admission run on the cluster but
nothing is stored (safe on an existing cluster). The namespaces they live in are created.
"""

from __future__ import annotations

import json

import pytest

from testing.localcluster import our_crds
from testing.localcluster.testing import seed_objects, shared_dir, shared_missing_reason

NEEDED_CRDS = [
    "resourceflavors.kueue.x-k8s.io", "clusterqueues.kueue.x-k8s.io", "localqueues.kueue.x-k8s.io",
    "admissionchecks.kueue.x-k8s.io", "workloads.kueue.x-k8s.io", "nodefeatures.nfd.k8s-sigs.io",
] + [c["metadata"]["name"] for c in our_crds()]


def test_crds_established(cluster):
    items = json.loads(cluster.kubectl.stdout("get", "crd", "-o", "json"))["items"]
    established = {c["metadata"]["name"] for c in items
                   if any(x["type"] == "Established" and x["status"] == "True"
                          for x in c.get("status", {}).get("conditions", []))}
    assert set(NEEDED_CRDS) <= established, sorted(set(NEEDED_CRDS) - established)


def test_seed_objects_accepted(cluster):
    shared = shared_dir()
    if shared is None:
        pytest.skip(shared_missing_reason())
    objs = seed_objects(shared)
    assert len(objs) >= 13
    for ns in sorted({o.namespace for o in objs if o.namespace}):
        cluster.kubectl("create", "namespace", ns, check=False)
    for o in objs:
        out = cluster.kubectl.stdout("apply", "--dry-run=server", "--validate=strict", "-f", str(o.path))
        assert "(server dry run)" in out, f"{o.path}: {out}"
