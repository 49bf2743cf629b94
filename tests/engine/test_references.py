"""References in the product's comments and docstrings resolve inside the repository.

A reader of runtime/, probes/ or rules/ has this checkout and nothing else: a line that points at an
issue number points at nothing. Cite the docs page (and heading) that states the contract, or give the
reason in the code's own terms; history belongs in commit messages.
"""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("runtime", "probes", "rules")
SUFFIXES = {".py", ".yaml", ".yml", ".md"}
ISSUE = re.compile(r"\bissue [0-9]+", re.IGNORECASE)


def issue_references(repo: Path = REPO) -> list[str]:
    """``file:line: text`` of every line under :data:`ROOTS` that cites an issue number."""
    out: list[str] = []
    for root in ROOTS:
        for path in sorted((repo / root).rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file():
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if ISSUE.search(line):
                    out.append(f"{path.relative_to(repo)}:{number}: {line.strip()}")
    return out


def test_no_issue_references():
    found = issue_references()
    assert not found, ("cite a docs page or state the reason instead of an issue number:\n"
                       + "\n".join(found))
