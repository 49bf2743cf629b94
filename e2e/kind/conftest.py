"""The kind tests' cluster fixture (one cluster for the whole session; see kindcluster.py)."""
from __future__ import annotations

import pytest

from kindcluster import ClusterUnavailable, KindCluster, start_cluster, stop_cluster


@pytest.fixture(scope="session")
def kind_cluster() -> KindCluster:
    try:
        cluster = start_cluster()
    except ClusterUnavailable as exc:
        pytest.skip(str(exc))
    except RuntimeError as exc:
        pytest.fail(str(exc))
    yield cluster
    stop_cluster()
