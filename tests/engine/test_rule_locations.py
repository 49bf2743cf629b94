"""Findings name the file that is wrong and point at the offending item (docs/rule-authoring.md)."""
from __future__ import annotations

from tests.rulelines import shipped_line


def test_a_yaml_error_is_reported_only_in_its_own_file(edited_rules):
    """instances-validation.yaml borrows instance-common from instances.yaml: it gets no invented error."""
    # `bad:` goes on the line after the name, and YAML reports the unclosed flow on the line after that
    line = shipped_line("rules/admission/instances.yaml", "  name: instances-mutation\n") + 2
    found = edited_rules("rules/admission/instances.yaml", "  name: instances-mutation\n",
                         "  name: instances-mutation\n  bad: [unclosed\n")
    assert found == [f"rules/admission/instances.yaml:{line}:5 <document>: not valid YAML: expected ',' or "
                     "']', but got ':'"]


def test_a_misspelt_params_table_is_one_finding_at_params_from(edited_rules):
    line = shipped_line("rules/admission/instances-validation.yaml", "paramsFrom: [instance-common]")
    found = edited_rules("rules/admission/instances-validation.yaml", "paramsFrom: [instance-common]",
                         "paramsFrom: [instance-commons]")
    assert found == [f"rules/admission/instances-validation.yaml:{line}:15 spec.paramsFrom: no AdmissionParams "
                     "named 'instance-commons' (AdmissionParams: instance-common, node-pin, resource-keys)"]


def test_a_preset_tier_error_points_at_the_tier(edited_rules):
    line = shipped_line("rules/pools/presets.yaml", "fallbackTier: fallback")
    found = edited_rules("rules/pools/presets.yaml", "fallbackTier: fallback", "fallbackTier: huge")
    assert found == [f"rules/pools/presets.yaml:{line}:17 spec.fallbackTier: unknown tier 'huge' "
                     "(tiers: fallback, large, medium, small, xlarge)"]


def test_a_validations_from_name_no_document_has_is_a_finding_at_it(edited_rules):
    """One policy in several files (runtime/rules/includes.py): a misspelt name is found where it is written."""
    line = shipped_line("rules/admission/instances-validation.yaml", "validationsFrom: instance-volumes")
    named = shipped_line("rules/admission/instances-volumes.yaml", "  name: instance-volumes\n")
    found = edited_rules("rules/admission/instances-validation.yaml", "validationsFrom: instance-volumes",
                         "validationsFrom: instance-volume")
    assert found == [
        f"rules/admission/instances-validation.yaml:{line}:24 spec.validations[11].validationsFrom: no "
        "AdmissionValidations named 'instance-volume' (AdmissionValidations: instance-resources, instance-volumes)",
        f"rules/admission/instances-volumes.yaml:{named}:9 metadata.name: AdmissionValidations 'instance-volumes' "
        "is named by no AdmissionPolicy (validationsFrom): its validations never run"]


def test_a_finding_in_an_included_file_is_placed_in_that_file(edited_rules):
    """The static checks read an AdmissionValidations document in the policy that names it, with that policy's
    variables, and place a finding at its own file, line and column."""
    old = "expression: variables.mountPath != ''"
    line = shipped_line("rules/admission/instances-volumes.yaml", old)
    found = edited_rules("rules/admission/instances-volumes.yaml", old, "expression: variables.mountPth != ''")
    assert len(found) == 1
    assert found[0].startswith(f"rules/admission/instances-volumes.yaml:{line}:33 spec.validations[2].validations[0]"
                               ".expression: variables.mountPth is not declared here (declared: ")
