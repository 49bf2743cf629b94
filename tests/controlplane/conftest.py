"""Fixtures for tests on a real kube-apiserver + etcd (marker ``controlplane``).

One cluster serves the whole pytest process (``session_cluster``; e2e's local backend shares it).
Tests must therefore set up the state they assert on (e.g. replace every object of a kind) and not
assume an empty cluster; modules run one after another, never concurrently.
"""

from __future__ import annotations

import pytest

from testing.localcluster import Kubectl, LocalCluster, MissingBinariesError
from testing.localcluster.testing import SeedObject, seed_objects, seed_tables, session_cluster, shared_dir, \
    shared_missing_reason


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/controlplane/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.controlplane)


@pytest.fixture(scope="session")
def control_plane() -> tuple[LocalCluster, Kubectl]:
    """The process-wide local control plane with Kueue, NFD and our CRDs Established.

    Missing binaries fail (not skip) with the "run `make controlplane`" message: `make test`
    builds them first, so their absence is a real error.
    """
    try:
        return session_cluster()
    except MissingBinariesError as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="session")
def kubectl(control_plane) -> Kubectl:
    return control_plane[1]


@pytest.fixture(scope="session")
def shared():
    d = shared_dir()
    if d is None:
        pytest.skip(shared_missing_reason())
    return d


@pytest.fixture(scope="session")
def seed(shared) -> list[SeedObject]:
    return seed_objects(shared)


@pytest.fixture(scope="session")
def tables(shared) -> dict[str, str]:
    return seed_tables(shared)
