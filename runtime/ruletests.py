"""Rule test suites as data: ``rules/tests/**/*.yaml`` documents of ``kind: AdmissionTests`` (and of
``kind: DraDriverTests``, the DRA driver rows: :class:`DraCase`).

A suite::

    apiVersion: rules.accelpolicy.dev/v1alpha1
    kind: AdmissionTests
    metadata: {name: pods}
    spec:
      snapshot: [tests/fixtures/seed/common]   # paths relative to the rules directory's parent
      derive: true                             # admission sees the snapshot after derivation
      objectTemplate: {...}                    # deep-merged under each case's object (lists replace)
      cases:
        - name: "one-accelerator-family: exclusive and sliced"
          operation: CREATE                    # default CREATE
          useTemplate: false                   # optional: the object as written
          object: {...}
          oldObject: {...}                     # optional (merged onto objectTemplate too)
          user: system:serviceaccount:...      # optional request.userInfo.username
          snapshot: [...]                      # optional per-case override
          now: 2026-12-07T12:00:00Z            # optional (or the suite's): the review's instant
          expect:
            allowed: false
            code: 422                          # optional
            message: 'Pod "demo" is invalid: ...'
            patch: [...]                       # optional; [] asserts "no patch"
            rules: [one-accelerator-family]    # optional: the rules the review hit, in order (the
                                               # `rule` label of the rule-hit metric); [] asserts none
            warnings: [...]                    # optional: the review's warnings; [] asserts none

A name in ``expect.rules`` that no rule has fails the case.

Run by ``accelpolicy test rules/`` and by tests/admission/test_rule_suites.py.
"""
from __future__ import annotations

import base64
import copy
import datetime
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import yaml

from runtime.engine.admission import AdmissionEngine, admission_view, decide, review_for
from runtime.engine.admission.verdict import rule_names
from runtime.engine.policy import Policy
from runtime.model.rfc3339 import as_instant
from runtime.rules.loader import DEFAULT_RULES_DIR
from runtime.rules.yamlsrc import safe_load_all
from runtime.snapshots import load_snapshot

SUITE_KIND = "AdmissionTests"


@dataclass
class Case:
    """One case of a suite, its object already merged onto the suite's template."""

    suite: str
    name: str
    file: str
    operation: str
    object: dict
    old_object: dict | None
    snapshot: tuple[str, ...]
    derive: bool
    expect: dict
    user: str = ""
    now: datetime.datetime | None = None

    @property
    def id(self) -> str:
        return f"{self.suite}::{self.name}"


@dataclass
class CaseResult:
    """Outcome of one case: ``problems`` empty when it passed; ``response`` the review's answer."""

    case: Case
    problems: list[str] = field(default_factory=list)
    response: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.problems


