"""`accelpolicy admit` and `accelpolicy test` on the seed, and broken admission rule files."""
from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from runtime.cli import main
from runtime.engine.policy import Policy
from runtime.rules.loader import DEFAULT_RULES_DIR, RuleLoadError, load_rules
from runtime.ruletests import Case, Runner, load_cases
from tests.rulelines import shipped_line

ROOT = Path(DEFAULT_RULES_DIR).parent
SEED = ROOT.parent / "shared" / "seed" / "objects"  # shared/ sits beside the clone (worktree and CI)
SNAPSHOT = str(ROOT / "tests" / "fixtures" / "seed" / "common")

STEP3 = """\
apiVersion: worker.gpustack.ai/v1
kind: Instance
metadata: {name: sliced-demo, namespace: default}
spec:
  type: gpustack--nvidia-a10g-linux-amd64
  image: ubuntu:24.04
  command: [sleep, "86400"]
  resources: {accelerator: "1", acceleratorSlicedMemoryPercentage: 20, acceleratorSlicedCoresPercentage: 100}
  volume: {ephemeral: {capacity: 1Gi}}
"""
TWO_FAMILIES = """\
apiVersion: v1
kind: Pod
metadata: {name: two-families, namespace: default, labels: {kueue.x-k8s.io/queue-name: gpustack-fnv64-c4680bb149644f1c}}
spec:
  containers: [{name: main, image: x, resources: {limits: {nvidia.com/gpu: "1", nvidia.com/gpu.shared: "2"}}}]
"""


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_admit_step3_prints_the_defaulted_instance_patch(tmp_path):
    result = CliRunner().invoke(main, ["admit", "-f", _write(tmp_path, "i.yaml", STEP3), "--snapshot", SNAPSHOT])
    assert result.exit_code == 0, result.output
    review = json.loads(result.output)
    assert review["request"]["object"]["metadata"]["name"] == "sliced-demo"
    assert review["response"]["allowed"] is True
    assert json.loads(base64.b64decode(review["response"]["patch"])) == [
        {"op": "add", "path": "/spec/imagePullPolicy", "value": "IfNotPresent"},
        {"op": "add", "path": "/spec/resources/cpu", "value": "1"},
        {"op": "add", "path": "/spec/resources/localStorage", "value": "15Gi"},
        {"op": "add", "path": "/spec/resources/ram", "value": "12Gi"},
        {"op": "add", "path": "/spec/volumeMount", "value": "/workspace"}]


def test_admit_text_shows_the_decoded_patch(tmp_path):
    result = CliRunner().invoke(main, ["admit", "-f", _write(tmp_path, "i.yaml", STEP3), "--snapshot", SNAPSHOT,
                                       "-o", "text"])
    assert result.exit_code == 0
    assert '{"op": "add", "path": "/spec/resources/ram", "value": "12Gi"}' in result.output


def test_admit_two_families_prints_the_rule_1_denial(tmp_path):
    result = CliRunner().invoke(main, ["admit", "-f", _write(tmp_path, "p.yaml", TWO_FAMILIES), "--snapshot", SNAPSHOT,
                                       "-o", "text"])
    assert result.exit_code == 1
    assert ('message:  Pod "two-families" is invalid: spec: Forbidden: a Pod may request only one accelerator '
            "family, found [exclusive shared]") in result.output


@pytest.mark.skipif(not SEED.is_dir(), reason="shared seed not present")
def test_admit_seed_pinned_demo_is_refused_while_the_setting_is_false():
    result = CliRunner().invoke(main, ["admit", "-f", str(SEED / "step6-instance-pinned-demo.yaml"),
                                       "--snapshot", SNAPSHOT, "-o", "json"])
    assert result.exit_code == 1
    assert json.loads(result.output)["response"]["status"]["message"] == (
        'Instance.worker.gpustack.ai "pinned-demo" is invalid: spec.additionalVolumes[2].hostPath: Forbidden: '
        'mounting a host path is not allowed: enable the "instance-host-path-volume-allowed" setting to allow it')


