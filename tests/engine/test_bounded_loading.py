"""Rules are read under bounds (docs/rule-authoring.md "Bounded loading"): bytes per file and in all, YAML
values after alias expansion, alias references, nesting, message and template length, from rules/cel.yaml
``loading`` (each under a ceiling); over one, a finding with file:line and the set refused, counted before
any value is built, so the process never grows first."""
from __future__ import annotations

import shutil
import time
import tracemalloc
from pathlib import Path

import pytest

from runtime.rules.loader import RuleLoadError, iter_rule_files, load_rules, rule_problems
from runtime.rules.yamlsrc import load_documents

RULES = Path(__file__).resolve().parents[2] / "rules"


def bomb() -> str:
    """The issue's 601-byte rules file: six anchors, each ten aliases of the one before (10^6 values)."""
    lines = ["# ten lol, ten of those, ten of those... one million values from a few hundred bytes",
             "apiVersion: rules.accelpolicy.dev/v1alpha1", "kind: AdmissionParams", "metadata: {name: bomb}",
             "spec:", "  values:", "    a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for prev, name in zip("abcde", "bcdef"):
        lines.append(f"    {name}: &{name} [" + ", ".join([f"*{prev}"] * 10) + "]")
    text = "\n".join(lines) + "\n"
    return text.replace("# ten lol", "#" * (602 - len(text.encode())) + " ten lol", 1)


@pytest.fixture()
def copy(tmp_path) -> Path:
    """A copy of the shipped rules (less their suites) to edit."""
    target = tmp_path / "rules"
    shutil.copytree(RULES, target, ignore=shutil.ignore_patterns("tests"))
    return target


def _values(paths: list[Path]) -> int:
    """The YAML values of ``paths`` after alias expansion, as the loader counts them."""
    counted = [0, 0]
    for path in paths:
        load_documents(path.read_text(), counted=counted)
    return counted[0]


def _found(root: Path) -> list[str]:
    return [str(p) for p in rule_problems(root, cache=None)[0]]


def _set(copy: Path, setting: str, value: int) -> None:
    cel = copy / "cel.yaml"
    text = cel.read_text()
    old = next(line for line in text.splitlines() if line.strip().startswith(f"{setting}:"))
    cel.write_text(text.replace(old, f"    {setting}: {value}", 1))


def test_the_alias_bomb_is_refused_at_lint_before_it_expands(tmp_path):
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "bomb.yaml").write_bytes(bomb().encode())
    assert len(bomb().encode()) == 601
    tracemalloc.start()
    started = time.process_time()
    try:
        found = _found(alone)
        seconds = time.process_time() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert found == ["alone/bomb.yaml:2:1 <document>: this document expands to 1234585 values after its aliases, "
                     "more than rules/cel.yaml loading.maxNodes (100000 in all the files, 0 before it): an alias "
                     "(*name) repeats everything its anchor (&name) holds"]
    assert seconds < 1.0        # generous: the figure is in benchmarks/rule_loading.py (about a millisecond)
    assert peak < 8 * 1024 * 1024   # expanded, the values alone took hundreds of MiB


def test_the_alias_bomb_in_the_shipped_rules_refuses_the_generation(copy):
    (copy / "bomb.yaml").write_bytes(bomb().encode())
    with pytest.raises(RuleLoadError) as refused:
        load_rules(copy)
    before = _values([path for path in iter_rule_files(copy) if str(path) < str(copy / "bomb.yaml")])
    assert [str(p) for p in refused.value.problems] == [
        f"rules/bomb.yaml:2:1 <document>: this document expands to 1234585 values after its aliases, more than "
        f"rules/cel.yaml loading.maxNodes (100000 in all the files, {before} before it): an alias (*name) repeats "
        "everything its anchor (&name) holds"]


def test_a_file_over_the_byte_limit_is_a_finding_at_line_1(copy):
    _set(copy, "maxFileBytes", 13_100)   # the largest rule file, and only it, is over
    assert _found(copy) == [
        "rules/admission/pods-mutation.yaml:1:1 <file>: the file holds "
        f"{len((copy / 'admission/pods-mutation.yaml').read_bytes())} bytes, more than rules/cel.yaml "
        "loading.maxFileBytes (13100)"]


def test_a_file_over_the_ceiling_is_never_read(copy):
    (copy / "big.yaml").write_bytes(b"# " + b"x" * (1024 * 1024) + b"\n")
    assert _found(copy) == [f"rules/big.yaml:1:1 <file>: the file holds {1024 * 1024 + 3} bytes, more than any "
                            "rules file may (rules/cel.yaml loading.maxFileBytes is at most 1048576)"]


def test_all_files_over_the_total_is_a_finding(copy):
    _set(copy, "maxTotalBytes", 100_000)
    total = sum(len(p.read_bytes()) for p in copy.rglob("*.yaml"))
    assert _found(copy) == [f"{copy} 0:0 <directory>: the rule files hold {total} bytes in all, more than "
                            "rules/cel.yaml loading.maxTotalBytes (100000)".replace(f"{copy} 0:0", f"{copy}:0:0")]


def test_a_message_over_its_limit_is_a_finding_at_its_field(copy):
    _set(copy, "maxMessageLength", 120)
    found = _found(copy)
    line = next(i for i, text in enumerate((copy / "audit.yaml").read_text().splitlines(), 1)
                if "the check answers Retry on flavor {flavor}" in text) - 1
    assert f"rules/audit.yaml:{line}:14 spec.retryLoop.message: 229 characters, more than rules/cel.yaml " \
           "loading.maxMessageLength (120)" in found
    assert all("characters, more than rules/cel.yaml loading.maxMessageLength (120)" in f
                                    for f in found)


def test_an_edit_cannot_raise_a_limit_past_its_ceiling(copy):
    _set(copy, "maxNodes", 600_000)
    line = next(i for i, text in enumerate((copy / "cel.yaml").read_text().splitlines(), 1) if "maxNodes:" in text)
    assert _found(copy) == [f"rules/cel.yaml:{line}:15 spec.loading.maxNodes: Input should be less than or equal "
                            "to 500000"]


def test_nesting_and_recursive_aliases_are_findings_not_crashes(tmp_path):
    for name, text in {"deep.yaml": "a: " + "[" * 900 + "]" * 900 + "\n",
                       "loop.yaml": "a: &a [x, *a]\n"}.items():
        folder = tmp_path / name.split(".")[0]
        folder.mkdir()
        (folder / name).write_text(text)
    assert _found(tmp_path / "deep") == ["deep/deep.yaml:1:67 <document>: nested deeper than 64 levels "
                                         "(rules/cel.yaml loading.maxDepth)"]
    assert _found(tmp_path / "loop") == ["loop/loop.yaml:1:4 <document>: an alias refers to a node that holds "
                                         "it (a recursive alias)"]
