"""References in the repository's comments, docstrings and docs resolve inside the repository.

A reader has this checkout and nothing else: a line that points at an issue number, or at a numbered
section of a file that is not here, points at nothing. Cite the docs page and heading that states the
contract, in the form ``docs/concepts/pools-and-flavors.md "Queues and the entrance"`` (more headings
of the same page joined with ``and "..."``), or give the reason in the code's own terms; history
belongs in commit messages.

Four checks, each failing with ``file:line`` of every offender:

* no ``issue N`` in any tracked text file;
* no section sign (U+00A7) and no ``spec/<name>.md`` in any tracked text file: comments, docstrings,
  messages, help texts and rule-test names alike;
* every ``docs/<page>.md "Heading"`` citation names a heading of that page;
* every ``decision N`` names a decision of docs/reference/decisions.md (a ``## Decision N: ...`` heading).
"""
from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SKIP_DIRS = {".git", ".venv", "build", "site", ".hypothesis", "node_modules", "__pycache__"}
ISSUE = re.compile(r"\bissues?\s+#?[0-9]+", re.IGNORECASE)
SECTION = re.compile("\u00a7|" r"\bspec/[a-z-]+\.md\b")
CITATION = re.compile(r'(?<![\w/.-])(docs/[\w./-]+\.md) "([^"\n]+)"((?: and "[^"\n]+")*)')
MORE = re.compile(r' and "([^"\n]+)"')
DECISION = re.compile(r"\bdecisions?\s+([0-9]+(?:(?:,\s*|,?\s+and\s+)[0-9]+)*)", re.IGNORECASE)
DECISIONS_PAGE = Path("docs/reference/decisions.md")
DECISION_HEADING = re.compile(r"Decision ([0-9]+): ")
FENCE = re.compile(r"^\s*(```|~~~)")


def tracked_files(repo: Path = REPO) -> list[Path]:
    """The repository's tracked files (``git ls-files``), or every file outside build and tool folders."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=repo, capture_output=True, check=True).stdout
        paths = [repo / p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        paths = [p for p in repo.rglob("*") if not SKIP_DIRS & set(p.relative_to(repo).parts)]
    return [p for p in sorted(paths) if p.is_file() and not p.is_symlink()]


def read_text(path: Path) -> str | None:
    """The file's text, or None for a binary or undecodable file."""
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


@functools.lru_cache(maxsize=4)
def texts(repo: Path = REPO) -> list[tuple[Path, str]]:
    """(path, text) of every tracked text file but this module (its examples are offenders on purpose),
    read once per repository."""
    out = []
    for path in tracked_files(repo):
        text = None if path == Path(__file__).resolve() else read_text(path)
        if text is not None:
            out.append((path, text))
    return out


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def issue_references(repo: Path = REPO) -> list[str]:
    """``file:line: text`` of every tracked text file's citation of an issue number (a line break
    between the word and the number included)."""
    found = []
    for path, text in texts(repo):
        lines = text.splitlines()
        for m in ISSUE.finditer(text):
            number = line_of(text, m.start())
            found.append(f"{path.relative_to(repo)}:{number}: {lines[number - 1].strip()}")
    return found


def section_references(repo: Path = REPO) -> list[str]:
    """``file:line: text`` of every section sign or ``spec/<name>.md`` in a tracked text file."""
    found = []
    for path, text in texts(repo):
        lines = text.splitlines()
        for number in sorted({line_of(text, m.start()) for m in SECTION.finditer(text)}):
            found.append(f"{path.relative_to(repo)}:{number}: {lines[number - 1].strip()}")
    return found


def decisions(repo: Path = REPO) -> set[int]:
    """The numbers of the ``Decision N: ...`` headings of docs/reference/decisions.md (empty without it)."""
    page = repo / DECISIONS_PAGE
    if not page.is_file():
        return set()
    return {int(m.group(1)) for h in headings(page) if (m := DECISION_HEADING.match(h))}


