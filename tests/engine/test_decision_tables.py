"""Decision tables checked like CEL (docs/rule-authoring.md "Decision tables"): each cell against its fact's
type and values, unknown facts and outputs, rows that leave some facts unmatched, a table missing, each a
finding at file:line:col; every command answers a broken table with its findings, never a traceback; a
fuzz over table edits finds no traceback and no table that lints clean and then fails to decide."""
from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.cli import main
from runtime.engine.decisions import DecisionTable
from runtime.engine.instances.podstatus import phase_from_pod
from runtime.engine.policy import Policy
from runtime.engine.pools.derive import derive
from runtime.model.decisiontables import INSTANCE_TYPE_PHASES, TABLES
from runtime.rules.loader import load_rules, rule_problems
from runtime.snapshots import load_snapshot
from tests.rulelines import shipped_line

ROOT = Path(__file__).resolve().parents[2]
PHASE = "rules/pools/phase.yaml"


FACTS = "deleting, stopPolicy, reserved, queue, queueMessage, incomplete, incompleteMessage, flavors"
EDITS = {   # what: (old, new, column, the finding after file:line:column)
    "an unquoted True": ('when: {queue: "True"}', "when: {queue: True}", 21,
                         "spec.rows[7].when.queue: type mismatch: fact 'queue' is a string, true is a bool: quote "
                         'it, "True"'),
    "a misspelt output": ("then: {phase: Active}", "then: {phse: Active}", 20,
                          "spec.rows[7].then.phse: unknown output 'phse' (the InstanceType status (controller) reads "
                          "phase, phaseMessage)"),
    "an unknown fact in a row": ("when: {stopPolicy: Hold}", "when: {stopPolcy: Hold}", 25,
                                 f"spec.rows[5].when.stopPolcy: unknown fact 'stopPolcy' (facts: {FACTS})"),
    "a declared fact the reader does not give": (
        "facts: [deleting, stopPolicy,", "facts: [deleting, stopPolicy, paused,", 33,
        f"spec.facts[2]: unknown fact 'paused': the InstanceType status (controller) gives {FACTS}"),
    "a value its fact never takes": ('when: {queue: "False"}', 'when: {queue: "Flase"}', 21,
                                     "spec.rows[8].when.queue: fact 'queue' is one of \"True\", \"False\", "
                                     '"Unknown", "Missing": "Flase" is none of them (this row never matches)'),
    "a phase the CRD refuses": ("then: {phase: Activating}", "then: {phase: Activatin}", 21,
                                "spec.rows[9].then.phase: output 'phase' is one of \"Active\", \"Inactive\", "
                                '"Draining", "Activating": "Activatin" is none of them'),
    "a copy of an undeclared fact": ("phaseMessage: $queueMessage", "phaseMessage: $queueMesage", 45,
                                     "spec.rows[8].then.phaseMessage: unknown fact 'queueMesage' in '$queueMesage' "
                                     f"(facts: {FACTS})"),
    "a table no component reads": ("  name: instancetype-phase", "  name: instancetype-phases", 9,
                                   "metadata.name: no component reads a DecisionTable named 'instancetype-phases' "
                                   "(read: instance-phase, instancetype-phase)"),
}


@pytest.mark.parametrize("what", list(EDITS))
def test_a_broken_cell_is_one_finding_at_its_file_line_column(edited_rules, what):
    old, new, column, finding = EDITS[what]
    assert edited_rules(PHASE, old, new) == [f"{PHASE}:{shipped_line(PHASE, old.strip())}:{column} {finding}"]


def test_rows_that_leave_some_facts_unmatched_are_a_finding(edited_rules):
    old = "    - name: activating\n      when: {}\n"
    assert edited_rules(PHASE, old, "    - name: activating\n      when: {queue: Unknown}\n") == [
        f"{PHASE}:{shipped_line(PHASE, '- name: terminating')}:5 spec.rows: no row matches {{deleting: false, stopPolicy: "
        '"None", reserved: true, queue: "Missing", incomplete: false, flavors: true} (the reader would fail there): '
        "add a last row "
        "with when: {}"]


def test_a_table_a_component_reads_missing_is_a_finding(tmp_path):
    rules = tmp_path / "rules"
    shutil.copytree(ROOT / "rules", rules, ignore=shutil.ignore_patterns("tests"))
    (rules / "pools" / "phase.yaml").unlink()
    assert [str(p) for p in rule_problems(rules, cache=None)[0]] == [
        f"{rules}:0:0 <directory>: no DecisionTable named 'instancetype-phase': the InstanceType status "
        "(controller) reads it"]


def test_the_instancetype_phases_are_the_crds():
    crd = yaml.safe_load((ROOT / "crds/worker.gpustack.ai_instancetypes.yaml").read_text())
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert tuple(status["phase"]["enum"]) == INSTANCE_TYPE_PHASES