def test_admit_bad_input_exits_2(tmp_path):
    assert CliRunner().invoke(main, ["admit", "-f", str(tmp_path / "missing.yaml")]).exit_code == 2
    two = _write(tmp_path, "two.yaml", STEP3 + "---\n" + STEP3)
    assert CliRunner().invoke(main, ["admit", "-f", two]).exit_code == 2


@pytest.mark.parametrize("text", [
    "apiVersion: v1\nkind: Pod\nmetadata: oops\nspec: {containers: []}\n",   # docs/webhook-hardening.md "Malformed objects never pass: shape checks": was a traceback
    "just a string\n",
    "apiVersion: v1\nkind: Pod\nmetadata: {namespace: default}\n",
])
@pytest.mark.parametrize("flag", ["-f", "--old"])
def test_admit_names_a_file_that_is_not_an_object(tmp_path, text, flag):
    bad = _write(tmp_path, "bad.yaml", text)
    good = _write(tmp_path, "i.yaml", STEP3)
    args = ["-f", bad, "--old", good] if flag == "-f" else ["-f", good, "--old", bad]
    result = CliRunner().invoke(main, ["admit", *args])
    assert result.exit_code == 2
    assert result.stderr == f"error: {bad}: not a Kubernetes object (needs kind and metadata.name)\n"


def test_rule_test_command_passes_on_the_repository_rules():
    result = CliRunner().invoke(main, ["test", str(DEFAULT_RULES_DIR), "-k", "pods-seed"])
    assert result.exit_code == 0, result.output
    n = len([c for c in load_cases(DEFAULT_RULES_DIR) if "pods-seed" in c.id])
    assert result.output.strip().splitlines()[-1] == f"{n} passed, 0 failed, {n} cases"


def test_rule_test_command_names_a_suite_file_that_is_not_yaml(tmp_path):
    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules)
    suite = rules / "tests" / "admission" / "broken.yaml"
    suite.write_text("apiVersion: v1\nkind: AdmissionTests\nspec: [unclosed\n  cases: {\n")
    result = CliRunner().invoke(main, ["test", str(rules)])
    assert result.exit_code == 2
    assert result.output == f"error: {suite}:4:8: not valid YAML: expected ',' or ']', but got ':'\n"


def test_runner_reports_a_wrong_expectation():
    runner = Runner(Policy(load_rules()), ROOT)
    case = Case(suite="s", name="n", file="f", operation="CREATE", snapshot=(), derive=False, old_object=None,
                object={"apiVersion": "gpustack.ai/v1", "kind": "Setting",
                        "metadata": {"name": "instance-privileged-allowed", "namespace": "gpustack-system"},
                        "spec": {"value": "maybe"}},
                expect={"allowed": True, "patch": []})
    result = runner.run(case)
    assert not result.passed
    assert result.problems[0].startswith("allowed: want True, got False")


def test_broken_admission_rule_file_is_refused_with_file_line_and_path(tmp_path):
    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules)
    path = rules / "admission" / "settings.yaml"
    text = path.read_text().replace("expression: variables.name in params.settingCatalog.names",
                                    "expression: variables.name in (")
    path.write_text(text)
    with pytest.raises(RuleLoadError) as info:
        load_rules(rules)
    problem = info.value.problems[0]
    assert problem.file.endswith("admission/settings.yaml")
    assert problem.path == "spec.validations[2].expression"
    assert problem.line == text.splitlines().index("      expression: variables.name in (") + 1


POD = """\
apiVersion: v1
kind: Pod
metadata: {name: demo, namespace: default, labels: {kueue.x-k8s.io/queue-name: gpustack--nvidia-a10g-linux-amd64}}
spec:
  containers: [{name: c, image: busybox, resources: {limits: {nvidia.com/gpu: "1"}}}]
"""


