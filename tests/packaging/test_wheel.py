"""The wheel `pip wheel .` builds is the whole product and only the product: it carries rules/ as package
data and no test harness, and installed into a fresh venv outside the checkout it prints the seed's
step-1 `kubectl get instancetypes` table from its own rules (docs/architecture.md "Which package holds what").

Nothing downloads: the wheel is built without build isolation (setuptools from the project venv, a
`test` extra) and installed with ``--no-deps`` into a venv that reads the project venv's
site-packages for the dependencies (a ``.pth`` line: the dependencies only, never the editable
checkout, whose finder is not activated from there).
"""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.seedfiles import FIXTURES, REPO, seed_table

pytestmark = pytest.mark.wheel


def _run(argv, cwd, **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ACCELPOLICY_RULES")}
    return subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, env=env, timeout=600, **kw)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv bin directory, wheel path, a cwd outside the checkout) of the wheel built from this checkout."""
    tmp = tmp_path_factory.mktemp("wheel")
    assert REPO not in tmp.parents
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", REPO,
                  "-w", tmp / "dist"], cwd=tmp)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (tmp / "dist").glob("accelpolicy-*.whl")
    venv = tmp / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=tmp)
    assert made.returncode == 0, made.stderr
    site = Path(_run([venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     cwd=tmp).stdout.strip())
    (site / "project-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = _run([sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "--no-deps",
                      "--no-index", "-q", wheel], cwd=tmp)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    work = tmp / "elsewhere"
    work.mkdir()
    return venv / "bin", wheel, work


def test_the_wheel_holds_the_rules_and_no_harness(installed):
    _, wheel, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    rules = sorted(str(p.relative_to(REPO)) for p in (REPO / "rules").rglob("*.yaml"))
    assert [n for n in rules if n not in names] == []
    assert "rules/README.md" in names and "runtime/cli/__init__.py" in names
    tops = {n.split("/", 1)[0] for n in names if not n.startswith("accelpolicy-")}
    assert tops == {"runtime", "probes", "rules"}
    assert [n for n in names if "localcluster" in n or "testing/" in n] == []


def test_installed_get_instancetypes_prints_the_seed_table_from_its_own_rules(installed):
    bin_dir, _, work = installed
    where = _run([bin_dir / "python", "-c", "import runtime, rules; from runtime.rules.loader import DEFAULT_RULES_DIR;"
                  " print(runtime.__file__); print(DEFAULT_RULES_DIR)"], cwd=work)
    runtime_file, rules_dir = where.stdout.split()
    assert Path(runtime_file).is_relative_to(bin_dir.parent) and Path(rules_dir).is_relative_to(bin_dir.parent)
    result = _run([bin_dir / "accelpolicy", "get", "instancetypes", "--snapshot", FIXTURES / "seed" / "step1"],
                  cwd=work)
    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip("\n") == seed_table("step1-instancetype.txt")


def test_installed_live_demo_says_it_needs_a_checkout(installed):
    bin_dir, _, work = installed
    result = _run([bin_dir / "accelpolicy", "demo", "--live"], cwd=work)
    assert result.returncode == 2
    assert result.stderr == (
        "error: the live demo needs a source checkout of accelpolicy (its local control-plane harness, "
        "testing/localcluster, is not part of the installed package): run `make demo` there; "
        "`accelpolicy demo --snapshot` replays the steps without a cluster\n")
    replay = _run([bin_dir / "accelpolicy", "demo", "--snapshot", "--steps", FIXTURES / "seed"], cwd=work)
    assert replay.returncode == 0, replay.stderr
    assert replay.stdout.count("$ kubectl get instancetypes") == 9
