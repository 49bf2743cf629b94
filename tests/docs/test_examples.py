"""Every ```console example of README.md and docs/ runs offline and prints what the page says.

Each page's examples run in order in a scratch copy of the parts of the checkout they read (rules/,
demo/, tests/fixtures/), so an example may edit rules/ (a task page does) without touching the
checkout. ``ACCELPOLICY_RULES`` names that copy's rules/, which is what the installed rules are in a
checkout (editable install). Convention: tests/docs/examples.py.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.examples import ROOT, examples, pages

COPIED = ("rules", "demo", "tests/fixtures")
PAGES = [p for p in pages() if examples(p)]


def _workdir(tmp: Path) -> Path:
    for part in COPIED:
        shutil.copytree(ROOT / part, tmp / part, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_console_examples_print_what_the_page_says(page: Path, tmp_path: Path):
    work = _workdir(tmp_path)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
               ACCELPOLICY_RULES=str(work / "rules"), COLUMNS="200", NO_COLOR="1")
    for example in examples(page):
        run = subprocess.run(["bash", "-o", "pipefail", "-c", example.command], cwd=work, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        where = f"{example.id}: `$ {example.command}`"
        assert run.returncode == example.exit_code, f"{where} exited {run.returncode}:\n{run.stdout}"
        assert example.matches(run.stdout), (f"{where} printed:\n{run.stdout}\nthe page says:\n"
                                             + "\n".join(example.expected))


def test_a_console_block_without_a_command_is_refused(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text("text\n\n```console\nmake demo\n```\n")
    with pytest.raises(ValueError, match=r"page.md:4: a console block must start with a `\$ ` command line"):
        examples(page)


def test_ellipsis_and_exit_codes_are_read():
    from tests.docs.examples import Example

    example = examples_from("```console\n$ accelpolicy admit -f x.yaml  # exit 1\nrequest: CREATE ... (uid ...)\n```\n")[0]
    assert example.exit_code == 1
    assert example.matches("request: CREATE Instance default/x (uid 1234)\n")
    assert not example.matches("request: UPDATE Instance default/x (uid 1234)\n")
    assert not Example("p", 1, "c", ["a"], 0).matches("a\nb\n")


def examples_from(text: str):
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "p.md"
        page.write_text(text)
        return examples(page)
