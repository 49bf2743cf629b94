"""`accelpolicy agent --dry-run`, backend selection and facts-document errors."""
from __future__ import annotations

import yaml
from click.testing import CliRunner

import pytest

from probes.backend import select_backend
from probes.fake import RecordedBackend, load_document, recorded
from probes.nvml import NvmlBackend
from runtime.cli import main
from runtime.model.facts import FactsError, parse_facts

from tests.agent.conftest import fixture_object


def _dry_run(*args, env=None):
    result = CliRunner().invoke(main, ["agent", "--dry-run", *args], env=env)
    return result


def test_dry_run_prints_the_seed_objects_without_a_cluster():
    result = _dry_run("--node", "node-a10g", "--backend", "fake", "--facts", str(recorded("node-a10g")),
                      "--node-capacity-cpu", "4", "--node-label", "gpustack.ai/managed=true",
                      "--node-label", "kubernetes.io/arch=amd64", "--node-label", "kubernetes.io/os=linux")
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.stdout))
    assert [d["kind"] for d in docs] == ["NodeFeature", "NodeFeature", "Node", "Devices"]
    for nf in docs[:2]:
        want = fixture_object("nodefeatures.yaml", nf["metadata"]["name"])
        assert nf["spec"] == want["spec"] and nf["metadata"]["labels"] == want["metadata"]["labels"]
        assert nf["metadata"]["ownerReferences"][0]["kind"] == "Node"
    want = fixture_object("devices.yaml", "node-a10g")
    assert {k: docs[3][k] for k in ("spec", "status")} == {k: want[k] for k in ("spec", "status")}
    assert docs[3]["metadata"]["labels"] == want["metadata"]["labels"]
    assert docs[2]["metadata"]["annotations"] == {"feature.gpustack.ai/cpu-name": "AMD EPYC 7R32",
                                                  "feature.gpustack.ai/cpu-family": "23"}


def test_dry_run_backend_from_environment():
    env = {"ACCELPOLICY_NVML_BACKEND": "fake", "ACCELPOLICY_RECORDED_FACTS": str(recorded("node-cpu"))}
    result = _dry_run("--node", "node-cpu", "--node-capacity-cpu", "16", "-o", "json", env=env)
    assert result.exit_code == 0, result.output
    import json
    listing = json.loads(result.stdout)
    assert (listing["apiVersion"], listing["kind"]) == ("v1", "List")  # kubectl apply -f - accepts it
    docs = listing["items"]
    assert [d["kind"] for d in docs] == ["NodeFeature", "Node"]
    assert docs[0]["spec"]["labels"]["general.feature.gpustack.ai/amd-epyc-7r13.count"] == "16"


def test_fake_backend_without_facts_is_a_usage_error():
    result = _dry_run("--node", "n", "--backend", "fake", "--node-capacity-cpu", "1",
                      env={"ACCELPOLICY_RECORDED_FACTS": ""})
    assert result.exit_code == 2
    assert "needs recorded facts" in result.output


def test_a_duplicated_uuid_is_named_in_kubernetes_words_not_as_a_usage_error(tmp_path):
    """docs/node-facts-robustness.md "`get` shows what the cluster holds": it read `Usage: ... Error: FILE: accelerators: Value error, accelerator uuid 'X' listed
    twice` (the command line was fine; the file was not, and pydantic's prefix leaked)."""
    doc = load_document(recorded("node-t4-b"))
    doc["accelerators"][3]["uuid"] = doc["accelerators"][1]["uuid"]
    path = tmp_path / "node-t4-b.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = _dry_run("--node", "node-t4-b", "--backend", "fake", "--facts", str(path), "--node-capacity-cpu", "48")
    assert result.exit_code == 2
    assert "Usage:" not in result.output and "Value error" not in result.output
    assert result.stderr == (f"error: recorded facts refused:\n{path}: accelerators[3].uuid: Duplicate value: "
                             f'"{doc["accelerators"][1]["uuid"]}" (accelerators[1] has it too; each accelerator has '
                             "its own uuid)\n")


