"""Where a text stands in a shipped rule file, so a test that expects a finding at ``FILE:LINE:COL`` reads
the line from the file rather than hard-coding it (a rule file's lines move when it is edited or folded;
the column, inside the line, is the test's own claim)."""
from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def shipped_line(file: str, text: str) -> int:
    """The 1-based line of the repository file ``file`` (as findings name it: ``rules/...``) where the first
    occurrence of ``text`` starts; ValueError when the file does not hold ``text``."""
    source = (REPO / file).read_text()
    return source[:source.index(text)].count("\n") + 1
