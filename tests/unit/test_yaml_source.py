"""Rule YAML composed by libyaml gives what PyYAML's own parser gives (issue 24 item 1): the same values,
lines and spans for every YAML file of the repository, and PyYAML's own error for text that is refused."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from runtime.rules import yamlsrc

REPO = Path(__file__).resolve().parents[2]
FILES = sorted(p for folder in ("rules", "tests/fixtures", "demo", "deploy", "crds") for p in (REPO / folder).rglob("*.yaml")
               if "templates" not in p.parts)


def _shape(docs):
    return [(d.value, d.line, d.lines, d.spans) for d in docs]


@pytest.mark.skipif(not hasattr(yaml, "CSafeLoader"), reason="PyYAML without libyaml")
def test_libyaml_and_pyyaml_compose_the_same_documents():
    assert len(FILES) > 50
    for path in FILES:
        text = path.read_text(encoding="utf-8")
        assert _shape(yamlsrc._documents(text, yaml.CSafeLoader)) == _shape(yamlsrc._documents(text, yaml.SafeLoader)), path
        assert yamlsrc.safe_load_all(text) == list(yaml.safe_load_all(text)), path


@pytest.mark.parametrize("text", [
    "a: [1, 2\n",
    "a: 1\n  b: 2\n",
    "key: 'unterminated\n",
    "- a\nb: c\n",
    "a: \"é \\x\"\n",
])
def test_refused_text_reads_as_pyyaml_says_it(text):
    with pytest.raises(yamlsrc.YamlSourceError) as ours:
        yamlsrc.load_documents(text)
    with pytest.raises(yamlsrc.YamlSourceError) as pure:
        yamlsrc._documents(text, yaml.SafeLoader)
    assert (str(ours.value), ours.value.line, ours.value.column) == (str(pure.value), pure.value.line, pure.value.column)
    with pytest.raises(yaml.YAMLError) as loaded:
        yamlsrc.safe_load_all(text)
    with pytest.raises(yaml.YAMLError) as plain:
        list(yaml.safe_load_all(text))
    assert str(loaded.value) == str(plain.value)


def test_block_scalars_and_quotes_keep_their_spans():
    text = "a: |\n  first\n  second\nb: 'q'\nc: >-\n  folded\n  text\nd: \"é x\"\n"
    docs = yamlsrc.load_documents(text)
    assert _shape(docs) == _shape(yamlsrc._documents(text, yaml.SafeLoader))
    start, end, column = docs[0].spans[("a",)]
    assert text[start:end].startswith("  first")
    assert docs[0].position_in(("d",), 2) == (8, 7)  # the "x" after "é "


def test_duplicate_keys_are_refused_as_before():
    with pytest.raises(yamlsrc.YamlSourceError, match="duplicate key 'a'"):
        yamlsrc.load_documents("a: 1\na: 2\n")
