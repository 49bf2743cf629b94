"""Load ``rules/`` into a compiled, immutable :class:`RuleSet`.

Every ``*.yaml`` below the rules directory is a rule file, except ``tests/`` (rule test suites) and
files whose name starts with ``_``. A file is refused as a whole when any of its documents is
broken; the errors of every file are collected first and raised together as :class:`RuleLoadError`,
each rendered ``file:line:column field.path: message``. Besides the schema and CEL syntax, the static
checks of :mod:`runtime.rules.checks` run on every document that validated: a CEL name that is not
declared (in any branch), an unknown param, lookup, variable or setting refuses the set too. Nothing is
half-loaded: callers keep the rules they had (the controller keeps its previous RuleSet when a reload fails).

Each distinct CEL source is parsed once per load (its syntax check, its transpilation and its name
checks share the tree) and transpiled once. Rules that load clean are kept in the compiled-rules cache
(:mod:`runtime.rules.compiledcache`): the next load of the same bytes by the same code takes the
documents and code objects from there, and still validates every document and links the vocabulary.
"""
from __future__ import annotations

import importlib.resources
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

from pydantic import BaseModel, ValidationError

from runtime.model import rulefiles
from runtime.model.cellimits import RuleLoadingLimits
from runtime.model.rulefiles import Expr, RuleDocument
from runtime.rules import compiledcache
from runtime.rules.cel.compile import program_from_code, transpile
from runtime.rules.cel.errors import CelCompileError, Finding
from runtime.rules.includes import include_validations
from runtime.rules.loadlimits import byte_problems, length_problems, loading_limits, read_bounded, yaml_limits
from runtime.rules.problems import RuleLoadError, RuleProblem, pydantic_problems
from runtime.rules.tablechecks import missing_tables, table_problems
from runtime.rules.vocabulary import link
from runtime.rules.yamlsrc import SourceDocument, YamlLimits, YamlSourceError, dotted, load_documents


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
    source: Optional[SourceDocument] = field(default=None, repr=False, compare=False)


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


def iter_rule_files(root: Path) -> Iterator[Path]:
    """The rule files under ``root`` in path order: ``*.yaml`` except ``tests/``, names starting with ``_``
    and a mounted ConfigMap's ``..<timestamp>``/``..data`` entries (the top-level symlinks are the files)."""
    found = []
    for folder, dirs, files in os.walk(root, followlinks=True):  # a mounted ConfigMap's folders are symlinks
        dirs[:] = [d for d in dirs if not d.startswith("..") and not (Path(folder) == root and d == "tests")]
        found += [Path(folder) / f for f in files if f.endswith(".yaml") and not f.startswith(("_", ".."))]
    yield from sorted(found)


class _Compiler:
    """One load's CEL compilation: each distinct source parsed once (``parsed``, shared with the static
    checks) and transpiled once (``code``: source -> code object, seeded from the compiled-rules cache)."""

    def __init__(self, code: Optional[dict] = None):
        self.parsed: dict = {}
        self.code: dict = dict(code or {})
        self.programs: list = []   # every CelExpression made, to be given the generation's limits

    def limit(self, ruleset: "RuleSet") -> list[RuleProblem]:
        """Give every expression compiled the run-time budget of ``ruleset``'s CelLimits document
        (rules/cel.yaml ``runtime``; Kubernetes' defaults without one); a second one is a problem."""
        found = ruleset.all("CelLimits")
        if len(found) > 1:
            return [RuleProblem(doc.file, doc.line, 0, "kind", f"only one CelLimits document may exist (also "
                                f"{found[0].file}:{found[0].line})") for doc in found[1:]]
        if found:
            for program in self.programs:
                program.limits = found[0].spec.runtime
        return []

    def compile(self, source: str, where: str):
        """The CelExpression of ``source``; None when it does not parse (the static checks report it).

        Raises CelCompileError when the transpiler refuses it."""
        code = self.code.get(source)
        if code is None:
            from runtime.rules.cel.parse import parse  # parses: never called by a load from the cache

            tree = parse(source, self.parsed)
            if isinstance(tree, Finding):
                return None
            code = self.code[source] = transpile(tree)
        program = program_from_code(source, where, code)
        self.programs.append(program)
        return program


def _compile_exprs(value: Any, path: tuple, doc: SourceDocument, file: str, problems: list,
                   compiler: _Compiler) -> None:
    """Compile every Expr inside a validated model, recording problems with their lines.

    An expression that does not parse is left uncompiled here: :func:`runtime.rules.checks.static_checks`
    reports it with its exact line and column (and ``problems`` still refuses the file through that report).
    """
    if isinstance(value, Expr):
        full = ("spec",) + path
        where = f"{file}:{doc.line_of(full)} {dotted(full)}"
        try:
            compiled = compiler.compile(str(value), where)
        except CelCompileError as exc:
            problems.append(RuleProblem(file, doc.line_of(full), doc.column_of(full), dotted(full), str(exc)))
            return
        if compiled is None:
            problems.append(None)  # counted, reported by the static checks
            return
        value.program = compiled
        return
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            _compile_exprs(getattr(value, name), path + (name,), doc, file, problems, compiler)
    elif isinstance(value, dict):
        for key, item in value.items():
            _compile_exprs(item, path + (key,), doc, file, problems, compiler)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _compile_exprs(item, path + (i,), doc, file, problems, compiler)


