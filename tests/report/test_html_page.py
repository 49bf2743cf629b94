"""`accelpolicy audit -o html` in a real headless browser (Debian's chromium): the page renders, the result
table sorts and filters, the pools show as capacity bars; a screenshot is written (issue 12 item 3/6).

The screenshot goes to $ACCELPOLICY_ARTIFACTS (default: the test's tmp directory) as audit-page.png.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from runtime.cli import main

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)")
SNAPSHOT = ["--snapshot", "tests/fixtures/seed/common", "--snapshot", "tests/fixtures/audit/seed-cluster"]
ROW = re.compile(r'<tr data-result="(\w+)"( style="display: none;")?><td class="\w+">\w+</td><td>([^<]*)</td>'
                 r'<td>([^<]*)</td><td>([^<]*)</td>')


def _browser(*args: str) -> str:
    proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    result = CliRunner().invoke(main, ["audit", *SNAPSHOT, "-o", "html"])
    assert result.exit_code == 1
    path = tmp_path_factory.mktemp("html") / "audit.html"
    path.write_text(result.output)
    return path


def test_the_page_is_self_contained(page):
    text = page.read_text()
    assert "http://" not in text and "https://" not in text and "<link" not in text and " src=" not in text


def test_the_page_renders_with_the_counts_and_every_result(page):
    dom = _browser("--dump-dom", page.as_uri())
    assert re.findall(r'<span class="(\w+)">(\d+) \w+</span>', dom) == [
        ("pass", "12"), ("fail", "5"), ("warn", "2"), ("error", "1"), ("skip", "3")]
    assert len(ROW.findall(dom)) == 23
    assert '<span id="shown">23</span>' in dom
    # the pools: the T4 pool's exclusive view is a bar of 0 used out of 5
    assert "<span class=\"bar\" title=\"0 of 5 used\">" in dom


def test_the_table_sorts_and_filters_in_the_browser(page):
    dom = _browser("--dump-dom", page.as_uri() + "#sort=OBJECT:desc&kind=fail")
    visible = [(policy, rule, obj) for result, hidden, policy, rule, obj in ROW.findall(dom) if not hidden]
    assert visible == [
        ("derived-state", "extra", "ResourceFlavor gpustack--retired-linux-amd64-8c"),
        ("derived-state", "edited", "ResourceFlavor gpustack--amd-epyc-7r13-linux-amd64-16c"),
        ("pods-validation", "rule-1a", "Pod default/two-families"),
        ("derived-state", "missing", "LocalQueue default/gpustack-fnv64-6b371caa2da0b799"),
        ("derived-state", "edited", "ClusterQueue gpustack--nvidia-a10g-linux-amd64"),
    ]
    assert '<span id="shown">5</span>' in dom
    ascending = _browser("--dump-dom", page.as_uri() + "#sort=OBJECT")
    objects = [obj for _, _, _, _, obj in ROW.findall(ascending)]
    assert objects[0] == "ClusterQueue gpustack--nvidia-a10g-linux-amd64" and objects[-1].startswith("ResourceFlavor")


def test_a_screenshot_is_written(page, tmp_path):
    out = Path(os.environ.get("ACCELPOLICY_ARTIFACTS") or tmp_path) / "audit-page.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    _browser("--window-size=1400,1800", f"--screenshot={out}", page.as_uri() + "#kind=fail")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20000
    print(f"\nscreenshot: {out}")
