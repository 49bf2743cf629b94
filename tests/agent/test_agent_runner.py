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
