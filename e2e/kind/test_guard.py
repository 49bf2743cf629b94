"""The network guard of e2e/kind/dockerd.sh (docs/tasks/e2e.md "The offline kind cluster"; COMMON network rule).

``check`` must refuse, naming the missing piece, when the nftables table is absent or IPv4 forwarding is
on (both forced with the script's overrides, so the host's real guard is untouched), and must pass
against the live guard when this machine can run the docker daemon.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.kind

HERE = Path(__file__).resolve().parent
DOCKERD_SH = HERE / "dockerd.sh"


def run_check(**env_overrides: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, **env_overrides)
    return subprocess.run(["bash", str(DOCKERD_SH), "check"], env=env, capture_output=True, text=True, timeout=60)


def test_check_refuses_when_the_guard_table_is_missing():
    result = run_check(ACCELPOLICY_GUARD_TABLE="accelpolicy_guard_absent")
    assert result.returncode == 1
    assert "network guard incomplete; refusing" in result.stderr
    if shutil.which("nft", path="/usr/sbin:/usr/bin:/sbin:/bin"):
        assert ("nftables table inet accelpolicy_guard_absent is missing "
                "(forwarded packets from docker bridges are not dropped)") in result.stderr
    else:
        assert "nft not installed" in result.stderr


def test_check_refuses_when_ip_forward_is_on(tmp_path):
    fake = tmp_path / "ip_forward"
    fake.write_text("1\n")
    result = run_check(ACCELPOLICY_IP_FORWARD_FILE=str(fake))
    assert result.returncode == 1
    assert f"net.ipv4.ip_forward is '1' in {fake} (must be 0)" in result.stderr


def docker_startable() -> str | None:
    """None when dockerd.sh can give us a guarded daemon, else the reason."""
    if os.geteuid() != 0:
        return "dockerd.sh needs root (sysctl, nftables, dockerd)"
    start = subprocess.run(["bash", str(DOCKERD_SH), "start"], capture_output=True, text=True, timeout=600)
    if start.returncode != 0:
        return f"docker cannot be started here: {start.stderr.strip()[-400:]}"
    return None


def test_live_guard_is_in_place_before_containers():
    reason = docker_startable()
    if reason:
        pytest.skip(reason)
    assert Path("/proc/sys/net/ipv4/ip_forward").read_text().strip() == "0"
    assert Path("/proc/sys/net/ipv6/conf/all/forwarding").read_text().strip() == "0"
    result = run_check()
    assert result.returncode == 0, result.stderr
    assert "dockerd pid" in result.stdout and "--ip-forward=false --iptables=true, no mirrors" in result.stdout
    listing = subprocess.run(["nft", "list", "table", "inet", "accelpolicy_guard"], capture_output=True,
                             text=True, check=True).stdout
    assert 'iifname "br-*" oifname != "docker0" oifname != "br-*" counter packets' in listing
    assert 'iifname "docker0" oifname != "docker0" oifname != "br-*" counter packets' in listing
