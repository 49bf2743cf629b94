"""Bad input (docs/node-facts-robustness.md "Snapshot files"): snapshots and rule files that are broken give a clear error naming the
file and the object (or `file:line field.path: message` for rules), never a traceback; unknown kinds
are skipped with a warning; a broken rules copy never replaces rules already loaded.

Decision (documented here and in ``derive``): a ``.count`` label whose value is not an integer reads
as 0 (docs/concepts/pools-and-flavors.md "ResourceFlavors: what each node contributes"), so the node contributes no flavor of that kind, and ``derive`` adds a warning
naming the node, the key and the value, so the missing flavor is explained.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from runtime.engine.pools.derive import derive
from runtime.engine.policy import Policy
from runtime.engine.snapshot import Snapshot, SnapshotError
from runtime.rules.loader import DEFAULT_RULES_DIR, RuleLoadError, load_rules
from runtime.snapshots import load_snapshot

SEED = Path(__file__).resolve().parents[1] / "fixtures" / "seed" / "common"
T4_KEY = "acceleratable.feature.gpustack.ai/nvidia-tesla-t4.count"
CPU_KEY = "general.feature.gpustack.ai/amd-epyc-7r13.count"


@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy(load_rules())


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _seed_copy(tmp_path: Path) -> Path:
    root = tmp_path / "snapshot"
    shutil.copytree(SEED, root)
    return root


def _edit_docs(path: Path, edit) -> None:
    docs = list(yaml.safe_load_all(path.read_text()))
    for doc in docs:
        edit(doc)
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))


# -- snapshots -----------------------------------------------------------------------------------------
def test_malformed_yaml_names_file_and_line(tmp_path):
    bad = _write(tmp_path / "nodes.yaml", "apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n  labels: {a: b\n")
    with pytest.raises(SnapshotError) as err:
        load_snapshot([tmp_path])
    message = str(err.value)
    assert message.startswith(f"{bad}:")
    assert "not valid YAML or JSON" in message


def test_malformed_yaml_in_a_directory_is_refused_whole(tmp_path):
    """One broken file among good ones: the whole snapshot is refused, the broken file named."""
    root = _seed_copy(tmp_path)
    bad = _write(root / "zz-broken.yaml", "kind: Node\nmetadata:\n  name: x\n\tlabels: {}\n")
    with pytest.raises(SnapshotError) as err:
        load_snapshot([root])
    assert str(err.value).startswith(f"{bad}:4: not valid YAML or JSON")


NAMESPACE_OK = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ok\n---\n"
REFUSED = [  # (id, file text, message after "<file>: ")
    ("no-name", NAMESPACE_OK + "apiVersion: v1\nkind: Node\nmetadata:\n  labels: {a: b}\n",
     "Node at item 1 has no metadata.name"),
    ("no-kind", NAMESPACE_OK + "apiVersion: v1\nmetadata:\n  name: node-x\n",
     "item 1 (metadata.name node-x) has no kind"),
    ("not-an-object", "- just\n- a list\n", "item 0 is not an object (got list)"),
    ("int-label", f"apiVersion: v1\nkind: Node\nmetadata:\n  name: node-t4-b\n  labels:\n    {T4_KEY}: 4\n",
     f"Node node-t4-b: metadata.labels: label {T4_KEY} must be a string, got 4 (quote it in YAML)"),
    ("int-annotation", "apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n  annotations:\n"
                       "    feature.gpustack.ai/cpu-family: 25\n",
     "Node n1: metadata.annotations: annotation feature.gpustack.ai/cpu-family must be a string, got 25 "
     "(quote it in YAML)"),
]


@pytest.mark.parametrize("text, message", [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_object_refused_names_file_and_object(tmp_path, text, message):
    """Missing kind or metadata.name, a non-object document, a non-string label or annotation value:
    one SnapshotError naming the file, the object (kind and name, or its place in the file)."""
    bad = _write(tmp_path / "objs.yaml", text)
    with pytest.raises(SnapshotError) as err:
        load_snapshot([bad])
    assert str(err.value) == f"{bad}: {message}"


def test_non_string_nodefeature_label_is_refused(tmp_path):
    """NodeFeature ``spec.labels`` become Node labels; a YAML bool there (`true`, unquoted) would
    otherwise silently read as "True" and unmanage the node."""
    root = _seed_copy(tmp_path)

    def unquote(doc):
        if doc["metadata"]["name"] == "node-cpu-gpustack-worker":
            doc["spec"]["labels"]["gpustack.ai/managed"] = True
    _edit_docs(root / "nodefeatures.yaml", unquote)
    with pytest.raises(SnapshotError) as err:
        load_snapshot([root])
    assert str(err.value) == (f"{root / 'nodefeatures.yaml'}: NodeFeature gpustack-system/node-cpu-gpustack-worker: "
                              "spec.labels: label gpustack.ai/managed must be a string, got True (quote it in YAML)")


def _a10g(doc: dict) -> tuple[dict, dict]:
    """The spec and ledger entries of node-a10g's only accelerator."""
    return doc["spec"]["groups"][0]["accelerators"][0], doc["status"]["groups"][0]["accelerators"][0]


