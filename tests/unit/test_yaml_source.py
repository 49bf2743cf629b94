"""Rule YAML composed by libyaml gives what PyYAML's own parser gives (docs/performance.md "Fast to start, light to hold"): the same values,
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


PLAIN_CASES = [
    "a: 1\nb: [1, 2.5, true, null, ~, 0x1F, 1e3, .inf, 2001-12-14t21:59:43.10-05:00, 2002-12-14]\n",
    "base: &b {x: 1, y: [1, 2]}\nother: *b\nmerged:\n  <<: *b\n  z: 3\n",
    "a: &a [1, *a]\n",
    "? [1, 2]\n: x\n",
    "a: 1\na: 2\n",
    "=: 1\n",
    "!!omap [a: 1, b: 2]\n",
    "!!set {a, b}\n",
    "x: !!binary aGVsbG8=\ny: !!str 12\nz: !!int '12'\n",
    "1: a\ntrue: b\nnull: c\n1.5: d\n2001-01-01: e\n",
    "---\n---\na: 1\n...\n---\n",
    "",
    "x: !custom 1\n",
    "l: &l [1]\nm: [*l, *l]\nn: &n ~\no: *n\n",
]


def _loaded(load):
    try:
        return ("value", repr(load()))
    except Exception as exc:  # noqa: BLE001 - the error is the answer compared (PyYAML's, or a TypeError)
        return ("error", type(exc), str(exc))


@pytest.mark.parametrize("text", PLAIN_CASES)
def test_plain_documents_are_pyyamls(text):
    """plain_documents builds the values PyYAML's constructor builds (or raises its error), for the
    safe loader and for the snapshot loader that refuses duplicate keys."""
    from runtime import snapshots

    for loader, refuse in ((yamlsrc._COMPOSER, False), (snapshots._Loader, True)):
        assert _loaded(lambda: yamlsrc.plain_documents(text, loader, refuse)) == \
            _loaded(lambda: list(yaml.load_all(text, Loader=loader))), (text, loader)


def test_plain_documents_of_every_repository_file_and_aliases_shared():
    from runtime import snapshots

    for path in FILES:
        text = path.read_text(encoding="utf-8")
        assert yamlsrc.plain_documents(text, yamlsrc._COMPOSER) == list(yaml.load_all(text, Loader=yamlsrc._COMPOSER))
        assert _loaded(lambda: yamlsrc.plain_documents(text, snapshots._Loader, True)) == \
            _loaded(lambda: list(yaml.load_all(text, Loader=snapshots._Loader))), path
    doc = yamlsrc.plain_documents("l: &l [1]\nm: [*l, *l]\n", yamlsrc._COMPOSER)[0]
    assert doc["l"] is doc["m"][0] is doc["m"][1]  # one object per anchor, as PyYAML builds it
