"""`accelpolicy lint DIR` and the loader's static checks (docs/rule-authoring.md "What lint checks"): every problem of every file,
``file:line:col field.path: message``, CEL names checked in every branch without evaluating anything."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from runtime.cli import main
from runtime.rules.loader import DEFAULT_RULES_DIR, RuleLoadError, load_rules


@pytest.fixture()
def rules_copy(tmp_path) -> Path:
    root = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, root)
    return root


def _edit(path: Path, old: str, new: str, marker: str) -> tuple[int, int]:
    """Replace ``old`` once; return the 1-based line and column of ``marker`` in the new text."""
    text = path.read_text()
    assert text.count(old) == 1, old
    text = text.replace(old, new)
    path.write_text(text)
    at = text.index(new) + new.index(marker)
    return text.count("\n", 0, at) + 1, at - text.rfind("\n", 0, at)


def _lint(root: Path):
    return CliRunner().invoke(main, ["lint", str(root)])


def test_the_shipped_rules_are_clean():
    result = _lint(DEFAULT_RULES_DIR)
    assert result.exit_code == 0, result.stdout
    assert result.stdout == ""
    assert result.stderr == f"reading rules from {DEFAULT_RULES_DIR}\n{DEFAULT_RULES_DIR}: clean\n"


def test_every_problem_of_every_file_at_once(rules_copy):
    pods = rules_copy / "admission" / "pods-mutation.yaml"
    # an undeclared variable in the untaken branch of a conditional (only the else side is ever false)
    l1, c1 = _edit(pods, "              ? variables.memoryPercent\n",
                   "              ? variables.memoryPercentt\n", "memoryPercentt")
    l2, c2 = _edit(pods, "expression: \"dig(object, ['metadata', 'labels', params.labels.keys.queueName], '')\"",
                   "expression: \"dig(object, ['metadata', 'labels', params.labelz.keys.queueName], '')\"", "labelz")
    derivation = rules_copy / "pools" / "derivation.yaml"
    l3, c3 = _edit(derivation, "entrance: 'entrancePrefix + fnv64a(name)'",
                   "entrance: 'entrancePrefix + fnv64b(nam)'", "fnv64b")
    c4 = c3 + len("fnv64b(")
    l5, c5 = _edit(derivation, "generalGroup: 'aware ? gKey : \"generic\"'",
                   "generalGroup: 'aware ? gKey : \"generic\" +* x'", "*")
    pod = rules_copy / "instances" / "pod.yaml"
    l6, c6 = _edit(pod, "setting: instance-general-resources-overcommit", "setting: instance-overcommit",
                   "instance-overcommit")
    workloads = rules_copy / "admission" / "workloads.yaml"
    text = workloads.read_text()
    assert "settings[params.setting]" in text
    params_line = next(line for line in text.splitlines() if line.strip().startswith("setting: "))
    l7, c7 = _edit(workloads, params_line, params_line.split(":")[0] + ": no-such-setting", "no-such-setting")
    result = _lint(rules_copy)
    assert result.exit_code == 1
    settings = ", ".join(sorted(s.name for s in load_rules().get("SettingCatalog").settings))
    wtext = workloads.read_text()
    at = wtext.index("settings[params.setting]") + len("settings[params.")
    l8, c8 = wtext.count("\n", 0, at) + 1, at - wtext.rfind("\n", 0, at)
    lines = result.stdout.splitlines()
    fold = [m.name for m in load_rules().get("AdmissionPolicy", "pods-mutation").mutations].index("slice-fold")
    assert lines[:2] == [
        f"rules/admission/pods-mutation.yaml:{l2}:{c2} spec.variables[0].expression: params.labelz is not "
        "declared here (declared: bytesPerMib, constants, controller, controllerUsers, derivation, exceptions, "
        "labels, manufacturers, nodePin, resourceKeys, settingCatalog)",
        f"rules/admission/pods-mutation.yaml:{l1}:{c1} spec.mutations[{fold}].variables[3].expression: "
        "variables.memoryPercentt is not declared here (declared: affinity, containers, demand, instanceType, "
        "instanceTypeName, key, lookupError, memory, memoryError, memoryMib, memoryMibAsked, memoryPercent, "
        "percentRange, pin, queueName, sharedCount, vramError, vramErrors, vramMib)",
    ]
    assert lines[2] == (f"rules/admission/workloads.yaml:{l8}:{c8} spec.variables[1].expression: params.setting "
                        f"names setting 'no-such-setting', which is not in the setting catalog (settings: {settings})")
    assert (l7, c7) < (l8, c8)  # the params entry itself is data; the expression reading it is the finding
    assert lines[3:] == [
        f"rules/instances/pod.yaml:{l6}:{c6} spec.overcommit.setting: unknown setting 'instance-overcommit' "
        f"(settings: {settings})",
        f"rules/pools/derivation.yaml:{l5}:{c5} spec.generalGroup: CEL syntax error: unexpected '*' (expected "
        "one of: BANG, BOOL_LIT, BYTES_LIT, DOT, FLOAT_LIT, IDENT, INT_LIT, LBRACE, LPAR, LSQB, MINUS, "
        "MLSTRING_LIT, STRING_LIT, UINT_LIT)",
        f"rules/pools/derivation.yaml:{l3}:{c3} spec.entrance: unknown function 'fnv64b'",
        f"rules/pools/derivation.yaml:{l3}:{c4} spec.entrance: undeclared name 'nam' (names here: entrancePrefix, name)",
    ]
    assert result.stderr == f"reading rules from {rules_copy}\n7 problems in 4 file(s)\n"
    # the loader refuses the same set with the same lines
    with pytest.raises(RuleLoadError) as err:
        load_rules(rules_copy)
    assert [str(p) for p in err.value.problems] == lines


def test_names_are_scoped_item_outside_foreach_and_comprehension_variables(rules_copy):
    """``item`` outside a forEach, and a macro's variable used outside its macro, are undeclared."""
    pods = rules_copy / "admission" / "pods-mutation.yaml"
    line, col = _edit(pods, "      expression: \"size(lookups.fronting) == 1 ? lookups.fronting[0] : {}\"",
                      "      expression: \"size(lookups.fronting) == 1 ? lookups.fronting.map(f, f)[0] : f\"",
                      ": f\"")
    problems = [str(p) for p in _problems(rules_copy)]
    assert len(problems) == 1
    index = [v.name for v in load_rules().get("AdmissionPolicy", "pods-mutation").variables].index("instanceType")
    assert problems[0].startswith(f"rules/admission/pods-mutation.yaml:{line}:{col + 2} "
                                  f"spec.variables[{index}].expression: "
                                  "undeclared name 'f' (names here: lookups, object, oldObject, params, request, "
                                  "settings, variables)")