def _load_file(path: Path, display: str | None, compiler: _Compiler, data: Optional[bytes] = None,
               cached: Optional[list[tuple]] = None, packed: Optional[dict] = None,
               bounds: tuple = (YamlLimits(), None),
               ) -> tuple[list[RuleFile], list[RuleProblem], list[RuleFile]]:
    """``(documents, problems, validated)``: ``validated`` holds every document whose schema held (even in a
    file with problems), for the static checks. ``data``: the file's bytes when read; ``cached`` its documents
    from the compiled-rules cache (``(value, line, lines, spans)``); ``packed`` receives the parsed documents
    for the cache; ``bounds``: the YAML limits and the directory's count so far (``[values, aliases]``)."""
    file = display or str(path)
    problems: list[RuleProblem] = []
    if data is None:
        data, problems = read_bounded(path, file)
        if data is None:
            return [], problems, []
    try:  # as Path.read_text: UTF-8, universal newlines
        text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as exc:
        return [], [RuleProblem(file, 0, 0, "<file>", f"cannot read: {exc}")], []
    if cached is not None:
        docs = [SourceDocument(value=value, line=line, lines=lines, spans=spans, text=text)
                for value, line, lines, spans in cached]
    else:
        try:
            docs = load_documents(text, *bounds)
        except YamlSourceError as exc:
            return [], [RuleProblem(file, exc.line, exc.column, "<document>", str(exc))], []
        if packed is not None:
            packed[file] = compiledcache.pack_documents(docs)
    out: list[RuleFile] = []
    validated: list[RuleFile] = []
    for doc in docs:
        if not isinstance(doc.value, dict):
            problems.append(RuleProblem(file, doc.line, 1, "<document>", "a rule document must be a mapping"))
            continue
        try:
            envelope = RuleDocument.model_validate(doc.value)
        except ValidationError as exc:
            problems.extend(pydantic_problems(exc, (), doc, file))
            continue
        model = rulefiles.SPEC_MODELS.get(envelope.kind)
        if model is None:
            known = ", ".join(sorted(rulefiles.SPEC_MODELS))
            problems.append(RuleProblem(file, doc.line_of(("kind",)), doc.column_of(("kind",)), "kind",
                                        f"unknown rule kind {envelope.kind!r} (known: {known})"))
            continue
        try:
            spec = model.model_validate(envelope.spec)
        except ValidationError as exc:
            problems.extend(pydantic_problems(exc, ("spec",), doc, file))
            continue
        before = len(problems)
        _compile_exprs(spec, (), doc, file, problems, compiler)
        loaded = RuleFile(envelope.kind, envelope.metadata.name, spec, file, doc.line, doc)
        validated.append(loaded)
        if len(problems) == before:
            out.append(loaded)
    refused = bool(problems)
    problems = [p for p in problems if p is not None]
    return ([] if refused else out), problems, validated


def load_rules(root: Path | str | None = None) -> RuleSet:
    """Load and compile every rule file under ``root`` (default: the repository's ``rules/``).

    Raises :class:`RuleLoadError` listing every problem of every broken file, and for a missing
    directory, duplicate (kind, name) documents, or a missing required kind.
    """
    global _GENERATION
    root_path = Path(root) if root is not None else DEFAULT_RULES_DIR
    if not root_path.is_dir():
        raise RuleLoadError([RuleProblem(str(root_path), 0, 0, "<directory>",
                                         "rules directory does not exist")])
    problems, ruleset = rule_problems(root_path)
    if problems:
        raise RuleLoadError(problems)
    _GENERATION += 1
    ruleset.generation = _GENERATION
    return ruleset


