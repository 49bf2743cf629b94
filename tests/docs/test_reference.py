"""The generated rule-kind reference (docs/reference/rule-kinds.md) holds everything the code knows of the
rule files: every kind, every field of every kind's model and of the models nested in it, every custom CEL
function, every CEL field's names and the rule-test keys. rules/README.md retells none of it; a kind,
field or function added to the code without its entry on the committed page fails here."""
from __future__ import annotations

import importlib
import re

import pytest
from pydantic import BaseModel

from docs import genkinds
from tests.docs.examples import ROOT

PAGE = (ROOT / "docs" / "reference" / "rule-kinds.md").read_text()


def _registry() -> dict[str, type[BaseModel]]:
    for module in genkinds._KIND_MODULES:
        importlib.import_module(module)
    from runtime.model.rulefiles import SPEC_MODELS

    return dict(SPEC_MODELS)


def _section(title: str) -> str:
    """The text of the page's section ``title`` (``## `Kind``` or ``## CEL functions``), up to the next one."""
    start = PAGE.index(f"\n## {title}\n")
    end = PAGE.find("\n## ", start + 1)
    return PAGE[start:end if end > 0 else len(PAGE)]


def _models(model: type[BaseModel], seen: set) -> list[type[BaseModel]]:
    """``model`` and every model nested in its fields, once each."""
    if model in seen:
        return []
    seen.add(model)
    out = [model]
    for field in model.model_fields.values():
        for sub in genkinds._nested_models(field.annotation):
            out += _models(sub, seen)
    return out


@pytest.mark.parametrize("kind", sorted(_registry()))
def test_every_kind_has_its_section_with_every_field(kind):
    section = _section(f"`{kind}`")
    missing = [f"{model.__name__}.{field.alias or name}"
               for model in _models(_registry()[kind], set())
               for name, field in model.model_fields.items()
               if f"| `{field.alias or name}` |" not in section and f"| `{field.alias or name}` |" not in PAGE]
    assert missing == [], f"docs/reference/rule-kinds.md lacks these fields of {kind}: run `make docs-gen`"


def test_the_kinds_on_the_page_are_the_kinds_of_the_code():
    on_page = set(re.findall(r"^## `([A-Za-z]+)`$", PAGE, re.M))
    assert on_page == set(_registry())


def test_every_custom_cel_function_is_on_the_page_with_its_signature():
    section = _section("CEL functions")
    listed = dict(re.findall(r"^\| `(\w+)` \| `([^`]+)` \|", section, re.M))
    assert {name: signature for name, signature, _ in genkinds.cel_functions()} == listed
    from runtime.rules.cel.library.table import LIBRARY

    assert set(listed) == set(LIBRARY)


def test_every_cel_field_lists_the_names_it_may_read():
    section = _section("CEL names")
    from runtime.rules.activations import ACTIVATIONS

    for kind, pattern, names in ACTIVATIONS:
        row = next(line for line in section.splitlines() if line.startswith(f"| `{kind}` | `{pattern}` |"))
        assert all(f"`{name}" in row for name in names), row
    for name in genkinds.admission_names()["params"]:
        assert f"`{name}`" in section


def test_the_rule_test_keys_are_on_the_page():
    from runtime.ruletests import CASE_KEYS, EXPECT_KEYS

    section = _section("Rule tests")
    assert all(f"`{key}`" in section for key in CASE_KEYS | EXPECT_KEYS)


def test_a_field_missing_from_the_page_is_found(monkeypatch):
    """The check fails for what it is for: a field the code has and the page does not."""
    from runtime.model.rulefiles import FourViewSpec

    monkeypatch.setattr("tests.docs.test_reference.PAGE", PAGE.replace("| `sharedOnceMaxReading` |", "| `x` |"))
    missing = [name for name in FourViewSpec.model_fields
               if f"| `{name}` |" not in _section("`FourView`")]
    assert missing == ["sharedOnceMaxReading"]
