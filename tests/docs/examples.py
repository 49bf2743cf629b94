"""The runnable examples of the documentation: ```console blocks of docs/ pages and README.md.

Convention (docs/development/docs.md): a fenced block whose info string is ``console`` holds shell
commands on lines starting ``$ `` (a line ending in ``\\`` continues on the next), each followed by the
output it prints (stdout and stderr together, as a terminal shows them). ``...`` in an expected line
matches any text (a uid, a path). A command ending in ``# exit N`` must exit N; any other must exit 0.
Commands that need a cluster or a build go in ```bash blocks, which are never run.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
FENCE = re.compile(r"^```console[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
EXIT = re.compile(r"#\s*exit\s+(\d+)\s*$")


@dataclass
class Example:
    """One command of a console block and what it must print."""

    page: str           # path relative to the repository root
    line: int           # 1-based line of the `$ ` line
    command: str
    expected: list[str]
    exit_code: int

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    def matches(self, output: str) -> bool:
        """True when ``output`` equals the expected lines (trailing blanks aside; ``...`` = any text)."""
        got = [line.rstrip() for line in output.rstrip("\n").split("\n")] if output.strip() else []
        want = [line.rstrip() for line in self.expected]
        while want and not want[-1]:
            want.pop()
        if len(got) != len(want):
            return False
        return all(re.fullmatch(".*".join(map(re.escape, w.split("..."))), g) for w, g in zip(want, got))


def pages() -> list[Path]:
    """Every page whose console blocks are examples: README.md and docs/**/*.md."""
    return [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))


def examples(path: Path) -> list[Example]:
    """The examples of one page, in page order. Raises ValueError for a console block with no command."""
    text = path.read_text()
    page = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
    found: list[Example] = []
    for block in FENCE.finditer(text):
        first_line = text.count("\n", 0, block.start(1)) + 1
        lines = block.group(1).split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if not lines or not lines[0].startswith("$ "):
            raise ValueError(f"{page}:{first_line}: a console block must start with a `$ ` command line "
                             "(use ```bash for commands that are not run by tests/docs)")
        i = 0
        while i < len(lines):
            start = i
            command = lines[i][2:]
            while command.endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command[:-1] + " " + lines[i].strip()
            i += 1
            expected = []
            while i < len(lines) and not lines[i].startswith("$ "):
                expected.append(lines[i])
                i += 1
            code = EXIT.search(command)
            found.append(Example(page, first_line + start, command, expected, int(code.group(1)) if code else 0))
    return found
