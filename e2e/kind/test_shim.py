"""e2e/kind/shim/docker: what kind's `docker run`/`docker exec` become, and its refusal without the guard.

A stand-in `docker` placed after the shim on PATH prints the arguments it receives, one per line.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.kind

SHIM_DIR = Path(__file__).resolve().parent / "shim"
NODE_RUN = ["run", "--name", "c-control-plane", "--label", "io.x-k8s.kind.cluster=c", "--privileged",
            "--security-opt", "seccomp=unconfined", "img:tag"]


@pytest.fixture
def echo_docker(tmp_path) -> dict[str, str]:
    fake = tmp_path / "docker"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    fake.chmod(0o755)
    return dict(os.environ, PATH=f"{SHIM_DIR}:{tmp_path}:{os.environ['PATH']}")


def shim(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SHIM_DIR / "docker"), *args], env=env, capture_output=True, text=True, timeout=60)


def test_exec_loses_privileged(echo_docker):
    result = shim(echo_docker, "exec", "--privileged", "-i", "c-worker", "cat", "/kind/version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["exec", "-i", "c-worker", "cat", "/kind/version"]


def test_other_commands_pass_through(echo_docker):
    result = shim(echo_docker, "inspect", "--privileged", "x")
    assert result.stdout.splitlines() == ["inspect", "--privileged", "x"]


def test_run_refused_without_the_guard(echo_docker):
    env = dict(echo_docker, ACCELPOLICY_GUARD_TABLE="accelpolicy_guard_absent")
    result = shim(env, *NODE_RUN)
    assert result.returncode == 1
    assert result.stdout == ""          # the stand-in docker never ran
    assert "network guard incomplete; refusing" in result.stderr


def test_kind_node_run_gets_every_capability_but_sys_resource(echo_docker):
    if subprocess.run(["bash", str(SHIM_DIR.parent / "dockerd.sh"), "check"], capture_output=True).returncode != 0:
        pytest.skip("the live guard and daemon are not up here (bash e2e/kind/dockerd.sh start)")
    result = shim(echo_docker, *NODE_RUN)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "run", "--name", "c-control-plane", "--label", "io.x-k8s.kind.cluster=c",
        "--cap-add=ALL", "--cap-drop=SYS_RESOURCE", "--security-opt", "systempaths=unconfined",
        "--device-cgroup-rule", "a *:* rwm", "--security-opt", "seccomp=unconfined", "img:tag"]
    plain = shim(echo_docker, "run", "--privileged", "other:img")
    assert plain.stdout.splitlines() == ["run", "--privileged", "other:img"]
