"""A validation's ids: a descriptive ``name``, the spec row in ``specRule``, old names in ``formerNames``.

The Pod validations were once named by spec row (``rule-1a``); each now says what it checks and keeps
the row and the old name as data, so a rule test naming the old name can be mapped (runtime/ruletests.py).
"""
from __future__ import annotations

import copy
import re

import pytest
import yaml
from pydantic import ValidationError

from runtime.model.admission import AdmissionPolicySpec, all_validations
from runtime.rules.loader import DEFAULT_RULES_DIR

KEBAB = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


def _pods_validation() -> dict:
    docs = yaml.safe_load_all((DEFAULT_RULES_DIR / "admission" / "pods.yaml").read_text())
    return next(d for d in docs if d["metadata"]["name"] == "pods-validation")["spec"]


def test_every_pod_validation_is_named_by_what_it_checks():
    spec = AdmissionPolicySpec.model_validate(_pods_validation())
    rules = list(all_validations(spec.validations))
    assert all(KEBAB.match(v.name) and not re.match(r"^rule-[0-9]", v.name) for v in rules), [v.name for v in rules]
    numbered = {v.specRule: (v.name, v.formerNames) for v in rules if v.specRule}
    assert numbered["1a"] == ("one-accelerator-family", ["rule-1a"])
    assert numbered["7"] == ("sidecar-requests-no-accelerator", ["rule-7"])
    assert numbered["2'"] == ("sliced-key-required", ["rule-2-required"])
    assert len(numbered) == 17


def _first_rules(spec: dict) -> tuple[dict, dict]:
    return spec["validations"][0], spec["validations"][1]


def _spec_row_twice(first: dict, second: dict) -> None:
    second["specRule"] = first["specRule"]


def _former_name_is_current(first: dict, second: dict) -> None:
    first["formerNames"] = [second["name"]]


def _former_name_twice(first: dict, second: dict) -> None:
    second["formerNames"] = first["formerNames"]


@pytest.mark.parametrize("edit, refusal", [
    (_spec_row_twice, "specRule '7' is on two validations"),
    (_former_name_is_current, "former name 'one-accelerator-family' is a current validation name"),
    (_former_name_twice, "former name 'rule-7' is on two validations"),
])
def test_a_clashing_id_is_refused(edit, refusal):
    """A spec row on two validations, a former name that is a current name, a former name used twice."""
    spec = copy.deepcopy(_pods_validation())
    edit(*_first_rules(spec))
    with pytest.raises(ValidationError, match=refusal):
        AdmissionPolicySpec.model_validate(spec)


def test_a_spec_row_is_a_number_and_letters():
    spec = copy.deepcopy(_pods_validation())
    spec["validations"][0]["specRule"] = "rule 7"
    with pytest.raises(ValidationError, match="specRule"):
        AdmissionPolicySpec.model_validate(spec)
