"""The installed wheel pre-builds its compiled-rules entry as the image build does (deploy/image/Dockerfile)
and a copy of its rules elsewhere (as the chart mounts them) loads from that read-only entry, printing
the seed's step-1 table without compiling (docs/performance.md "Fast to start, light to hold")."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.packaging.test_wheel import _run, installed  # noqa: F401 - the module-scoped fixture
from tests.seedfiles import FIXTURES, seed_table

pytestmark = pytest.mark.wheel


def test_the_images_prebuilt_entry_serves_a_copy_of_the_shipped_rules(installed, tmp_path):  # noqa: F811
    bin_dir, _, work = installed
    shipped = Path(_run([bin_dir / "python", "-c", "from runtime.rules.loader import DEFAULT_RULES_DIR; "
                                                   "print(DEFAULT_RULES_DIR)"], cwd=work).stdout.strip())
    seed = tmp_path / "opt-rules-cache"
    built = _run([bin_dir / "accelpolicy", "lint", "--rules-cache", seed, shipped], cwd=work)
    assert built.returncode == 0, built.stderr
    assert len(list(seed.glob("*.rules"))) == 1
    mounted = tmp_path / "etc" / "rules"
    shutil.copytree(shipped, mounted, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    seed.chmod(0o555)
    try:
        writable = tmp_path / "tmp-rules-cache"
        result = _run(["env", f"ACCELPOLICY_RULES_CACHE={writable}:{seed}", bin_dir / "accelpolicy", "get",
                       "instancetypes", "--snapshot", FIXTURES / "seed" / "step1", "--rules", mounted], cwd=work)
        assert result.returncode == 0, result.stderr
        assert result.stdout.rstrip("\n") == seed_table("step1-instancetype.txt")
        assert result.stderr == ""
        assert not writable.exists()  # a hit: nothing compiled, nothing written
    finally:
        seed.chmod(0o755)