def test_the_engine_gives_each_table_exactly_its_declared_facts(monkeypatch):
    given_facts: dict[str, list[dict]] = {}
    decide = DecisionTable.decide

    def spy(self, facts):
        given_facts.setdefault(self.name, []).append(dict(facts))
        return decide(self, facts)

    monkeypatch.setattr(DecisionTable, "decide", spy)
    policy = Policy(load_rules())
    derive(policy, load_snapshot([ROOT / "tests/fixtures/seed/common"]))
    phase_from_pod(policy, {"status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}})
    assert sorted(given_facts) == sorted(TABLES)
    for name, calls in given_facts.items():
        contract = TABLES[name]
        for facts in calls:
            assert list(facts) == list(contract.facts)
            for fact, value in facts.items():
                assert type(value) is contract.facts[fact].type, (name, fact, value)
                assert not contract.facts[fact].values or value in contract.facts[fact].values, (name, fact)


BAD_TABLE = ("when: {stopPolicy: HoldAndDrain, reserved: true}", "when: {stopPolicy: HoldAndDrain, held: true}")


@pytest.mark.parametrize("command", [
    ["lint"], ["test"], ["get", "instancetypes", "--snapshot", "tests/fixtures/seed/common"],
    ["derive", "--snapshot", "tests/fixtures/seed/common"],
    ["diff", "--snapshot", "tests/fixtures/seed/common"]])
def test_every_command_answers_a_bad_table_with_its_finding(tmp_path, command):
    """An unknown fact (the commands printed a Python traceback): each command names the cell."""
    rules = tmp_path / "rules"
    shutil.copytree(ROOT / "rules", rules)
    phase = rules / "pools" / "phase.yaml"
    phase.write_text(phase.read_text().replace(*BAD_TABLE, 1))
    args = command[:1] + [str(rules)] + command[1:] if command[0] in ("lint", "test") else \
        command + ["--rules", str(rules)]
    result = CliRunner().invoke(main, args)
    output = result.output + (result.stderr if result.stderr_bytes else "")
    assert "Traceback" not in output and not isinstance(result.exception, (KeyError, AttributeError, TypeError))
    assert result.exit_code in (1, 2), output
    assert f"pools/phase.yaml:{shipped_line(PHASE, BAD_TABLE[0])}:46 spec.rows[2].when.held: unknown fact 'held'" \
        in output, output


# --- fuzz ---------------------------------------------------------------------------------------------
CONTRACT = TABLES["instancetype-phase"]
_SCALARS = st.one_of(st.booleans(), st.integers(-2, 2), st.none(), st.text("TrueFalsMingUnkow$ ", max_size=8),
                     st.sampled_from(["True", "False", "Unknown", "Missing", "None", "Hold", "HoldAndDrain"]),
                     st.sampled_from(list(INSTANCE_TYPE_PHASES)), st.lists(st.booleans(), max_size=2))
_FACTS = st.sampled_from(list(CONTRACT.facts) + ["held", "$and", "sid", ""])
_OUTPUTS = st.sampled_from(list(CONTRACT.outputs) + ["phse", "$x"])
_ROW = st.fixed_dictionaries({"name": st.text("abc-", min_size=1, max_size=4),
                              "when": st.dictionaries(_FACTS, _SCALARS, max_size=3),
                              "then": st.dictionaries(_OUTPUTS, st.one_of(_SCALARS, st.just("$queueMessage")),
                                                      max_size=2)})
_TABLE = st.fixed_dictionaries({"facts": st.lists(_FACTS, min_size=0, max_size=8, unique=True),
                                "rows": st.lists(_ROW, min_size=0, max_size=5)})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(table=_TABLE)
def test_fuzzed_tables_are_findings_or_decide_without_fail(tmp_path, table):
    """Any table: its findings are file:line:col lines (no exception escapes lint), and a table that lints
    clean decides every combination of its facts' values without an error."""
    document = {"apiVersion": "rules.accelpolicy.dev/v1alpha1", "kind": "DecisionTable",
                "metadata": {"name": "instancetype-phase"}, "spec": {"backend": "durable", **table}}
    rules = tmp_path / "rules"
    rules.mkdir(exist_ok=True)
    (rules / "phase.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    problems, ruleset = rule_problems(rules, cache=None)
    # the directory's own findings (the kinds a one-table directory lacks) aside: the table's, at its cells
    problems = [p for p in problems if p.file != str(rules)]
    for problem in problems:
        assert problem.file == "rules/phase.yaml" and problem.line > 0, problem
    if problems:
        return
    compiled = DecisionTable("instancetype-phase", ruleset.get("DecisionTable", "instancetype-phase"), 1)
    few = {name: ((True, False) if fact.type is bool else fact.values or ("x", "")) for name, fact in
           CONTRACT.facts.items()}
    for values in itertools.product(*few.values()):
        row, outputs = compiled.decide(dict(zip(few, values)))
        assert set(outputs) <= set(CONTRACT.outputs)