def rule_problems(root_path: Path, cache: "compiledcache.RulesCache | None | bool" = True,
                  types: bool = True, costs: Optional[list] = None) -> tuple[list[RuleProblem], RuleSet]:
    """Every problem of every rule file under ``root_path`` (schema, YAML, CEL syntax, static names)
    in file, line, column order, and the documents that loaded (a RuleSet only usable when no problem).

    This is ``accelpolicy lint``; :func:`load_rules` (and so every reload) refuses the set when the list
    is not empty. The list holds the CEL type and worst-case cost findings of :mod:`runtime.rules.checks`
    (``types`` False: names and syntax only, for measuring them); ``costs``, when given, receives every
    typed expression's :class:`runtime.rules.checks.ExpressionCost` (only on a compile: pass ``cache=None``).
    ``cache``: the compiled-rules cache to read and fill (True: :func:`runtime.rules.compiledcache.active`,
    None or False: none). A hit gives the same documents, programs and (no) problems as a compile.
    """
    store = compiledcache.active() if cache is True else (cache or None)
    files: list[tuple[Path, str, Optional[bytes]]] = []
    unread: list[RuleProblem] = []
    for path in iter_rule_files(root_path):
        display = str(path.relative_to(root_path.parent)) if root_path.parent != path else str(path)
        data, problems = read_bounded(path, display)
        files.append((path, display, data))
        unread.extend(problems)
    limits = loading_limits(files)   # docs/rule-authoring.md "Bounded loading"
    over, refused = byte_problems(root_path, files, limits)
    unread.extend(over)
    files = [(path, display, None if display in refused else data) for path, display, data in files]
    key = store.key([(display, data) for _, display, data in files]) if store is not None and not unread \
        else None
    entry = store.load(key) if key is not None else None
    if entry is not None:
        try:
            problems, ruleset = _assemble(root_path, files, _Compiler(entry.code), entry, None, types, costs)
        except Exception as exc:  # noqa: BLE001
            # an entry whose checksum held but whose content does not rebuild
            problems, ruleset = [RuleProblem(str(root_path), 0, 0, "<cache>", repr(exc))], None
        if not problems:
            return problems, ruleset
        store.damaged(entry.path or store.path(key), "does not rebuild these rules")
    compiler = _Compiler()
    packed: Optional[dict] = {} if key is not None else None
    problems, ruleset = _assemble(root_path, files, compiler, None, packed, types, costs, (limits, unread))
    if key is not None and not problems and types:
        store.save(key, packed, compiler.code)
    return problems, ruleset


def _assemble(root_path: Path, files: list[tuple[Path, str, Optional[bytes]]], compiler: _Compiler,
              entry: "compiledcache.Entry | None", packed: Optional[dict] = None, types: bool = True,
              costs: Optional[list] = None,
              read: tuple = (RuleLoadingLimits(), ())) -> tuple[list[RuleProblem], RuleSet]:
    """Load ``files`` (path, display name, bytes or None when not read) into a RuleSet and find every
    problem; ``entry``: the compiled-rules cache's entry for these files (their documents and code; the
    static checks, which its rules passed when it was written, are then not run again); ``packed``
    receives each file's parsed documents for a new entry; ``read``: the loading limits and the problems
    of reading the files (why a file's bytes are None)."""
    limits, unread = read
    problems: list[RuleProblem] = list(unread)
    ruleset = RuleSet(root=str(root_path))
    validated: list[RuleFile] = []
    bounds = (yaml_limits(limits), [0, 0])
    for path, display, data in files:
        if data is None:
            continue
        docs, file_problems, checked = _load_file(path, display, compiler, data,
                                                  None if entry is None else entry.documents(display), packed,
                                                  bounds)
        validated.extend(checked)
        problems.extend(file_problems)
        for doc in docs:
            key = (doc.kind, doc.name)
            if key in ruleset.documents:
                other = ruleset.documents[key]
                column = doc.source.column_of(("metadata", "name")) if doc.source else 0
                problems.append(RuleProblem(doc.file, doc.line, column, "metadata.name",
                                            f"{doc.kind} {doc.name!r} is already defined at "
                                            f"{other.file}:{other.line}"))
                continue
            ruleset.documents[key] = doc
    # one policy in several files (validationsFrom): filled before the checks and the engine read it
    problems.extend(RuleProblem(*problem) for problem in include_validations(validated))
    if entry is None:
        from runtime.rules.checks import static_checks  # not imported by a load from the cache

        report = static_checks(validated, compiler.parsed, types, complete=not problems)
        problems.extend(length_problems(validated, limits))
        problems.extend(table_problems(validated))
        problems.extend(report.problems)
        if costs is not None:
            costs.extend(report.costs)
    problems.extend(compiler.limit(ruleset))
    problems.sort(key=lambda p: (p.file, p.line, p.column))
    if not problems:  # a broken file may be the one holding a required kind: report that first
        for kind in REQUIRED_KINDS:
            if not any(k == kind for k, _ in ruleset.documents):
                problems.append(RuleProblem(str(root_path), 0, 0, "<directory>",
                                            f"no rule file of kind {kind}"))
        tables = {name for kind, name in ruleset.documents if kind == "DecisionTable"}
        problems.extend(missing_tables(str(root_path), tables))
    if not problems:  # fields left to their vocabulary home (runtime/rules/vocabulary.py)
        problems.extend(RuleProblem(*problem) for problem in link(ruleset))
    return problems, ruleset


REQUIRED_KINDS = ("Constants", "ManufacturerTable", "LabelCatalog", "SettingCatalog", "PoolDerivation",
                  "PoolQueues", "ControllerPolicy", "PresetTable", "FourView", "KueueConfiguration",
                  "ReloadGate")
