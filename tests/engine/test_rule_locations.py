"""Findings name the file that is wrong and point at the offending item (docs/rule-authoring.md)."""
from __future__ import annotations


def test_a_yaml_error_is_reported_only_in_its_own_file(edited_rules):
    """instances-validation.yaml borrows instance-common from instances.yaml: it gets no invented error."""
    found = edited_rules("rules/admission/instances.yaml", "  name: instances-mutation\n",
                         "  name: instances-mutation\n  bad: [unclosed\n")
    assert found == ["rules/admission/instances.yaml:20:5 <document>: not valid YAML: expected ',' or ']', but got ':'"]


def test_a_misspelt_params_table_is_one_finding_at_params_from(edited_rules):
    found = edited_rules("rules/admission/instances-validation.yaml", "paramsFrom: [instance-common]",
                      "paramsFrom: [instance-commons]")
    assert found == ["rules/admission/instances-validation.yaml:15:15 spec.paramsFrom: no AdmissionParams named "
                     "'instance-commons' (AdmissionParams: instance-common, node-pin, resource-keys)"]


def test_a_preset_tier_error_points_at_the_tier(edited_rules):
    found = edited_rules("rules/pools/presets.yaml", "fallbackTier: fallback", "fallbackTier: huge")
    assert found == ["rules/pools/presets.yaml:11:17 spec.fallbackTier: unknown tier 'huge' "
                     "(tiers: fallback, large, medium, small, xlarge)"]