def merge(base: Any, over: Any) -> Any:
    """Deep merge (JSON merge patch): maps merge key by key, ``null`` removes a key, anything else
    (lists included) is replaced. The result shares nothing mutable with ``base`` or ``over``."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = _copy(base)
        for key, value in over.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = merge(base.get(key), value) if key in base else _copy(value)
        return out
    return _copy(over)


_IMMUTABLE = (str, int, float, bool, type(None), datetime.date, datetime.datetime, bytes)


def _copy(value: Any) -> Any:
    """``copy.deepcopy`` of a parsed YAML value: maps and lists rebuilt, immutable scalars shared,
    anything else (a set, a tuple) deep-copied (deepcopy's generic dispatch was most of the time
    the suites took to load)."""
    t = type(value)
    if t is dict:
        return {k: _copy(v) for k, v in value.items()}
    if t is list:
        return [_copy(v) for v in value]
    if t in _IMMUTABLE:
        return value
    return copy.deepcopy(value)


def load_cases(rules_dir: Path | str, documents: list[tuple[Path, Any]] | None = None) -> list[Case]:
    """Every case of every suite under ``<rules_dir>/tests`` (file order, then case order);
    ``documents``: the files' documents already parsed (:func:`suite_documents`).

    Raises ValueError naming the file for a malformed suite.
    """
    cases: list[Case] = []
    for path, suite, spec in _suites(rules_dir, SUITE_KIND, documents):
        for i, raw in enumerate(spec.get("cases") or []):
            if not isinstance(raw, dict) or "expect" not in raw or "name" not in raw:
                raise ValueError(f"{_where(path, spec, ('cases', i))}: cases[{i}] needs name and expect")
            _known_keys(path, spec, i, raw, CASE_KEYS, ())
            if isinstance(raw["expect"], dict):
                _known_keys(path, spec, i, raw["expect"], EXPECT_KEYS, ("expect",))
            template = (spec.get("objectTemplate") or {}) if raw.get("useTemplate", True) else {}
            old = raw.get("oldObject")
            cases.append(Case(
                suite=suite, name=str(raw["name"]), file=str(path),
                operation=raw.get("operation", "CREATE"),
                object=merge(template, raw.get("object") or {}) if raw.get("object") is not None else {},
                old_object=merge(template, old) if old is not None else None,
                snapshot=tuple(raw.get("snapshot", spec.get("snapshot")) or ()),
                derive=bool(raw.get("derive", spec.get("derive", True))),
                expect=raw["expect"], user=str(raw.get("user", "")),
                now=_instant(raw.get("now", spec.get("now")))))
    return cases


# The keys a case and its ``expect`` may hold (the module docstring): another is a misspelling that
# would silently check nothing, so the suite is refused.
CASE_KEYS = frozenset({"name", "operation", "useTemplate", "object", "oldObject", "user", "snapshot",
                       "derive", "expect", "now"})
EXPECT_KEYS = frozenset({"allowed", "code", "message", "reason", "patch", "rules", "warnings"})


def _instant(value: Any) -> datetime.datetime | None:
    """A case's ``now`` (the review's instant: PolicyExceptions, ``request.time``). Raises ValueError."""
    if value is not None and as_instant(value) is None:
        raise ValueError(f"now: {value!r} is not an RFC 3339 time")
    return as_instant(value)


def _known_keys(path: Path, spec: dict, index: int, mapping: dict, known: frozenset, below: tuple) -> None:
    """Raise ValueError ``<file>:<line>:<column>: cases[i].<key>: unknown key (known: ...)`` for the first
    key of ``mapping`` (case ``index`` of the suite ``spec``, at ``below`` inside it) not in ``known``."""
    for key in mapping:
        if key not in known:
            dotted_key = ".".join((f"cases[{index}]",) + below + (str(key),))
            raise ValueError(f"{_where(path, spec, ('cases', index) + below + (key,))}: {dotted_key}: "
                             f"unknown key (known: {', '.join(sorted(known))})")


def _where(path: Path, spec: dict, at: tuple) -> str:
    """``<file>:<line>:<column>`` of the item at ``at`` below ``spec`` of the suite document of ``path``
    whose spec is ``spec`` (``<file>`` alone when it cannot be placed: the location is a courtesy, the
    refusal stands without it)."""
    from runtime.rules.yamlsrc import load_documents

    try:
        for doc in load_documents(path.read_text(encoding="utf-8")):
            if isinstance(doc.value, dict) and doc.value.get("spec") == spec and doc.line_of(("spec",) + at):
                return f"{path}:{doc.line_of(('spec',) + at)}:{doc.column_of(('spec',) + at)}"
    except Exception:  # noqa: BLE001 - see above
        pass
    return str(path)


class Runner:
    """Runs cases against one rules directory; views are built once per (snapshot, derive)."""

    def __init__(self, policy: Policy, base_dir: Path | str):
        self.policy = policy
        self.engine = AdmissionEngine(policy)
        self.base_dir = Path(base_dir)
        self._views: dict = {}
        self.rule_names = rule_names(policy)

    def _resolve(self, path: str) -> Path:
        """A suite's snapshot path: relative to the rules directory's parent, or — for an edited
        copy of rules/ placed elsewhere — to the repository the default rules live in."""
        candidate = self.base_dir / path
        if candidate.exists() or Path(path).is_absolute():
            return candidate
        return DEFAULT_RULES_DIR.parent / path

    def view(self, snapshot: tuple[str, ...], derive: bool):
        """The AdmissionView of ``snapshot`` paths (relative to ``base_dir``), built once."""
        key = (snapshot, derive)
        if key not in self._views:
            snap = load_snapshot([self._resolve(p) for p in snapshot]) if snapshot else None
            self._views[key] = admission_view(self.policy, snap, derive_state=derive)
        return self._views[key]

    def run(self, case: Case) -> CaseResult:
        """Judge one case and compare with ``expect``."""
        review = review_for(case.object, case.operation, case.old_object, uid="rule-test")
        if case.user:
            review["request"]["userInfo"] = {"username": case.user}
        response, outcome = decide(self.engine, review, self.view(case.snapshot, case.derive), now=case.now)
        result = CaseResult(case=case, response=response)
        got = response["response"]
        exp = case.expect
        if "allowed" in exp and got["allowed"] != exp["allowed"]:
            result.problems.append(f"allowed: want {exp['allowed']}, got {got['allowed']}"
                                   f" ({(got.get('status') or {}).get('message', '')})")
        status = got.get("status") or {}
        if "message" in exp and status.get("message") != exp["message"]:
            result.problems.append(f"message:\n  want {exp['message']!r}\n  got  {status.get('message')!r}")
        if "code" in exp and status.get("code") != exp["code"]:
            result.problems.append(f"code: want {exp['code']}, got {status.get('code')}")
        if "reason" in exp and status.get("reason") != exp["reason"]:
            result.problems.append(f"reason: want {exp['reason']}, got {status.get('reason')}")
        if "patch" in exp:
            patch = json.loads(base64.b64decode(got["patch"])) if got.get("patch") else []
            if patch != exp["patch"]:
                result.problems.append(f"patch:\n  want {json.dumps(exp['patch'])}\n"
                                       f"  got  {json.dumps(patch)}")
        if "rules" in exp:
            self._check_rules(exp["rules"], outcome.rules, result)
        if "warnings" in exp and got.get("warnings", []) != exp["warnings"]:
            result.problems.append(f"warnings:\n  want {exp['warnings']!r}\n  got  {got.get('warnings')!r}")
        return result

    def _check_rules(self, want: Any, got: list[str], result: CaseResult) -> None:
        """``expect.rules``: the rule names the review hit, in order; a name no rule has is a problem."""
        if not isinstance(want, list) or not all(isinstance(n, str) for n in want):
            result.problems.append(f"rules: want a list of rule names, got {want!r}")
            return
        unknown = next((name for name in want if name not in self.rule_names), None)
        if unknown is not None:
            result.problems.append(f"rules: no rule is named {unknown!r} (a validation, mutation or "
                                   "mutation/denial of the rules, or shape, rule-error, budget-exceeded)")
        elif want != got:
            result.problems.append(f"rules:\n  want {json.dumps(want)}\n  got  {json.dumps(got)}")

    def run_all(self, cases: list[Case]) -> Iterator[CaseResult]:
        """:meth:`run` for each case, in order."""
        for case in cases:
            yield self.run(case)


# --- DRA driver rows (rules/dra.yaml, docs/concepts/dra.md "Two kinds of accelerator node") ----------
DRA_SUITE_KIND = "DraDriverTests"


@dataclass
class DraCase:
    """One case of a ``DraDriverTests`` suite::

        apiVersion: rules.accelpolicy.dev/v1alpha1
        kind: DraDriverTests
        metadata: {name: nvidia}
        spec:
          node: node-a10g                    # the node the slices are read for
          cases:
            - name: one A10G
              slices: [{apiVersion: resource.k8s.io/v1, kind: ResourceSlice, ...}]
              expect:
                accelerators: [{uuid: ..., memoryMib: 23028}]   # in order; each the keys it names
                labels: {...}                # the device-manager NodeFeature's spec.labels, exactly
                warnings: [...]              # unreadable devices, stale slices, MIG-on GPUs, exactly
                fourView: {<aKey>: "2/2 0/0 0/0 0/0"}   # EX/SH/SL/PT of the planned Devices, per aKey named
    """

    suite: str
    name: str
    file: str
    node: str
    slices: list
    expect: dict

    @property
    def id(self) -> str:
        return f"{self.suite}::{self.name}"


def load_dra_cases(rules_dir: Path | str, documents: list[tuple[Path, Any]] | None = None) -> list[DraCase]:
    """Every case of every ``DraDriverTests`` suite under ``<rules_dir>/tests`` (``documents`` as for
    :func:`load_cases`). Raises ValueError naming the file for a malformed suite."""
    cases: list[DraCase] = []
    for path, suite, spec in _suites(rules_dir, DRA_SUITE_KIND, documents):
        for i, raw in enumerate(spec.get("cases") or []):
            if not isinstance(raw, dict) or "expect" not in raw or "name" not in raw \
                    or not isinstance(raw.get("slices"), list):
                raise ValueError(f"{_where(path, spec, ('cases', i))}: cases[{i}] needs name, "
                                 "slices (a list) and expect")
            cases.append(DraCase(suite=suite, name=str(raw["name"]), file=str(path),
                                 node=str(raw.get("node", spec.get("node", ""))), slices=raw["slices"],
                                 expect=raw["expect"]))
    return cases


def as_shipped(policy: Policy, texts: list[str]) -> list[str]:
    """``texts`` with the rule files they name spelled as the suites spell them, ``rules/<file>``, whatever
    the rules directory under test is called: a copy (``cp -r rules /tmp/my-rules``,
    docs/tasks/edit-a-rule.md) passes its own suites."""
    name = Path(policy.ruleset.root).name
    if name == "rules":
        return texts
    folder = re.compile(r"(?<![\w./-])" + re.escape(name) + "/")
    return [folder.sub("rules/", text) for text in texts]


def run_dra_case(policy: Policy, case: DraCase) -> CaseResult:
    """Read ``case.slices`` for ``case.node`` with ``policy``'s DRA rows and compare with ``expect``."""
    from runtime.engine.devices.agentplan import plan_node
    from runtime.engine.devices.draslices import read_node
    from runtime.engine.devices.health import as_read
    from runtime.engine.settings import resolve
    from runtime.model.facts import parse_facts

    result = CaseResult(case=case)   # type: ignore[arg-type]
    reading = read_node(policy, case.node, case.slices)
    exp = case.expect
    if "accelerators" in exp:
        got = reading.accelerators
        want = exp["accelerators"]
        if len(got) != len(want) or any({k: g.get(k) for k in w} != w for g, w in zip(got, want)):
            result.problems.append(f"accelerators:\n  want {json.dumps(want)}\n  got  {json.dumps(got)}")
    if "warnings" in exp:
        got_w = as_shipped(policy, reading.warnings + reading.notes + reading.offers_nothing(policy))
        if got_w != exp["warnings"]:
            result.problems.append(f"warnings:\n  want {json.dumps(exp['warnings'])}\n"
                                   f"  got  {json.dumps(got_w)}")
    if "labels" in exp or "fourView" in exp:
        facts = parse_facts({"node": case.node, "accelerators": reading.accelerators}, case.file)
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": case.node, "labels": {}},
                "status": {}}
        # the health rules judge the facts as the agent would on its first reading (no history)
        plan = plan_node(policy, facts, node, resolve(policy.settings, {}),
                         health=as_read(policy, facts.accelerators, None))
        labels = (plan.device_manager or {}).get("spec", {}).get("labels", {})
        if "labels" in exp and labels != exp["labels"]:
            result.problems.append(f"labels:\n  want {json.dumps(exp['labels'], sort_keys=True)}\n"
                                   f"  got  {json.dumps(labels, sort_keys=True)}")
        if "fourView" in exp:
            _check_four_view(policy, plan.devices, exp["fourView"], result)
    return result