def test_a_duplicated_index_is_refused_as_a_duplicated_uuid_is(tmp_path):
    """Two accelerators at ``index: 0`` were accepted: the Devices object and its ledger listed two rows of
    index 0 (node-t4-b's third T4 took the first one's device number)."""
    doc = load_document(recorded("node-t4-b"))
    doc["accelerators"][2]["index"] = 0
    path = tmp_path / "node-t4-b.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = _dry_run("--node", "node-t4-b", "--backend", "fake", "--facts", str(path), "--node-capacity-cpu", "48")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (f"error: recorded facts refused:\n{path}: accelerators[2].index: Duplicate value: 0 "
                             "(accelerators[0] has it too; each accelerator has its own index)\n")


def test_a_probe_with_a_duplicated_index_costs_only_its_node_accelerator_objects(tmp_path):
    """The running agent: a probe answering two accelerators at one index leaves the accelerator part
    unknown (Devices and the device-manager NodeFeature untouched), as any refused fact does; the CPU
    facts stay."""
    from runtime.agent.runner import NodeAgent
    from runtime.engine.policy import Policy
    from runtime.rules.loader import load_rules
    from tests.agent.conftest import seed_node

    backend = RecordedBackend(recorded("node-t4-b"))
    agent = NodeAgent(Policy(load_rules()), backend, "node-t4-b", node=seed_node("node-t4-b"))
    heard: list[tuple[str, str]] = []
    agent.log.listeners.append(lambda topic, level: heard.append((topic, level)))
    facts, known = agent.probe()
    assert (known, [a.index for a in facts.accelerators], heard) == (True, [0, 1, 2, 3], [])
    backend.document["accelerators"][3]["index"] = 1
    facts, known = agent.probe()
    assert (known, facts.accelerators, facts.cpu.modelName) == (False, [], "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz")
    assert heard == [("facts", "ERROR")]
    assert not agent.log.healthy("facts")


def test_backend_selection(monkeypatch):
    monkeypatch.delenv("ACCELPOLICY_NVML_BACKEND", raising=False)
    assert isinstance(select_backend(), NvmlBackend)
    assert isinstance(select_backend("fake", str(recorded("node-t4-a"))), RecordedBackend)
    with pytest.raises(ValueError, match="unknown probe backend 'gpu'"):
        select_backend("gpu")


def test_facts_errors_name_the_file_and_field(tmp_path):
    doc = load_document(recorded("node-a10g"))
    doc["accelerators"][0]["memoryMib"] = "lots"
    with pytest.raises(FactsError, match=r"node-a10g.yaml: accelerators\[0\]\.memoryMib: "):
        parse_facts(doc, "node-a10g.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just a list\n")
    with pytest.raises(ValueError, match="bad.yaml: a facts document must be a mapping"):
        load_document(bad)
    with pytest.raises(ValueError, match="no recorded facts 'node-x'"):
        recorded("node-x")


def test_every_recorded_document_is_valid():
    from probes.fake import RECORDED_DIR
    stems = sorted(p.stem for p in RECORDED_DIR.glob("*.yaml"))
    assert stems == ["node-a100", "node-a10g", "node-cpu", "node-h100-mig-mixed", "node-h100-mig-off",
                     "node-h100-mig-on", "node-l4", "node-t4-a", "node-t4-b"]
    for stem in stems:
        assert parse_facts(load_document(recorded(stem)), stem).node


def test_facts_of_the_wrong_shape_are_refused_naming_the_file(tmp_path):
    bad = tmp_path / "facts.yaml"
    bad.write_text("node: n\ncpu: {vendorId: AuthenticAMD, modelName: AMD EPYC 7R32}\ndevices: []\n")
    result = _dry_run("--node", "n", "--backend", "fake", "--facts", str(bad), "--node-capacity-cpu", "1")
    assert result.exit_code == 2
    assert f"{bad}: devices: Extra inputs are not permitted" in result.output


def test_facts_of_another_node_are_refused():
    result = _dry_run("--node", "node-cpu", "--backend", "fake", "--facts", str(recorded("node-a10g")),
                      "--node-capacity-cpu", "4")
    assert result.exit_code == 2
    assert "the recorded facts describe node 'node-a10g', not --node 'node-cpu'" in result.output