def _problems(root):
    with pytest.raises(RuleLoadError) as err:
        load_rules(root)
    return err.value.problems


def test_a_lookup_cannot_read_a_later_lookup_or_a_variable(rules_copy):
    workloads = rules_copy / "admission" / "workloads.yaml"
    text = workloads.read_text()
    first = text.index("nameExpression:")
    old = text[first: text.index("\n", first)]
    new = "nameExpression: variables.x"
    line, col = _edit(workloads, old, new, ".x")
    (problem,) = _problems(rules_copy)
    assert str(problem) == (f"rules/admission/workloads.yaml:{line}:{col + 1} spec.lookups[0].nameExpression: "
                            "variables.x is not declared here (declared: none)")


def test_unreadable_directory_exits_2(tmp_path):
    result = _lint(tmp_path / "missing")
    assert result.exit_code == 2
    assert result.stderr == f"error: {tmp_path / 'missing'}: not a readable rules directory\n"


def test_the_static_check_knows_every_shared_param_the_vocabulary_gives():
    """lint's declared-params list (runtime/rules/checks.py) and the params the loader links into every
    AdmissionPolicy (runtime/rules/vocabulary.py) are the same names: a new shared param cannot be
    refused by lint while the engine would give it."""
    from runtime.rules.loader import load_rules
    from runtime.rules.vocabulary import VOCABULARY_PARAMS, admission_params

    assert tuple(admission_params(load_rules())) == VOCABULARY_PARAMS
