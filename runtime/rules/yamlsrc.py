"""YAML documents with the line of every field, for `file:line field.path: message` errors.

PyYAML composes the node tree (which carries marks); this module builds plain Python values from it
and a map ``path tuple -> 1-based line``. The tree is composed by libyaml (PyYAML's ``CSafeLoader``,
~25x faster than its pure-Python parser, with the same nodes, marks and character indexes); text it
refuses is parsed again by the pure-Python ``SafeLoader``, so an error reads exactly as PyYAML's own. Paths
use keys and list indexes: ``("spec", "rules", 3, "expression")``; :func:`dotted` renders them as
``spec.rules[3].expression``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import yaml

from runtime.model.cellimits import RuleLoadingLimits
from runtime.model.errors import field_path

_DEFAULTS = RuleLoadingLimits()   # rules/cel.yaml loading: what a text is counted against by default


class YamlSourceError(ValueError):
    """The text is not YAML, or expands past its :class:`YamlLimits`; ``line`` is 1-based (0 when unknown)."""

    def __init__(self, message: str, line: int = 0, column: int = 0):
        super().__init__(message)
        self.line = line
        self.column = column


@dataclass(frozen=True)
class YamlLimits:
    """What YAML documents may expand to, counted on the composed nodes before any value is built
    (docs/rule-authoring.md "Bounded loading"): ``nodes`` after alias expansion (an alias ``*a`` counts
    every node its anchor holds, each time) and ``aliases`` (alias references), both over all the texts
    counted together, and ``depth`` (levels of nesting after expansion); ``setting``: how a finding names
    where they are set."""

    nodes: int = _DEFAULTS.maxNodes
    aliases: int = _DEFAULTS.maxAliases
    depth: int = _DEFAULTS.maxDepth
    setting: str = "rules/cel.yaml loading"


def _children(node: yaml.Node) -> list:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return list(node.value) if isinstance(node, yaml.SequenceNode) else []


def _over(node: yaml.Node, what: str) -> YamlSourceError:
    return YamlSourceError(what, node.start_mark.line + 1, node.start_mark.column + 1)


def measure(root: yaml.Node, limits: YamlLimits, counted: list[int]) -> None:
    """Count the composed document ``root`` against ``limits`` without building it: ``counted`` (``[nodes,
    aliases]`` counted so far) grows by its nodes after alias expansion and its alias references.
    Each distinct node is visited once (an alias reuses its anchor's count), with an explicit stack, so a
    601-byte text of nested aliases that expands to millions of values is counted in microseconds.
    Raises :class:`YamlSourceError` at the node where a limit is passed, and at a recursive alias."""
    sizes: dict[int, tuple[int, int]] = {}   # id(node) -> (nodes, height) after expansion
    path: set[int] = set()
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, finished = stack.pop()
        ident = id(node)
        if finished:
            parts = [sizes[id(child)] for child in _children(node)]
            sizes[ident] = (1 + sum(n for n, _ in parts), 1 + max((h for _, h in parts), default=0))
            path.discard(ident)
            continue
        if ident in path:
            raise _over(node, "an alias refers to a node that holds it (a recursive alias)")
        if ident in sizes:   # a second reference: an alias
            counted[1] += 1
            if counted[1] > limits.aliases:
                raise _over(node, f"more than {limits.aliases} alias references "
                                  f"({limits.setting}.maxAliases)")
            if depth + sizes[ident][1] - 1 > limits.depth:
                raise _over(node, f"this alias nests deeper than {limits.depth} levels "
                                  f"({limits.setting}.maxDepth)")
            continue
        if depth > limits.depth:
            raise _over(node, f"nested deeper than {limits.depth} levels ({limits.setting}.maxDepth)")
        path.add(ident)
        stack.append((node, depth, True))
        stack.extend((child, depth + 1, False) for child in reversed(_children(node)))
    before, counted[0] = counted[0], counted[0] + sizes[id(root)][0]
    if counted[0] > limits.nodes:
        raise _over(root, f"this document expands to {sizes[id(root)][0]} values after its aliases, more "
                          f"than {limits.setting}.maxNodes ({limits.nodes} in all the files, {before} before "
                          "it): an alias (*name) repeats everything its anchor (&name) holds")


@dataclass
class SourceDocument:
    """One YAML document: its value, its first line, and the line of each field path."""

    value: Any
    line: int
    lines: dict[tuple, int] = field(default_factory=dict)
    spans: dict[tuple, tuple[int, int, int]] = field(default_factory=dict)
    text: str = ""

    def line_of(self, path: tuple) -> int:
        """The line of ``path`` or of its nearest ancestor that has one."""
        path = tuple(path)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.line

    def column_of(self, path: tuple) -> int:
        """The 1-based column where the value of ``path`` (or its nearest recorded ancestor) starts."""
        path = tuple(path)
        while path:
            if path in self.spans:
                return self.spans[path][2]
            path = path[:-1]
        return 1

    def position_in(self, path: tuple, offset: int) -> tuple[int, int]:
        """File ``(line, column)`` (1-based) of character ``offset`` (0-based) of the scalar at ``path``.

        The scalar's characters are matched one by one against its source text, skipping what YAML
        removed (quotes, escapes, folded line breaks and indentation), so the position is exact for
        plain, quoted and block scalars alike. Falls back to the value's own start.
        """
        span = self.spans.get(tuple(path))
        value = self.value
        try:
            for part in path:
                value = value[part]
        except (KeyError, IndexError, TypeError):
            value = None
        if span is None or not isinstance(value, str) or not self.text:
            return self.line_of(path), self.column_of(path)
        start, end, _ = span
        raw = self.text[start:end]
        j = 0
        target = len(raw)
        for i, ch in enumerate(value):
            if ch.isspace():
                if i == offset:
                    target = j
                    break
                continue
            found = raw.find(ch, j)
            if found < 0:
                break
            if i >= offset:
                target = found
                break
            j = found + 1
        else:
            target = min(j, len(raw))
        index = start + target
        line = self.text.count("\n", 0, index) + 1
        column = index - (self.text.rfind("\n", 0, index) + 1) + 1
        return line, column


dotted = field_path  # ("spec", "rules", 3, "expression") -> "spec.rules[3].expression"


_CONSTRUCTOR = yaml.SafeLoader
_COMPOSER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # PyYAML built without libyaml: the Python one


def _build(node: yaml.Node, path: tuple, lines: dict, spans: dict, text: str) -> Any:
    lines[path] = node.start_mark.line + 1
    start = node.start_mark.index
    style = getattr(node, "style", None)
    if style in ("'", '"'):
        start += 1  # the opening quote
    elif style in ("|", ">"):  # the header line (indicator, chomping, comment) is not content
        newline = text.find("\n", start)
        start = newline + 1 if newline >= 0 else start
    spans[path] = (start, node.end_mark.index, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        out = {}
        for key_node, value_node in node.value:
            key = _build_scalar(key_node)
            if key in out:  # PyYAML would silently keep the last value; a rule file must not
                raise YamlSourceError(f"duplicate key {key!r} in {dotted(path)} (first at line "
                                      f"{lines[path + (key,)]})",
                                      key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            out[key] = _build(value_node, path + (key,), lines, spans, text)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(child, path + (i,), lines, spans, text) for i, child in enumerate(node.value)]
    return _build_scalar(node)


def _build_scalar(node: yaml.Node) -> Any:
    loader = _CONSTRUCTOR("")
    try:
        return loader.construct_object(node, deep=True)
    finally:
        loader.dispose()


def safe_load_all(text: str) -> list:
    """``yaml.safe_load_all`` as a list, parsed by libyaml (same values: :func:`plain_documents`); text
    libyaml refuses is parsed again by PyYAML's own parser, so an error is PyYAML's own (type and message)."""
    try:
        return plain_documents(text, _COMPOSER)
    except yaml.YAMLError:
        if _COMPOSER is yaml.SafeLoader:
            raise
    return list(yaml.safe_load_all(text))


_STR, _MAP, _SEQ = "tag:yaml.org,2002:str", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"
_SPECIAL_KEYS = ("tag:yaml.org,2002:merge", "tag:yaml.org,2002:value")


class _Unplain(Exception):
    """A node :func:`_plain` leaves to PyYAML's constructor (merge keys, other tags, recursion, a
    duplicate key the loader refuses, an unhashable key)."""


def plain_documents(text: str, loader_class: type, refuse_duplicates: bool = False) -> list:
    """``list(yaml.load_all(text, Loader=loader_class))`` for a safe loader: the same values, built
    from the composed nodes directly where they are plain (maps, lists and scalars of the standard
    tags), which is what PyYAML's constructor spends most of a load on (its per-node dispatch,
    generators and bookkeeping). Strings are the scalar's text; other scalars (int, float, bool,
    null, timestamps...) are the loader's own constructor's; aliases give the same object, as there.
    A document with anything else (a merge key, another tag, a recursive alias, an unhashable key, a
    duplicate key when ``refuse_duplicates``, for a loader that refuses them) is built by the loader's
    own ``construct_document``: its values, its errors."""
    loader = loader_class(text)
    try:
        out = []
        while loader.check_node():
            node = loader.get_node()
            try:
                out.append(_plain(node, loader, {}, refuse_duplicates))
            except _Unplain:
                out.append(loader.construct_document(node))
        return out
    finally:
        loader.dispose()


def _plain(node: yaml.Node, loader: Any, built: dict, refuse_duplicates: bool) -> Any:
    """The value of ``node`` (see :func:`plain_documents`); ``built``: id(node) -> value, or None while
    the node is being built (an alias back to it is recursion: left to PyYAML)."""
    ident = id(node)
    if ident in built:
        value = built[ident]
        if value is None and type(node) is not yaml.ScalarNode:
            raise _Unplain()
        return value
    kind, tag = type(node), node.tag
    if kind is yaml.ScalarNode:
        value = node.value if tag == _STR else loader.construct_object(node, deep=True)
    elif kind is yaml.MappingNode and tag == _MAP:
        built[ident] = None
        value = {}
        for key_node, value_node in node.value:
            if type(key_node) is not yaml.ScalarNode or key_node.tag in _SPECIAL_KEYS:
                raise _Unplain()  # a map or list as a key (unhashable), a merge key <<, a value key =
            key = key_node.value if key_node.tag == _STR else loader.construct_object(key_node, deep=True)
            try:
                if refuse_duplicates and key in value:
                    raise _Unplain()
            except TypeError:  # an unhashable key
                raise _Unplain() from None
            value[key] = _plain(value_node, loader, built, refuse_duplicates)
    elif kind is yaml.SequenceNode and tag == _SEQ:
        built[ident] = None
        value = [_plain(child, loader, built, refuse_duplicates) for child in node.value]
    else:
        raise _Unplain()
    built[ident] = value
    return value


def load_documents(text: str, limits: YamlLimits = YamlLimits(),
                   counted: Optional[list[int]] = None) -> list[SourceDocument]:
    """Parse a multi-document YAML text; empty documents are skipped. Each document is counted against
    ``limits`` (:func:`measure`) before its values are built; ``counted`` (``[values, aliases]``) carries
    the count across the texts of one rules directory (default: this text alone).

    Raises :class:`YamlSourceError` with the failing line.
    """
    counted = [0, 0] if counted is None else counted
    before = list(counted)
    try:
        return _documents(text, _COMPOSER, limits, counted)
    except yaml.YAMLError:
        counted[:] = before
        if _COMPOSER is yaml.SafeLoader:
            raise
    except YamlSourceError:
        counted[:] = before   # a refused text builds nothing: the next is counted without it
        raise
    try:
        return _documents(text, yaml.SafeLoader, limits, counted)  # libyaml refused it: PyYAML's own words
    except YamlSourceError:
        counted[:] = before
        raise


def _documents(text: str, composer: type, limits: YamlLimits = YamlLimits(),
               counted: Optional[list[int]] = None) -> list[SourceDocument]:
    counted = [0, 0] if counted is None else counted
    try:
        loader = composer(text)
        docs = []
        try:
            while loader.check_node():
                node = loader.get_node()
                if node is None:
                    continue
                measure(node, limits, counted)
                lines: dict[tuple, int] = {}
                spans: dict[tuple, tuple[int, int, int]] = {}
                value = _build(node, (), lines, spans, text)
                if value is None:
                    continue
                docs.append(SourceDocument(value=value, line=node.start_mark.line + 1, lines=lines,
                                           spans=spans, text=text))
        finally:
            loader.dispose()
        return docs
    except YamlSourceError:
        raise
    except yaml.MarkedYAMLError as exc:
        if composer is not yaml.SafeLoader:
            raise
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 0
        raise YamlSourceError(f"not valid YAML: {exc.problem or exc}", line,
                              mark.column + 1 if mark else 0) from exc
    except yaml.YAMLError as exc:
        if composer is not yaml.SafeLoader:
            raise
        raise YamlSourceError(f"not valid YAML: {exc}") from exc
