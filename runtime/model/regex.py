"""Regular expressions of the rules, on RE2 (docs/rule-authoring.md "Regular expressions").

Every pattern a rule runs (CEL's ``matches`` in both forms, the agent's and the DRA drivers' rewrites,
the node-facts cruft patterns, the profile-segment pattern) is compiled and matched by RE2 (the
``re2`` module of ``google-re2``), as Kubernetes evaluates CEL regexes: matching is linear in the
text, so no pattern and no text can hold the interpreter (a C call that backtracks releases nothing).
RE2 has no backreferences and no look-around; a pattern that uses them, or that does not parse, is
refused with :class:`PatternError` in words.

Compiled patterns are cached (:data:`CACHE_ENTRIES` of them, failures too, cleared when full), each
compiled under RE2's memory bound :data:`MAX_MEMORY` (its program and its DFA cache; a pattern whose
program alone is larger is refused, a DFA that fills its share falls back to RE2's NFA, still linear).
"""
from __future__ import annotations

import re
from typing import Annotated

import re2
from pydantic import AfterValidator

MAX_MEMORY = 1 << 20   # bytes RE2 may use for one compiled pattern (its default is 8 MiB)
CACHE_ENTRIES = 128     # compiled patterns kept (each at most MAX_MEMORY)

_CACHE: dict[str, object] = {}
_OPTIONS = re2.Options()
_OPTIONS.max_mem = MAX_MEMORY
_OPTIONS.log_errors = False   # RE2 would print every refused pattern on stderr
_BACKREFERENCE = re.compile(r"invalid escape sequence: \\[1-9]")
_LOOKAROUND = re.compile(r"invalid perl operator: \(\?<?[=!]")


class PatternError(ValueError):
    """A pattern RE2 refuses: ``str()`` says which pattern and why, in words."""


def _refusal(pattern: str, exc: Exception) -> PatternError:
    reason = exc.args[0] if exc.args else str(exc)
    reason = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
    if reason == "pattern too large - compile failed":
        reason = f"it needs more than RE2's {MAX_MEMORY} bytes of memory: simplify it"
    elif _BACKREFERENCE.search(reason):
        reason += " (RE2 has no backreferences)"
    elif _LOOKAROUND.search(reason):
        reason += " (RE2 has no look-around)"
    shown = pattern if len(pattern) <= 120 else pattern[:117] + "..."
    return PatternError(f"invalid RE2 regular expression '{shown}': {reason}")


def compiled(pattern: str):
    """The RE2 program of ``pattern`` (a ``str``), from the cache when compiled before.

    Raises :class:`PatternError` naming the pattern when RE2 refuses it (syntax, a construct RE2
    lacks, more memory than :data:`MAX_MEMORY`)."""
    hit = _CACHE.get(pattern)
    if hit is None:
        try:
            hit = re2.compile(pattern, _OPTIONS)
        except re2.error as exc:
            hit = _refusal(pattern, exc)
        if len(_CACHE) >= CACHE_ENTRIES:
            _CACHE.clear()
        _CACHE[pattern] = hit
    if isinstance(hit, PatternError):
        raise hit
    return hit


def problem(pattern: str) -> str:
    """'' when RE2 compiles ``pattern``, else why not (the :class:`PatternError` text): the lint check
    of a pattern known before any review (a literal, a params value, a rule file's field)."""
    try:
        compiled(pattern)
    except PatternError as exc:
        return str(exc)
    return ""


def search(pattern: str, text: str) -> bool:
    """CEL ``matches`` with Kubernetes' meaning: True when ``pattern`` matches some part of ``text``
    (anchor it, ``^...$``, to match the whole text). Raises :class:`PatternError`."""
    return compiled(pattern).search(text) is not None


def fullmatch(pattern: str, text: str) -> bool:
    """True when ``pattern`` matches the whole of ``text``. Raises :class:`PatternError`."""
    return compiled(pattern).fullmatch(text) is not None


def sub(pattern: str, replacement: str, text: str) -> str:
    """``text`` with every match of ``pattern`` replaced by ``replacement`` (``\\1``, ``\\g<name>``
    name groups, as Python's ``re.sub``). Raises :class:`PatternError`."""
    return compiled(pattern).sub(replacement, text)


def _checked(value: str) -> str:
    why = problem(value)
    if why:
        raise ValueError(why)
    return value


Pattern = Annotated[str, AfterValidator(_checked)]
"""A rule file's field that holds an RE2 pattern: compiled when the rules load, a finding at the field
(file:line:column) when RE2 refuses it."""