def _set_remaining(doc):
    _a10g(doc)[1]["remaining"] = "lots"


def _set_unhealthy(doc):
    _a10g(doc)[0]["status"]["unhealthy"] = "no"


def _groups_map(doc):
    doc["spec"]["groups"] = {"a10g": doc["spec"]["groups"][0]}


def _nameless_profile(doc):
    _a10g(doc)[1]["remainingProfiles"] = [{"count": 3}]


def _bool_count(doc):
    _a10g(doc)[0]["status"]["logicalSliced"]["count"] = True


BAD_DEVICES = [  # (id, edit of node-a10g's Devices, problem)
    ("ledger-remaining-text", _set_remaining,
     "status.groups[0].accelerators[0].remaining: must be an integer, got 'lots'"),
    ("unhealthy-text", _set_unhealthy,
     "spec.groups[0].accelerators[0].status.unhealthy: must be a boolean, got 'no'"),
    ("groups-not-a-list", _groups_map, "spec.groups: must be a list, got {'a10g': "),
    ("profile-without-name", _nameless_profile,
     "status.groups[0].accelerators[0].remainingProfiles[0].name: required"),
    ("count-is-bool", _bool_count,
     "spec.groups[0].accelerators[0].status.logicalSliced.count: must be an integer, got True"),
]


@pytest.mark.parametrize("edit, problem", [b[1:] for b in BAD_DEVICES], ids=[b[0] for b in BAD_DEVICES])
def test_devices_field_of_wrong_type_names_file_object_and_field(tmp_path, edit, problem):
    """A Devices field the four-view reads, of the wrong type: refused when the snapshot is read
    (not a traceback from derive), naming file, object and field path."""
    root = _seed_copy(tmp_path)

    def only_a10g(doc):
        if doc["metadata"]["name"] == "node-a10g":
            edit(doc)
    _edit_docs(root / "devices.yaml", only_a10g)
    with pytest.raises(SnapshotError) as err:
        load_snapshot([root])
    assert str(err.value).startswith(f"{root / 'devices.yaml'}: Devices node-a10g: {problem}")


def test_devices_fast_check_agrees_with_the_shape_walk():
    """The fast Devices check accepts every fixture the generic walk accepts, and rejects every
    broken case above (so the error always comes from the walk, with the field named)."""
    import copy

    from runtime.engine.snapshot import DEVICES_SHAPE, _devices_fit, _shape_problem

    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    good = [d for f in sorted(fixtures.rglob("devices.yaml")) for d in yaml.safe_load_all(f.read_text())]
    assert len(good) >= 9
    for doc in good:
        assert _shape_problem(doc, DEVICES_SHAPE, ()) is None
        assert _devices_fit(doc), doc["metadata"]["name"]
    a10g = next(d for d in good if d["metadata"]["name"] == "node-a10g")
    for _, edit, _ in BAD_DEVICES:
        broken = copy.deepcopy(a10g)
        edit(broken)
        assert not _devices_fit(broken)
        assert _shape_problem(broken, DEVICES_SHAPE, ()) is not None


def test_from_objects_names_origin():
    with pytest.raises(SnapshotError) as err:
        Snapshot.from_objects([{"kind": "Node", "metadata": {}}], origin="watch-cache")
    assert str(err.value) == "watch-cache: Node at item 0 has no metadata.name"


