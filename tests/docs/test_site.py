"""The documentation site builds with `mkdocs build --strict`: a broken link, a missing page or a page
left out of the nav fails (mkdocs.yml `validation`)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.docs.examples import ROOT


def test_site_builds_strict(tmp_path):
    mkdocs = Path(sys.executable).parent / "mkdocs"
    run = subprocess.run([str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=ROOT,
                         env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert (tmp_path / "site" / "getting-started" / "index.html").exists()
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").exists()


def test_readme_links_point_at_files_that_exist():
    import re

    text = (ROOT / "README.md").read_text()
    targets = [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in t]
    assert targets, "README.md links into the docs"
    missing = [t for t in targets if t and not (ROOT / t).exists()]
    assert not missing, f"README.md links to missing files: {missing}"
