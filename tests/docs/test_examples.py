"""Every ```console example of README.md and docs/ runs offline and prints what the page says.

Each page's examples run in order in a scratch copy of the parts of the checkout they read (rules/,
demo/, tests/fixtures/), so an example may edit rules/ (a task page does) without touching the
checkout. ``ACCELPOLICY_RULES`` names that copy's rules/, which is what the installed rules are in a
checkout (editable install). Convention: tests/docs/examples.py.

An ``accelpolicy ...`` command runs the real click command in this process (click's CliRunner: the
same code as the console script without an interpreter start per example, which costs seconds each
on a loaded machine); whatever follows its first unquoted ``|`` runs in bash on its output. Any other
command runs in bash.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from click.testing import CliRunner

from runtime.cli import main
from tests.docs.examples import EXIT, ROOT, examples, pages

COPIED = ("rules", "demo", "tests/fixtures")
PAGES = [p for p in pages() if examples(p)]


def _split_pipe(command: str) -> tuple[str, str]:
    """``a b | c`` -> (``a b``, ``c``): the first ``|`` outside quotes; ("cmd", "") without one."""
    quote = ""
    for i, char in enumerate(command):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "|":
            return command[:i].strip(), command[i + 1:].strip()
    return command.strip(), ""


def _run(command: str, cwd: Path, env: dict, monkeypatch) -> tuple[int, str]:
    """Exit code and output (stdout and stderr together) of one example command."""
    command = EXIT.sub("", command).strip()
    head, tail = _split_pipe(command)
    if not head.startswith("accelpolicy "):
        run = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=cwd, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        return run.returncode, run.stdout
    monkeypatch.chdir(cwd)
    result = CliRunner().invoke(main, shlex.split(head)[1:], env={k: env[k] for k in ("ACCELPOLICY_RULES", "COLUMNS")},
                                prog_name="accelpolicy")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    if not tail:
        return result.exit_code, result.output
    run = subprocess.run(["bash", "-o", "pipefail", "-c", tail], cwd=cwd, env=env, input=result.output,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    return result.exit_code or run.returncode, run.stdout


def _workdir(tmp: Path) -> Path:
    for part in COPIED:
        shutil.copytree(ROOT / part, tmp / part, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_console_examples_print_what_the_page_says(page: Path, tmp_path: Path, monkeypatch):
    work = _workdir(tmp_path)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
               ACCELPOLICY_RULES=str(work / "rules"), COLUMNS="200", NO_COLOR="1")
    for example in examples(page):
        code, output = _run(example.command, work, env, monkeypatch)
        where = f"{example.id}: `$ {example.command}`"
        assert code == example.exit_code, f"{where} exited {code}:\n{output}"
        assert example.matches(output), f"{where} printed:\n{output}\nthe page says:\n" + "\n".join(example.expected)


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


def test_pipe_split_respects_quotes():
    assert _split_pipe("accelpolicy get x | grep '^a|b' | sort") == ("accelpolicy get x", "grep '^a|b' | sort")
    assert _split_pipe("grep 'a|b' f") == ("grep 'a|b' f", "")
