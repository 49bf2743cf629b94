"""A validation is known by its ``name`` alone: a descriptive kebab-case phrase of what it checks.

The Pod validations were once named by spec row (``rule-1a``), then carried the row (``specRule``) and
the old name (``formerNames``) for one release; both fields are removed (docs/rule-authoring.md "Naming a
rule"), and a rule file that still has one is refused naming it.
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
    names = [v.name for v in all_validations(spec.validations)]
    assert all(KEBAB.match(n) and not re.match(r"^rule-[0-9]", n) for n in names), names
    assert names[:3] == ["sidecar-requests-no-accelerator", "one-accelerator-family", "view-offered"]
    assert len(names) == len(set(names)) == 21


@pytest.mark.parametrize("fields, refusal", [
    ({"specRule": "1a"}, "specRule: removed"),
    ({"formerNames": ["rule-1a"]}, "formerNames: removed"),
    ({"specRule": "1a", "formerNames": ["rule-1a"]}, "specRule, formerNames: removed"),
])
def test_a_removed_id_field_is_refused_by_name(fields, refusal):
    spec = copy.deepcopy(_pods_validation())
    spec["validations"][1].update(fields)
    with pytest.raises(ValidationError, match=refusal) as refused:
        AdmissionPolicySpec.model_validate(spec)
    assert "docs/rule-authoring.md \"Naming a rule\"" in str(refused.value)
