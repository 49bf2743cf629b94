"""The kind tests' cluster fixture (one cluster for the whole session; see kindcluster.py)."""
from __future__ import annotations

import os

import pytest

from kindcluster import ClusterUnavailable, KindCluster, start_cluster, stop_cluster


@pytest.fixture(scope="session")
def kind_cluster() -> KindCluster:
    try:
        cluster = start_cluster()
    except ClusterUnavailable as exc:
        if os.environ.get("ACCELPOLICY_REQUIRE_KIND"):   # CI: docker present but no cluster is a failure
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    except RuntimeError as exc:
        pytest.fail(str(exc))
    yield cluster
    stop_cluster()