def test_unknown_kind_is_skipped_with_a_warning(policy, tmp_path):
    root = _seed_copy(tmp_path)
    _write(root / "extra.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: default\n")
    snapshot = load_snapshot([root])
    assert snapshot.count("Deployment") == 0
    warning = f"{root / 'extra.yaml'}: skipped Deployment default/web: kind Deployment is not used by accelpolicy"
    assert snapshot.warnings == (warning,)
    state = derive(policy, snapshot)
    assert warning in state.warnings
    # everything else derived as from the plain seed
    baseline = derive(policy, load_snapshot([SEED]))
    assert [it["status"]["summary"] for it in state.instance_types] == \
        [it["status"]["summary"] for it in baseline.instance_types]


def test_unparsable_accelerator_count_contributes_no_device_flavor(policy, tmp_path):
    """``.count: "four"`` on node-t4-b: no T4 device flavor from it, and a warning naming it."""
    root = _seed_copy(tmp_path)

    def four(doc):
        labels = (doc.get("spec") or {}).get("labels") or {}
        if doc["metadata"]["name"] == "node-t4-b-gpustack-device-manager":
            labels[T4_KEY] = "four"
    _edit_docs(root / "nodefeatures.yaml", four)
    state = derive(policy, load_snapshot([root]))
    flavors = [f["metadata"]["name"] for f in state.resource_flavors]
    assert "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-1d" in flavors
    assert not any(name.endswith("-4d") for name in flavors)
    assert state.warnings == [f"Node node-t4-b: label {T4_KEY}='four' is not an integer; "
                              "the node contributes no device flavor for nvidia-tesla-t4"]
    # its CPU flavor is unaffected (mixing on by default)
    assert "gpustack--intel-xeon-platinum-8259cl-linux-amd64-48c" in flavors


def test_unparsable_cpu_count_contributes_no_cpu_flavor(policy, tmp_path):
    """``.count: "sixteen"`` on node-cpu: no `…-16c` flavor, so the generic pool reads 48/56 (4+4+48)."""
    root = _seed_copy(tmp_path)

    def sixteen(doc):
        labels = (doc.get("spec") or {}).get("labels") or doc["metadata"].get("labels") or {}
        if CPU_KEY in labels:
            labels[CPU_KEY] = "sixteen"
    _edit_docs(root / "nodefeatures.yaml", sixteen)
    _edit_docs(root / "nodes.yaml", sixteen)
    state = derive(policy, load_snapshot([root]))
    assert not any(f["metadata"]["name"].endswith("-16c") for f in state.resource_flavors)
    (generic,) = [it for it in state.instance_types if it["metadata"]["name"] == "gpustack--generic-linux-amd64"]
    assert generic["status"]["summary"]["cpu"] == "48/56"
    assert state.warnings == [f"Node node-cpu: label {CPU_KEY}='sixteen' is not an integer; "
                              "the node contributes no CPU flavor"]


def test_seed_derives_without_warnings(policy):
    assert derive(policy, load_snapshot([SEED])).warnings == []


# -- rule files ------------------------------------------------------------------------------------------
@pytest.fixture
def rules_copy(tmp_path) -> Path:
    root = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, root)
    return root


def _replace(path: Path, old: str, new: str) -> int:
    """Replace ``old`` once; returns the 1-based line where it starts."""
    text = path.read_text()
    assert text.count(old) == 1, old
    line = text[: text.index(old)].count("\n") + 1
    path.write_text(text.replace(old, new))
    return line


def _problems(root: Path) -> list[str]:
    with pytest.raises(RuleLoadError) as err:
        load_rules(root)
    rendered = [str(p) for p in err.value.problems]
    assert str(err.value) == "rule files refused:\n" + "\n".join(f"  {p}" for p in rendered)
    return rendered


def test_rule_file_bad_yaml(rules_copy):
    line = _replace(rules_copy / "settings.yaml", "  secretName: gpustack-settings\n",
                    "  secretName: gpustack-settings: oops\n")
    assert _problems(rules_copy) == [
        f"rules/settings.yaml:{line}:32 <document>: not valid YAML: mapping values are not allowed here"]


