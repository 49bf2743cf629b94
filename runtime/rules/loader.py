"""Load ``rules/`` into a compiled, immutable :class:`RuleSet`.

Every ``*.yaml`` below the rules directory is a rule file, except ``tests/`` (rule test suites) and
files whose name starts with ``_``. A file is refused as a whole when any of its documents is
broken; the errors of every file are collected first and raised together as :class:`RuleLoadError`,
each rendered ``file:line field.path: message``. Nothing is half-loaded: callers keep the rules they
had (the controller keeps its previous RuleSet when a reload fails).
"""
from __future__ import annotations

import importlib.resources
from dataclasses import dataclass, field
import os
from pathlib import Path
from typing import Any, Iterator

from pydantic import BaseModel, ValidationError

from runtime.model import rulefiles
from runtime.model.rulefiles import Expr, RuleDocument
from runtime.rules.cel import CelCompileError, compile_expression
from runtime.rules.yamlsrc import SourceDocument, YamlSourceError, dotted, load_documents


@dataclass(frozen=True)
class RuleProblem:
    """One problem in one rule file."""

    file: str
    line: int
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line} {self.path}: {self.message}"


class RuleLoadError(ValueError):
    """Raised when any rule file is broken; ``problems`` lists every problem found."""

    def __init__(self, problems: list[RuleProblem]):
        self.problems = problems
        super().__init__("rule files refused:\n" + "\n".join(f"  {p}" for p in problems))


def installed_rules_dir() -> Path:
    """The rules this program runs with by default: the ``rules`` package data found with importlib.resources
    (a wheel's installed copy, or a source checkout's rules/ through the editable install or the current
    directory). ``--rules DIR`` / ``ACCELPOLICY_RULES`` override it. Without an installed ``rules``
    package: the rules/ beside this source tree, which :func:`load_rules` reports missing when absent."""
    try:
        return Path(str(importlib.resources.files("rules").joinpath("constants.yaml"))).parent
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[2] / "rules"


DEFAULT_RULES_DIR = installed_rules_dir()


@dataclass
class RuleFile:
    """One loaded rule document: kind, name, validated spec model, origin."""

    kind: str
    name: str
    spec: BaseModel
    file: str
    line: int


@dataclass
class RuleSet:
    """All rule documents of one rules directory, compiled; indexed by (kind, name).

    ``generation`` increases on every successful load in one process (durable_rules ruleset names
    are versioned with it).
    """

    root: str
    documents: dict[tuple[str, str], RuleFile] = field(default_factory=dict)
    generation: int = 0

    def get(self, kind: str, name: str | None = None) -> BaseModel:
        """The spec of the one document of ``kind`` (or of ``kind``/``name``).

        Raises KeyError naming the kind when it is missing or ambiguous.
        """
        if name is not None:
            try:
                return self.documents[(kind, name)].spec
            except KeyError:
                raise KeyError(f"rules in {self.root} have no {kind} named {name!r}") from None
        found = [doc for (k, _), doc in self.documents.items() if k == kind]
        if len(found) != 1:
            raise KeyError(f"rules in {self.root} must hold exactly one {kind}, found {len(found)}")
        return found[0].spec

    def all(self, kind: str) -> list[RuleFile]:
        """Every document of ``kind`` in file order."""
        return [doc for (k, _), doc in self.documents.items() if k == kind]


_GENERATION = 0


def _iter_rule_files(root: Path) -> Iterator[Path]:
    """Every ``*.yaml`` under ``root`` (sorted) but ``tests/`` and ``_*``, following directory links and
    skipping entries named ``.*``: a ConfigMap mounted by the kubelet holds its files in ``..<timestamp>/``,
    reached through the ``..data`` link and one link per top-level entry (the kubelet's atomic writer)."""
    found = []
    for directory, dirs, files in os.walk(root, followlinks=True):
        rel = Path(directory).relative_to(root)
        dirs[:] = [d for d in dirs if not d.startswith(".") and not (rel == Path(".") and d == "tests")]
        found += [Path(directory) / f for f in files
                  if f.endswith(".yaml") and not f.startswith((".", "_"))]
    yield from sorted(found)