def test_admit_exits_2_when_a_rule_fails_to_evaluate(tmp_path):
    """A rule that types clean but fails on this input (a division by zero): the review printed is the
    policy's failure-mode answer (500 for failurePolicy Fail), and the exit is 2, not 1 (denied)."""
    rules = tmp_path / "rules"
    shutil.copytree(ROOT / "rules", rules, ignore=shutil.ignore_patterns("tests"))
    pods = rules / "admission" / "pods-mutation.yaml"
    text = pods.read_text()
    old = "expression: variables.queueName == ''"
    assert old in text
    pods.write_text(text.replace(old, "expression: variables.queueName == '' "
                                      "|| 1 / (size(variables.queueName) - size(variables.queueName)) > 0", 1))
    pod = tmp_path / "pod.yaml"
    pod.write_text(POD)
    result = CliRunner().invoke(main, ["admit", "-f", str(pod), "--rules", str(rules), "--snapshot", SNAPSHOT, "-o", "text"])
    assert result.exit_code == 2, result.output
    assert "verdict:  denied (500 InternalError)" in result.output
    assert result.stderr.startswith("error: policy pods-mutation: a rule failed to evaluate: Internal error occurred: "
                                    "policy pods-mutation: rules/admission/pods-mutation.yaml:"
                                    f"{shipped_line('rules/admission/pods-mutation.yaml', old)} ")


NAMES_SUITE = """\
apiVersion: rules.accelpolicy.dev/v1alpha1
kind: AdmissionTests
metadata: {name: names}
spec:
  snapshot: [tests/fixtures/seed/common]
  objectTemplate:
    apiVersion: v1
    kind: Pod
    metadata: {name: demo, namespace: default, labels: {kueue.x-k8s.io/queue-name: gpustack-fnv64-c4680bb149644f1c}}
  cases:
    - name: two families
      object: {spec: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: "1", nvidia.com/gpu.shared: "1"}}}]}}
      expect: {allowed: false, rules: [RULES]}
"""


def _names_suite(tmp_path, rules_line: str) -> tuple[Path, Path]:
    """A copy of the rules (without their suites) and one suite whose case expects ``rules_line``."""
    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules, ignore=shutil.ignore_patterns("tests"))
    suite = rules / "tests" / "admission" / "names.yaml"
    suite.parent.mkdir(parents=True)
    suite.write_text(NAMES_SUITE.replace("RULES", rules_line))
    return rules, suite


def test_a_rule_test_naming_the_current_rule_passes_without_a_warning(tmp_path):
    rules, _ = _names_suite(tmp_path, "one-accelerator-family")
    result = CliRunner().invoke(main, ["test", str(rules)])
    assert result.exit_code == 0, result.output
    assert result.stdout == "1 passed, 0 failed, 1 cases\n"
    assert "warning" not in result.stderr


def test_a_rule_test_naming_a_removed_former_name_fails_like_any_unknown_name(tmp_path):
    """The numbered names (rule-1a, ...) and formerNames are gone (docs/rule-authoring.md "Naming a rule")."""
    rules, suite = _names_suite(tmp_path, "rule-1a")
    result = CliRunner().invoke(main, ["test", str(rules)])
    assert result.exit_code == 1
    assert result.stdout == (
        f"FAIL names::two families ({suite})\n"
        "  rules: no rule is named 'rule-1a' (a validation, mutation or mutation/denial of the rules, "
        "or shape, rule-error, budget-exceeded)\n"
        "0 passed, 1 failed, 1 cases\n")
    [case] = load_cases(rules)
    assert not Runner(Policy(load_rules(rules)), ROOT).run(case).passed


def test_a_rule_test_naming_another_rule_fails_with_both_lists(tmp_path):
    rules, _ = _names_suite(tmp_path, "one-container-group")   # not what fails here
    result = CliRunner().invoke(main, ["test", str(rules)])
    assert result.exit_code == 1
    assert result.stdout.splitlines()[1:4] == [
        "  rules:", '    want ["one-container-group"]', '    got  ["one-accelerator-family"]']


def test_a_rule_test_naming_an_unknown_rule_fails_and_says_so(tmp_path):
    rules, suite = _names_suite(tmp_path, "rule-99")
    result = CliRunner().invoke(main, ["test", str(rules)])
    assert result.exit_code == 1
    assert result.stdout == (
        f"FAIL names::two families ({suite})\n"
        "  rules: no rule is named 'rule-99' (a validation, mutation or mutation/denial of the rules, "
        "or shape, rule-error, budget-exceeded)\n"
        "0 passed, 1 failed, 1 cases\n")
    assert "warning" not in result.stderr