def test_rule_file_unknown_field(rules_copy):
    line = _replace(rules_copy / "constants.yaml", "  sharesPerAccelerator: 10 ", "  sharesPerAcelerator: 10 ")
    problems = _problems(rules_copy)
    assert f"rules/constants.yaml:{line}:24 spec.sharesPerAcelerator: Extra inputs are not permitted" in problems
    # the misspelt field also leaves the real one missing: both are listed, nothing else
    assert all(p.startswith("rules/constants.yaml:") for p in problems)
    assert any("spec.sharesPerAccelerator: Field required" in p for p in problems)


def test_rule_file_cel_syntax_error(rules_copy):
    line = _replace(rules_copy / "pools" / "derivation.yaml", "  entrance: 'entrancePrefix + fnv64a(name)'",
                    "  entrance: 'entrancePrefix + + fnv64a(name'")
    (problem,) = _problems(rules_copy)
    # the second `+`: column 14 opens the quoted expression, the `+` is its 18th character
    assert problem.startswith(f"rules/pools/derivation.yaml:{line}:31 spec.entrance: CEL syntax error: "
                              "unexpected '+' (expected one of: ")


def test_rule_file_duplicate_document(rules_copy):
    """A second FourView named `fourview` in the same file: refused, both places named."""
    path = rules_copy / "pools" / "fourview.yaml"
    text = path.read_text()
    first_doc_line = text.index("apiVersion:")
    first_line = text[:first_doc_line].count("\n") + 1
    second_line = text.count("\n") + 2  # after the appended `---`
    path.write_text(text + "---\n" + text[first_doc_line:])
    assert _problems(rules_copy) == [
        f"rules/pools/fourview.yaml:{second_line}:9 metadata.name: FourView 'fourview' is already defined at "
        f"rules/pools/fourview.yaml:{first_line}"]


def test_every_problem_of_every_file_is_listed(rules_copy):
    bad_yaml = _replace(rules_copy / "settings.yaml", "  secretName: gpustack-settings\n",
                        "  secretName: gpustack-settings: oops\n")
    unknown = _replace(rules_copy / "constants.yaml", "  percentPerAccelerator: 100\n",
                       "  percentPerAccelerator: 100\n  bogus: 1\n")
    cel_line = _replace(rules_copy / "pools" / "derivation.yaml", "  generalGroup: 'aware ? gKey : \"generic\"'",
                        "  generalGroup: 'aware ? gKey :'")
    cel_line2 = _replace(rules_copy / "pools" / "derivation.yaml", "  managed: 'managedKey in labels && labels[managedKey] == \"true\"'",
                         "  managed: 'labels[managedKey] == '")
    problems = _problems(rules_copy)
    assert [p.split(" ", 2)[:2] for p in problems] == [
        ["rules/constants.yaml:%d:10" % (unknown + 1), "spec.bogus:"],
        ["rules/pools/derivation.yaml:%d:32" % cel_line2, "spec.managed:"],
        ["rules/pools/derivation.yaml:%d:31" % cel_line, "spec.generalGroup:"],
        ["rules/settings.yaml:%d:32" % bad_yaml, "<document>:"],
    ]


def test_broken_copy_never_replaces_working_rules(policy, rules_copy):
    """Load good rules; a failed load of a broken copy raises and leaves the first RuleSet working."""
    good = load_rules()
    good_policy = Policy(good)
    before = derive(good_policy, load_snapshot([SEED]))
    _replace(rules_copy / "pools" / "derivation.yaml", "  entrance: 'entrancePrefix + fnv64a(name)'",
             "  entrance: 'entrancePrefix + + fnv64a(name'")
    _replace(rules_copy / "pools" / "fourview.yaml", "sharedOnceMaxReading: shareSum",
             "sharedOnceMaxReading: acceleratorCount")
    with pytest.raises(RuleLoadError):
        load_rules(rules_copy)
    after = derive(good_policy, load_snapshot([SEED]))
    assert good_policy.fourview.sharedOnceMaxReading == "shareSum"
    assert [it["status"] for it in after.instance_types] == [it["status"] for it in before.instance_types]
    a10g = [it for it in after.instance_types if it["metadata"]["name"] == "gpustack--nvidia-a10g-linux-amd64"][0]
    assert a10g["status"]["entrance"] == "gpustack-fnv64-c4680bb149644f1c"
    assert a10g["status"]["summary"]["accelerator"] == "1/1 10/10 100/100 0/0"
    # a fixed copy loads as a newer generation; the old RuleSet keeps its own
    _replace(rules_copy / "pools" / "derivation.yaml", "  entrance: 'entrancePrefix + + fnv64a(name'",
             "  entrance: 'entrancePrefix + fnv64a(name)'")
    fixed = load_rules(rules_copy)
    assert fixed.generation > good.generation
    assert Policy(fixed).fourview.sharedOnceMaxReading == "acceleratorCount"