def _compile_exprs(value: Any, path: tuple, doc: SourceDocument, file: str, problems: list) -> None:
    """Compile every Expr inside a validated model, recording problems with their lines."""
    if isinstance(value, Expr):
        where = f"{file}:{doc.line_of(('spec',) + path)} {dotted(('spec',) + path)}"
        try:
            value.program = compile_expression(str(value), where)
        except CelCompileError as exc:
            line = doc.line_of(("spec",) + path) + max((exc.line or 1) - 1, 0)
            problems.append(RuleProblem(file, line, dotted(("spec",) + path), str(exc)))
        return
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            _compile_exprs(getattr(value, name), path + (name,), doc, file, problems)
    elif isinstance(value, dict):
        for key, item in value.items():
            _compile_exprs(item, path + (key,), doc, file, problems)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _compile_exprs(item, path + (i,), doc, file, problems)


def load_file(path: Path, display: str | None = None) -> tuple[list[RuleFile], list[RuleProblem]]:
    """Load one rule file; returns its documents and its problems (documents empty if any problem)."""
    file = display or str(path)
    problems: list[RuleProblem] = []
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        return [], [RuleProblem(file, 0, "<file>", f"cannot read: {exc.strerror or exc}")]
    try:
        docs = load_documents(text)
    except YamlSourceError as exc:
        return [], [RuleProblem(file, exc.line, "<document>", str(exc))]
    out: list[RuleFile] = []
    for doc in docs:
        if not isinstance(doc.value, dict):
            problems.append(RuleProblem(file, doc.line, "<document>", "a rule document must be a mapping"))
            continue
        try:
            envelope = RuleDocument.model_validate(doc.value)
        except ValidationError as exc:
            problems.extend(_pydantic_problems(exc, (), doc, file))
            continue
        model = rulefiles.SPEC_MODELS.get(envelope.kind)
        if model is None:
            known = ", ".join(sorted(rulefiles.SPEC_MODELS))
            problems.append(RuleProblem(file, doc.line_of(("kind",)), "kind",
                                        f"unknown rule kind {envelope.kind!r} (known: {known})"))
            continue
        try:
            spec = model.model_validate(envelope.spec)
        except ValidationError as exc:
            problems.extend(_pydantic_problems(exc, ("spec",), doc, file))
            continue
        before = len(problems)
        _compile_exprs(spec, (), doc, file, problems)
        if len(problems) == before:
            out.append(RuleFile(envelope.kind, envelope.metadata.name, spec, file, doc.line))
    return ([] if problems else out), problems


def _pydantic_problems(exc: ValidationError, prefix: tuple, doc: SourceDocument, file: str) -> list[RuleProblem]:
    problems = []
    for err in exc.errors():
        loc = prefix + tuple(err["loc"])
        problems.append(RuleProblem(file, doc.line_of(loc), dotted(loc), err["msg"]))
    return problems


def load_rules(root: Path | str | None = None) -> RuleSet:
    """Load and compile every rule file under ``root`` (default: the repository's ``rules/``).

    Raises :class:`RuleLoadError` listing every problem of every broken file, and for a missing
    directory, duplicate (kind, name) documents, or a missing required kind.
    """
    global _GENERATION
    root_path = Path(root) if root is not None else DEFAULT_RULES_DIR
    if not root_path.is_dir():
        raise RuleLoadError([RuleProblem(str(root_path), 0, "<directory>", "rules directory does not exist")])
    problems: list[RuleProblem] = []
    ruleset = RuleSet(root=str(root_path))
    for path in _iter_rule_files(root_path):
        display = str(path.relative_to(root_path.parent)) if root_path.parent != path else str(path)
        docs, file_problems = load_file(path, display)
        problems.extend(file_problems)
        for doc in docs:
            key = (doc.kind, doc.name)
            if key in ruleset.documents:
                other = ruleset.documents[key]
                problems.append(RuleProblem(doc.file, doc.line, "metadata.name",
                                            f"{doc.kind} {doc.name!r} is already defined at {other.file}:{other.line}"))
                continue
            ruleset.documents[key] = doc
    if not problems:  # a broken file may be the one holding a required kind: report that first
        for kind in REQUIRED_KINDS:
            if not any(k == kind for k, _ in ruleset.documents):
                problems.append(RuleProblem(str(root_path), 0, "<directory>", f"no rule file of kind {kind}"))
    if problems:
        raise RuleLoadError(problems)
    _GENERATION += 1
    ruleset.generation = _GENERATION
    return ruleset


REQUIRED_KINDS = ("Constants", "ManufacturerTable", "LabelCatalog", "SettingCatalog", "PoolDerivation",
                  "PresetTable", "FourView", "KueueConfiguration")
