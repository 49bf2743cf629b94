"""The rule files read in one sitting (rules/README.md "Rule files"): every rule file and
rule test within the repository's yamllint configuration (.yamllint: 110 columns), and no CEL conditional
nested more than two deep, so a message or a value is built from named sub-results (CEL variables) rather
than a chain of ternaries. `make lint` runs this file."""
from __future__ import annotations

from pathlib import Path

import pytest
from lark import Tree

from runtime.model.base import Expr
from runtime.rules.cel.parse import parse   # the project's one CEL parser
from runtime.rules.checks import _leaves     # the static checks' own walk of a validated spec
from runtime.rules.loader import load_rules
from runtime.rules.yamlsrc import dotted

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "rules"
MAX_TERNARY_DEPTH = 2


def ternary_depth(tree) -> int:
    """How many CEL conditionals (``c ? a : b``) are nested at the deepest point of a parse tree: 0 for
    none, 1 for one, 2 for one inside another (in any of its three parts)."""
    if not isinstance(tree, Tree):
        return 0
    below = max((ternary_depth(child) for child in tree.children), default=0)
    return below + (1 if tree.data == "expr" and len(tree.children) == 3 else 0)


@pytest.mark.parametrize("source, depth", [
    ("a", 0),
    ("a ? b : c", 1),
    ("a ? b : (c ? d : e)", 2),
    ("(a ? b : c) + (d ? e : f)", 1),
    ("a ? (b ? c : d) : e ? f : (g ? h : i)", 3),
    ("[x].map(y, y ? 1 : (z ? 2 : (w ? 3 : 4)))", 3),
])
def test_ternary_depth_counts_conditionals_inside_conditionals(source, depth):
    assert ternary_depth(parse(source)) == depth


def test_no_cel_conditional_is_nested_deeper_than_two():
    ruleset = load_rules(RULES)
    deep = [f"{doc.file} {doc.kind}/{doc.name} {dotted(('spec',) + path)}: depth {depth}"
            for doc in ruleset.documents.values()
            for path, value in _leaves(doc.spec, ()) if isinstance(value, Expr)
            if (depth := ternary_depth(parse(str(value)))) > MAX_TERNARY_DEPTH]
    assert deep == [], "name the sub-results (CEL variables) instead:\n" + "\n".join(deep)


def test_rule_files_and_rule_tests_pass_yamllint():
    from yamllint import linter
    from yamllint.config import YamlLintConfig

    config = YamlLintConfig(file=str(ROOT / ".yamllint"))
    found = [f"{path.relative_to(ROOT)}:{p.line}:{p.column} {p.desc} ({p.rule})"
             for path in sorted(RULES.rglob("*.yaml"))
             for p in linter.run(path.read_text(), config, str(path))]
    assert found == []
