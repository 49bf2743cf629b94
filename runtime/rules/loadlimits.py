"""The bounds a rules directory is read under (docs/rule-authoring.md "Bounded loading").

The limits are the ``loading`` section of the directory's own ``CelLimits`` document (rules/cel.yaml),
each at most its ceiling (:meth:`runtime.model.cellimits.RuleLoadingLimits.ceiling`), the defaults
without one. They are known before anything else is parsed: a file larger than the ceiling is never
read, the ``CelLimits`` document is read first under the ceilings (:func:`loading_limits`), and every
other file is then counted against the limits before a value of it is built
(:func:`runtime.rules.yamlsrc.measure`). A directory over a limit is refused with a finding naming the
file, the line and the setting, like any other problem (:mod:`runtime.rules.loader`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from pydantic import ValidationError

from runtime.model.cellimits import CelLimitsSpec, RuleLoadingLimits
from runtime.rules.problems import RuleProblem
from runtime.rules.yamlsrc import YamlLimits, YamlSourceError, dotted, load_documents

CEILING = RuleLoadingLimits.ceiling()
SETTING = "rules/cel.yaml loading"


def yaml_limits(limits: RuleLoadingLimits) -> YamlLimits:
    """The YAML counts of ``limits`` (values after alias expansion, aliases, depth)."""
    return YamlLimits(nodes=limits.maxNodes, aliases=limits.maxAliases, depth=limits.maxDepth,
                      setting=SETTING)


def read_bounded(path: Path, file: str) -> tuple[Optional[bytes], list[RuleProblem]]:
    """The bytes of rule file ``path`` (``file``: its display name), or None and the problem: it cannot be
    read, or it is larger than any ``maxFileBytes`` may allow (then it is not read at all)."""
    try:
        size = path.stat().st_size
        if size > CEILING.maxFileBytes:
            return None, [RuleProblem(file, 1, 1, "<file>", f"the file holds {size} bytes, more than any "
                                      f"rules file may ({SETTING}.maxFileBytes is at most "
                                      f"{CEILING.maxFileBytes})")]
        return path.read_bytes(), []
    except OSError as exc:
        return None, [RuleProblem(file, 0, 0, "<file>", f"cannot read: {exc.strerror or exc}")]


def loading_limits(files: list[tuple[Path, str, Optional[bytes]]]) -> RuleLoadingLimits:
    """The limits of the files ``(path, display name, bytes)`` of one rules directory: the ``loading`` of
    their ``CelLimits`` document, read under the ceilings; the defaults when there is none or it does
    not read (the load reports why)."""
    counted = [0, 0]
    for _, _, data in files:
        if data is None or b"CelLimits" not in data:
            continue
        try:
            docs = load_documents(data.decode("utf-8"), yaml_limits(CEILING), counted)
        except (YamlSourceError, UnicodeDecodeError, ValueError):
            continue
        for doc in docs:
            if isinstance(doc.value, dict) and doc.value.get("kind") == "CelLimits":
                try:
                    return CelLimitsSpec.model_validate(doc.value.get("spec") or {}).loading
                except ValidationError:
                    return RuleLoadingLimits()
    return RuleLoadingLimits()


def byte_problems(root: Path, files: list[tuple[Path, str, Optional[bytes]]],
                  limits: RuleLoadingLimits) -> tuple[list[RuleProblem], set[str]]:
    """The files over ``maxFileBytes`` (a problem each, at line 1) and the directory over ``maxTotalBytes``;
    the display names of the files not to parse."""
    problems, refused = [], set()
    for _, display, data in files:
        if data is not None and len(data) > limits.maxFileBytes:
            problems.append(RuleProblem(display, 1, 1, "<file>", f"the file holds {len(data)} bytes, more "
                                        f"than {SETTING}.maxFileBytes ({limits.maxFileBytes})"))
            refused.add(display)
    total = sum(len(data) for _, _, data in files if data is not None)
    if total > limits.maxTotalBytes:
        problems.append(RuleProblem(str(root), 0, 0, "<directory>", f"the rule files hold {total} bytes in "
                                    f"all, more than {SETTING}.maxTotalBytes ({limits.maxTotalBytes})"))
    return problems, refused


def _limit_of(path: tuple, limits: RuleLoadingLimits) -> tuple[int, str]:
    """``(limit, setting)`` for a string at ``path``: a message (a field ``message`` or ``...Message``) or a
    template (``...Template``); ``(0, "")`` for any other field."""
    name = next((part for part in reversed(path) if isinstance(part, str)), "")
    if name == "message" or name.endswith("Message"):
        return limits.maxMessageLength, "maxMessageLength"
    if name.endswith("Template"):
        return limits.maxTemplateLength, "maxTemplateLength"
    return 0, ""


def length_problems(documents: list, limits: RuleLoadingLimits) -> list[RuleProblem]:
    """A problem at every message or template of the loaded ``documents`` (``RuleFile`` objects with
    their source) longer than ``maxMessageLength`` / ``maxTemplateLength``, at its file:line:column."""
    problems = []
    for doc in documents:
        source = doc.source
        stack: list[tuple[tuple, object]] = [(("spec",), (source.value or {}).get("spec"))] if source else []
        while stack:
            path, value = stack.pop()
            if isinstance(value, dict):
                stack.extend((path + (key,), item) for key, item in value.items())
            elif isinstance(value, list):
                stack.extend((path + (i,), item) for i, item in enumerate(value))
            elif isinstance(value, str):
                limit, setting = _limit_of(path, limits)
                if limit and len(value) > limit:
                    message = f"{len(value)} characters, more than {SETTING}.{setting} ({limit})"
                    problems.append(RuleProblem(doc.file, source.line_of(path), source.column_of(path),
                                                dotted(path), message))
    return problems
