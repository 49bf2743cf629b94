"""What a rule file's load finds wrong: :class:`RuleProblem` (``file:line:column field.path: message``),
:class:`RuleLoadError` (all of them, raised together) and the translation of pydantic's validation
errors into problems at their fields (docs/rule-authoring.md "1. Lint: every problem at once")."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from runtime.model.errors import error_text
from runtime.rules.yamlsrc import SourceDocument, dotted


@dataclass(frozen=True)
class RuleProblem:
    """One problem in one rule file: the file, 1-based ``line`` and ``column`` (0 where the problem has
    none: a file it could not read, the directory), the field path and the message. The finding of
    every stage, at a rule file's place (an expression's own are
    :class:`runtime.rules.cel.errors.Finding` records, placed here by :mod:`runtime.rules.checks`)."""

    file: str
    line: int
    column: int
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column} {self.path}: {self.message}"


class RuleLoadError(ValueError):
    """Raised when any rule file is broken; ``problems`` lists every problem found."""

    def __init__(self, problems: list[RuleProblem]):
        self.problems = problems
        super().__init__("rule files refused:\n" + "\n".join(f"  {p}" for p in problems))


def pydantic_problems(exc: ValidationError, prefix: tuple, doc: SourceDocument,
                      file: str) -> list[RuleProblem]:
    """One problem per pydantic error, at its field; a validator's message that starts with the path of
    a field below it (``fallbackTier: unknown tier ...``) is placed at that field."""
    problems = []
    for err in exc.errors():
        loc = prefix + tuple(err["loc"])
        message = error_text(err)
        inner, rest = _named_field(doc.value, loc, message)
        if inner:
            loc, message = loc + inner, rest
        problems.append(RuleProblem(file, doc.line_of(loc), doc.column_of(loc), dotted(loc), message))
    return problems


_FIELD_PREFIX = re.compile(r"^([A-Za-z_][\w-]*(?:\.[\w./-]+|\[\d+\])*): (.+)$", re.S)


def _named_field(value: Any, loc: tuple, message: str) -> tuple[tuple, str]:
    """``(path below loc, rest of the message)`` when ``message`` starts ``a.b[0].c: `` and that path is
    in the document ``value`` below ``loc``; else ``((), message)``."""
    match = _FIELD_PREFIX.match(message)
    if match is None:
        return (), message
    node = value
    for part in loc:
        node = node.get(part) if isinstance(node, dict) else None
    path: list = []
    for name, index in re.findall(r"([^.\[\]]+)|\[(\d+)\]", match.group(1)):
        key: Any = int(index) if index else name
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and isinstance(key, int) and key < len(node):
            node = node[key]
        else:
            return (), message
        path.append(key)
    return tuple(path), match.group(2)