def unknown_decisions(repo: Path = REPO) -> list[str]:
    """``file:line: decision N`` of every citation of a decision that docs/reference/decisions.md does
    not list (``decisions 19 and 20`` and ``decisions 3, 17 and 18`` cite each number)."""
    known, found = decisions(repo), []
    for path, text in texts(repo):
        for m in DECISION.finditer(text):
            for number in re.findall(r"[0-9]+", m.group(1)):
                if int(number) not in known:
                    found.append(f"{path.relative_to(repo)}:{line_of(text, m.start())}: decision {number}")
    return found


def headings(path: Path) -> set[str]:
    """The ATX headings of a Markdown file, outside fenced code blocks, as written."""
    out, fenced = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)):
            out.add(m.group(1))
    return out


def broken_citations(repo: Path = REPO) -> list[str]:
    """``file:line: docs/X.md "Heading"`` of every citation whose page or heading does not exist."""
    found, cache = [], {}
    for path, text in texts(repo):
        for m in CITATION.finditer(text):
            page = repo / m.group(1)
            if page not in cache:
                cache[page] = headings(page) if page.is_file() else None
            named = [m.group(2)] + MORE.findall(m.group(3) or "")
            where = f"{path.relative_to(repo)}:{line_of(text, m.start())}"
            if cache[page] is None:
                found.append(f"{where}: {m.group(1)} does not exist")
                continue
            for heading in named:
                if heading not in cache[page]:
                    found.append(f'{where}: {m.group(1)} has no heading "{heading}"')
    return found


def test_no_issue_references():
    found = issue_references()
    assert not found, ("cite a docs page and heading, or state the reason, instead of an issue number:\n"
                       + "\n".join(found))


def test_no_section_references():
    found = section_references()
    assert not found, ("cite docs/<page>.md \"Heading\" instead of a numbered section of a file outside "
                       "the repository:\n" + "\n".join(found))


def test_every_cited_decision_is_listed():
    found = unknown_decisions()
    assert not found, (f"a cited decision has no '## Decision N: ...' heading in {DECISIONS_PAGE}:\n"
                       + "\n".join(found))


def test_docs_citations_name_real_headings():
    found = broken_citations()
    assert not found, "a cited docs page or heading does not exist:\n" + "\n".join(found)


def test_the_checks_catch_what_they_forbid(tmp_path):
    """Each check reports a planted offender with its file and line (no git here: the walk is used)."""
    (tmp_path / "docs" / "reference").mkdir(parents=True)
    (tmp_path / "docs" / "page.md").write_text("# Page\n\n## Real heading\n\n```\n## not a heading\n```\n", encoding="utf-8")
    (tmp_path / "docs" / "reference" / "decisions.md").write_text(
        "# Design decisions\n\n## Decision 3: the entrance\n\n## Decision 17: reserved\n", encoding="utf-8")
    (tmp_path / "a.py").write_text('"""Module (docs/page.md "Real heading"), issue\n'
                                   '12 aside, decision 3."""\n'
                                   "# pools.md \u00a74, decisions 3, 4 and 17\n"
                                   'X = "spec/pools.md in a message"  # docs/page.md "not a heading"\n',
                                   encoding="utf-8")
    (tmp_path / "b.yaml").write_text('key: "\u00a79 a test name"   # spec decision 21\n', encoding="utf-8")
    assert issue_references(tmp_path) == ['a.py:1: """Module (docs/page.md "Real heading"), issue']
    assert section_references(tmp_path) == ["a.py:3: # pools.md \u00a74, decisions 3, 4 and 17",
                                            'a.py:4: X = "spec/pools.md in a message"  # docs/page.md "not a heading"',
                                            'b.yaml:1: key: "\u00a79 a test name"   # spec decision 21']
    assert broken_citations(tmp_path) == ['a.py:4: docs/page.md has no heading "not a heading"']
    assert unknown_decisions(tmp_path) == ["a.py:3: decision 4", "b.yaml:1: decision 21"]
