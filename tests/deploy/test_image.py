"""The container image (deploy/image/): it runs as the non-root user with a read-only root filesystem
and no network, prints the seed's step-1 InstanceType table from the seed fixture, and takes its rules
from a mounted directory (the chart's ConfigMap) over the ones it ships.

Needs the project's docker daemon (e2e/kind/dockerd.sh start); skipped with the reason when there is
none. The image is built (or found) by deploy/image/build.sh, the script behind `make image`.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from runtime.rules.loader import DEFAULT_RULES_DIR
from tests.seedfiles import FIXTURES, seed_table

REPO = Path(__file__).resolve().parents[2]
SEED = FIXTURES / "seed"   # mounted whole: step1/ links to ../common


@pytest.fixture(scope="module")
def image() -> str:
    if shutil.which("docker") is None:
        pytest.skip("no docker client on PATH")
    if subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode != 0:
        pytest.skip("no docker daemon: start the guarded one with `bash e2e/kind/dockerd.sh start`")
    built = subprocess.run(["bash", str(REPO / "deploy/image/build.sh")], capture_output=True, text=True,
                           timeout=1200, cwd=REPO)
    assert built.returncode == 0, built.stderr[-3000:]
    return built.stdout.strip().splitlines()[-1]


def docker_run(image: str, *args: str, mounts: tuple[tuple[Path, str], ...] = ()) -> subprocess.CompletedProcess:
    cmd = ["docker", "run", "--rm", "--read-only", "--network", "none", "--cap-drop", "ALL",
           "--security-opt", "no-new-privileges"]
    for source, target in mounts:
        cmd += ["-v", f"{source}:{target}:ro"]
    return subprocess.run(cmd + [image, *args], capture_output=True, text=True, timeout=120)


def test_the_image_runs_as_the_non_root_user(image):
    config = subprocess.run(["docker", "image", "inspect", "-f", "{{.Config.User}} {{json .Config.Entrypoint}}",
                             image], capture_output=True, text=True, check=True).stdout.strip()
    assert config == '65532:65532 ["accelpolicy"]'
    result = docker_run(image, "--help")
    assert result.returncode == 0, result.stderr
    assert "Usage: accelpolicy" in result.stdout
    for command in ("controller", "agent", "get"):
        assert command in result.stdout


def test_get_instancetypes_on_the_seed_fixture_read_only_and_offline(image):
    result = docker_run(image, "get", "instancetypes", "--snapshot", "/seed/step1", mounts=((SEED, "/seed"),))
    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip("\n") == seed_table("step1-instancetype.txt")


def test_mounted_rules_take_the_place_of_the_shipped_ones(image, tmp_path):
    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules, ignore=shutil.ignore_patterns("tests"))
    path = rules / "pools" / "derivation.yaml"
    path.write_text(path.read_text().replace("fnv64a(name)", "fnv64(name)"))
    rules.chmod(0o755)
    for p in rules.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    result = docker_run(image, "get", "instancetypes", "--snapshot", "/seed/step1", "--rules",
                        "/etc/accelpolicy/rules", mounts=((SEED, "/seed"), (rules, "/etc/accelpolicy/rules")))
    assert result.returncode == 2
    assert "unbound function: fnv64" in result.stderr
