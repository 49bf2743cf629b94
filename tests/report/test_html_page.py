"""`accelpolicy audit -o html` in a real headless browser (Debian's chromium): the page renders, the result
table sorts and filters, the pools show as capacity bars, every view of every pool equal to what
`accelpolicy get instancetypes` prints; a screenshot is written (docs/audit.md "One page (`-o html`)").

The screenshot goes to $ACCELPOLICY_ARTIFACTS (default: the test's tmp directory) as audit-page.png.
Without chromium the tests skip, unless ACCELPOLICY_REQUIRE_BROWSER=1 (`.ci/run` installs Debian's
chromium and sets it): then a missing browser fails the run.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from runtime.cli import main

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
REQUIRED = os.environ.get("ACCELPOLICY_REQUIRE_BROWSER") == "1"
needs_browser = pytest.mark.skipif(CHROMIUM is None and not REQUIRED,
                                   reason="Debian's chromium is not installed (apt-get install chromium)")
# headless as root, on a machine without a network: no sandbox, no GPU, none of chromium's background
# connections (they are refused here, many at a time), a fresh profile per run
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")
SNAPSHOT = ["--snapshot", "tests/fixtures/seed/common", "--snapshot", "tests/fixtures/audit/seed-cluster"]
# clusters whose pools hold something in every view: the audit's seed cluster (idle A10G, T4, CPU), a
# 20 % slice held (SL), MIG instances carved beside whole and sliced accelerators (PT, SH, SL)
POOL_SNAPSHOTS = {
    "seed-cluster": SNAPSHOT,
    "sliced-demo": ["--snapshot", "tests/fixtures/seed/step3-sliced-demo"],
    "mig-mixed-used": ["--snapshot", "tests/fixtures/mig/common", "--snapshot", "tests/fixtures/mig/config3-mixed-used"],
}
VIEW_FIELDS = {"EX": "accelerator", "SH": "acceleratorShared", "SL": "acceleratorSliced",
               "PT": "acceleratorPartitioned", "CPU": "cpu"}
BAR = re.compile(r'<span class="num" data-view="(\w+)" data-capacity="(\d+)" data-remaining="(\d+)" '
                 r'data-once-max="(\d+)">(\d+)/(\d+) used')
ROW = re.compile(r'<tr data-result="(\w+)"( style="display: none;")?><td class="\w+">\w+</td><td>([^<]*)</td>'
                 r'<td>([^<]*)</td><td>([^<]*)</td>')


def _browser(*args: str) -> str:
    assert CHROMIUM is not None, "ACCELPOLICY_REQUIRE_BROWSER=1 but chromium is not installed (apt-get install chromium)"
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
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


@needs_browser
def test_the_page_renders_with_the_counts_and_every_result(page):
    dom = _browser("--dump-dom", page.as_uri())
    assert re.findall(r'<span class="(\w+)">(\d+) \w+</span>', dom) == [
        ("pass", "12"), ("fail", "5"), ("warn", "2"), ("error", "1"), ("skip", "3")]
    assert len(ROW.findall(dom)) == 23
    assert '<span id="shown">23</span>' in dom
    # the pools: the T4 pool's exclusive view is a bar of 0 used out of 5
    assert "<span class=\"bar\" title=\"0 of 5 used\">" in dom


def _table_pairs(snapshot: list[str]) -> dict[str, dict[str, tuple[int, int]]]:
    """`get instancetypes`: pool -> view -> (onceMaxRequest, remaining) as the table prints them
    (ACCELERATOR(EX/SH/SL/PT) pairs, then the CPU column)."""
    result = CliRunner().invoke(main, ["get", "instancetypes", *snapshot])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = lines[0]
    start, end = header.index("ACCELERATOR(EX/SH/SL/PT)"), header.index("CPU ")
    out = {}
    for line in lines[1:]:
        pairs = line[start:end].split() + [line[end:].split()[0]]
        assert len(pairs) == 5, line
        out[line.split()[0]] = {view: tuple(int(x) for x in pair.split("/")) for view, pair in zip(VIEW_FIELDS, pairs)}
    return out


def _capacities(snapshot: list[str]) -> tuple[dict[str, dict[str, int]], set[str]]:
    """`get instancetypes -o json`: (pool -> view -> capacity (status of each view), accelerated pools)."""
    result = CliRunner().invoke(main, ["get", "instancetypes", "-o", "json", *snapshot])
    assert result.exit_code == 0, result.output
    items = json.loads(result.output)["items"]
    return ({it["metadata"]["name"]: {view: int((it["status"].get(key) or {}).get("capacity", 0))
                                      for view, key in VIEW_FIELDS.items()} for it in items},
            {it["metadata"]["name"] for it in items if (it.get("spec") or {}).get("acceleratable")})


@needs_browser
@pytest.mark.parametrize("cluster", sorted(POOL_SNAPSHOTS))
def test_every_view_of_every_pool_equals_get_instancetypes(cluster, tmp_path):
    """docs/audit.md "One page (`-o html`)": the page showed EX and PT only (SH and SL fell into a comment). Each pool's bars,
    read from the rendered DOM, are the table's onceMax/remaining pairs and the status capacities: the
    four accelerator views of an accelerated pool, the CPU view of a CPU pool."""
    snapshot = POOL_SNAPSHOTS[cluster]
    result = CliRunner().invoke(main, ["audit", *snapshot, "-o", "html"])
    assert result.exit_code in (0, 1), result.output
    page = tmp_path / "audit.html"
    page.write_text(result.output)
    dom = _browser("--dump-dom", page.as_uri())
    table, (capacities, accelerated) = _table_pairs(snapshot), _capacities(snapshot)
    shown = {}
    for block in re.findall(r'<div class="type" data-type="([^"]+)">(.*?)</div>', dom, re.S):
        name, body = block
        shown[name] = {view: (int(cap), int(rem), int(once), int(used), int(cap2))
                       for view, cap, rem, once, used, cap2 in BAR.findall(body)}
    assert sorted(shown) == sorted(table)
    checked = 0
    for name, views in shown.items():
        assert list(views) == (["EX", "SH", "SL", "PT"] if name in accelerated else ["CPU"]), name
        for view, (capacity, remaining, once, used, capacity_text) in views.items():
            assert (once, remaining) == table[name][view], (name, view)
            assert capacity == capacity_text == capacities[name][view], (name, view)
            assert used == capacity - remaining, (name, view)
            checked += 1
    assert checked == sum(4 if list(v) != ["CPU"] else 1 for v in shown.values()) >= 5


@needs_browser
def test_the_table_sorts_and_filters_in_the_browser(page):
    dom = _browser("--dump-dom", page.as_uri() + "#sort=OBJECT:desc&kind=fail")
    visible = [(policy, rule, obj) for result, hidden, policy, rule, obj in ROW.findall(dom) if not hidden]
    assert visible == [
        ("derived-state", "extra", "ResourceFlavor gpustack--retired-linux-amd64-8c"),
        ("derived-state", "edited", "ResourceFlavor gpustack--amd-epyc-7r13-linux-amd64-16c"),
        ("pods-validation", "one-accelerator-family", "Pod default/two-families"),
        ("derived-state", "missing", "LocalQueue default/gpustack-fnv64-6b371caa2da0b799"),
        ("derived-state", "edited", "ClusterQueue gpustack--nvidia-a10g-linux-amd64"),
    ]
    assert '<span id="shown">5</span>' in dom
    ascending = _browser("--dump-dom", page.as_uri() + "#sort=OBJECT")
    objects = [obj for _, _, _, _, obj in ROW.findall(ascending)]
    assert objects[0] == "ClusterQueue gpustack--nvidia-a10g-linux-amd64" and objects[-1].startswith("ResourceFlavor")


@needs_browser
def test_a_screenshot_is_written(page, tmp_path):
    out = Path(os.environ.get("ACCELPOLICY_ARTIFACTS") or tmp_path) / "audit-page.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    _browser("--window-size=1400,1800", f"--screenshot={out}", page.as_uri() + "#kind=fail")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20000
    print(f"\nscreenshot: {out}")


def test_pool_bars_list_the_four_views_of_an_accelerated_pool_without_a_browser():
    """docs/audit.md "One page (`-o html`)" where no browser runs: SH and SL were commented out of ``VIEWS`` (EX and PT only)."""
    from runtime.engine.policy import Policy
    from runtime.rules.loader import load_rules
    from runtime.report.html import pool_bars
    from runtime.snapshots import load_snapshot

    policy = Policy(load_rules())
    groups = dict(pool_bars(policy, load_snapshot([Path("tests/fixtures/seed/step3-sliced-demo")])))
    a10g = dict(groups["nvidia-a10g"])["gpustack--nvidia-a10g-linux-amd64"]
    assert [(b.view, b.capacity, b.remaining, b.once_max, b.used) for b in a10g] == [
        ("EX", 1, 0, 0, 1), ("SH", 10, 0, 0, 10), ("SL", 100, 80, 80, 20), ("PT", 0, 0, 0, 0)]
    cpu = dict(groups["CPU"])["gpustack--generic-linux-amd64"]
    assert [(b.view, b.capacity, b.remaining, b.once_max) for b in cpu] == [("CPU", 72, 72, 48)]