def test_a_duplicate_key_in_a_rule_file_is_refused_with_both_lines(tmp_path):
    # PyYAML keeps the last of two equal keys; a rule file must not change meaning silently.
    import shutil

    from runtime.rules.loader import DEFAULT_RULES_DIR, RuleLoadError, load_rules

    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules)
    path = rules / "pools" / "fourview.yaml"
    text = path.read_text()
    path.write_text(text + "  sharedOnceMaxReading: acceleratorCount\n")
    first = next(i for i, line in enumerate(text.splitlines(), 1) if line.startswith("  sharedOnceMaxReading:"))
    with pytest.raises(RuleLoadError) as err:
        load_rules(rules)
    assert [str(p) for p in err.value.problems] == [
        f"rules/pools/fourview.yaml:{len(text.splitlines()) + 1}:3 <document>: "
        f"duplicate key 'sharedOnceMaxReading' in spec (first at line {first})"]


def test_shape_cap_naming_an_unknown_constant(rules_copy):
    """An ObjectShape cap takes its number from rules/constants.yaml (its one home) by name; a name
    that is no number there is refused with the document and the field path."""
    path = rules_copy / "admission" / "shapes.yaml"
    text = path.read_text()
    path.write_text(text.replace("nodeName: {type: string, maxLengthFrom: maxNameLength}",
                                 "nodeName: {type: string, maxLengthFrom: maxNodeNameLength}"))
    line = text[: text.index("nodeName: {type: string, maxLengthFrom")].count("\n") + 1
    column = path.read_text().splitlines()[line - 1].index("maxNodeNameLength") + 1   # the value's own place
    assert _problems(rules_copy) == [
        f"rules/admission/shapes.yaml:{line}:{column} spec.openAPIV3Schema.properties.spec.properties.nodeName"
        ".maxLengthFrom: no number 'maxNodeNameLength' in rules/constants.yaml"]


def test_shape_caps_are_linked_from_the_constants(rules_copy):
    _replace(rules_copy / "constants.yaml", "  maxNameLength: 253 ", "  maxNameLength: 63 ")
    instance = load_rules(rules_copy).get("ObjectShape", "instance").openAPIV3Schema.properties["spec"]
    assert (instance.properties["type"].maxLength, instance.properties["nodeName"].maxLength) == (63, 63)
    assert instance.properties["image"].maxLength == 4096


def test_rule_file_event_message_with_an_unknown_variable(rules_copy):
    """A transition Event's message names a variable its entry does not have: refused at load, not
    at the transition (runtime/model/stateevents.py STATE_EVENT_VARIABLES)."""
    _replace(rules_copy / "controller.yaml", "left the pool: no longer", "left pool {pool}: no longer")
    (problem,) = _problems(rules_copy)
    assert problem.startswith("rules/controller.yaml:")
    assert problem.endswith("spec.events.nodeLeftPool.message: unknown variable(s) ['pool']; "
                            "allowed: ['flavors', 'node']")


def test_a_reach_message_naming_an_unknown_field_is_refused_at_load(rules_copy):
    """rules/audit.yaml ``reach`` (docs/audit.md "Pools that cannot schedule"): a template typo is refused naming the file and field, in the
    validator's own words (no pydantic ``Value error,`` prefix)."""
    _replace(rules_copy / "audit.yaml", "selects {selected} of its {nodes} nodes", "selects {selectd} of its {nodes} nodes")
    (problem,) = _problems(rules_copy)
    assert problem.startswith("rules/audit.yaml:")
    assert problem.endswith("spec.reach.unselected.some: unknown template field(s) selectd "
                            "(known: flavor, missing, nodes, pool, selected)")