def _check_four_view(policy: Policy, devices: dict | None, want: dict, result: CaseResult) -> None:
    """``fourView`` of a DRA case: per aKey, the EX/SH/SL/PT summary of the planned Devices alone."""
    from runtime.engine.pools.fourview import compute

    got = {akey: compute(policy, [devices] if devices else [], akey).summary() for akey in want}
    if got != want:
        result.problems.append(f"fourView:\n  want {json.dumps(want, sort_keys=True)}\n"
                               f"  got  {json.dumps(got, sort_keys=True)}")

def suite_documents(rules_dir: Path | str) -> list[tuple[Path, Any]]:
    """``(file, document)`` of every YAML document under ``<rules_dir>/tests`` (file order, then
    document order), each file read and parsed once: :func:`load_cases` and :func:`load_dra_cases`
    take the list, so a caller that wants both suite kinds parses the files once, not once per kind.
    Raises OSError for a file that cannot be read, ValueError ``<file>:<line>:<column>: not valid
    YAML: <problem>`` for one that does not parse (the form ``accelpolicy lint`` gives rule files)."""
    return [(path, doc) for path in sorted((Path(rules_dir) / "tests").rglob("*.yaml"))
            for doc in _parsed(path)]


def _parsed(path: Path) -> list:
    """The documents of one suite file (:func:`suite_documents`: its errors)."""
    text = path.read_text(encoding="utf-8")
    try:
        return safe_load_all(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise ValueError(f"{where}: not valid YAML: {getattr(exc, 'problem', None) or exc}") from exc


def _suites(rules_dir: Path | str, kind: str, documents: list[tuple[Path, Any]] | None = None):
    """``(file, suite name, spec)`` of every document of ``kind`` under ``<rules_dir>/tests`` (file order,
    then document order; ``documents``: :func:`suite_documents`, read here when None); a suite without
    a name is named after its file."""
    for path, doc in suite_documents(rules_dir) if documents is None else documents:
        if isinstance(doc, dict) and doc.get("kind") == kind:
            yield path, (doc.get("metadata") or {}).get("name") or path.stem, doc.get("spec") or {}
