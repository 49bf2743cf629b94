"""The agent loop's pure parts; the loop itself runs against the local control plane in
tests/controlplane/test_agent_live.py."""
from __future__ import annotations

import pytest

from runtime.agent.runner import resolve_allocation_source


def test_allocation_source_resolution(tmp_path):
    sock = tmp_path / "kubelet.sock"
    assert resolve_allocation_source("auto", str(sock)) == "annotation"
    sock.write_text("")
    assert resolve_allocation_source("auto", str(sock)) == "podresources"
    assert resolve_allocation_source("annotation", str(sock)) == "annotation"
    with pytest.raises(ValueError, match="unknown allocation source 'kubelet'"):
        resolve_allocation_source("kubelet", str(sock))


class _Cluster:
    """Just what NodeAgent._maintenance reads of its cluster view."""

    def __init__(self, objects=None, error=None):
        self.objects, self.error = objects or [], error

    def maintenances(self):
        if self.error:
            raise self.error
        return self.objects

    def devices(self):
        return None


def test_the_agent_wakes_at_the_maintenance_expiry_and_applies_none_it_cannot_read(policy):
    from datetime import datetime, timedelta, timezone

    from probes.fake import RecordedBackend, recorded
    from runtime.agent.cluster import MaintenanceUnreadable
    from runtime.agent.runner import NodeAgent
    from tests.agent.conftest import facts
    from tests.agent.test_maintenance import maintenance

    now = datetime(2026, 11, 29, 21, 0, 0, tzinfo=timezone.utc)
    agent = NodeAgent(policy, RecordedBackend(recorded("node-a10g")), "node-a10g", clock=lambda: now)
    service = agent.service
    cluster = _Cluster([maintenance("m", "node-a10g", now + timedelta(seconds=12), ["0"])])
    found, health, moves = service.resolve(policy, cluster, facts("node-a10g"))
    assert (list(found), health, moves) == (["GPU-e0587d2e-127c-4fb8-e2c1-6e517529f575"], {}, [])
    assert service.wake_at == now + timedelta(seconds=12)
    assert service.wait_seconds(30.0) == pytest.approx(12.05)
    assert service.wait_seconds(5.0) == 5.0
    cluster = _Cluster(error=MaintenanceUnreadable("not listed: the server could not find the resource"))
    assert service.maintenance(policy, cluster, facts("node-a10g")) == {}
    assert not agent.log.healthy("maintenance")
    assert service.resolve(policy, cluster, facts("node-a10g"), known=False) == ({}, {}, [])
    assert service.wake_at is None and service.wait_seconds(30.0) == 30.0
