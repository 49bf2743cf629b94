"""The names stage: what one expression may name, and what is wrong when it names something else
(docs/rule-authoring.md "What lint checks").

A :class:`Names` is declared per field by the caller (:mod:`runtime.rules.checks`):

- ``roots``: the free identifiers bound in its activation (``object``, ``params``, ``gKey``...);
- ``members``: for a root whose members are declared (``variables``, ``params``, ``lookups``,
  ``settings``, ``request``), the declared member names, checked on ``root.name`` and
  ``root['name']``;
- ``params``: the policy's params values, so ``settings[params.settingX]`` is resolved and the
  setting name it holds checked against ``settings``;
- ``functions``: cel-python's standard functions and macros plus the custom table
  (:data:`runtime.rules.cel.library.table.LIBRARY`), as calls or as receiver-style methods.

Comprehension variables (``x`` in ``items.map(x, ...)``) are bound inside their macro only. The checker
(:mod:`runtime.rules.cel.check`) asks these questions as it walks the tree, in every branch, so a name
in a branch no test takes is found too.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional

from runtime.rules.cel.library.table import LIBRARY

MACROS = frozenset({"map", "filter", "all", "exists", "exists_one"})
STANDARD_FUNCTIONS = frozenset({
    "has", "size", "string", "int", "uint", "double", "bool", "bytes", "list", "map", "type", "dyn",
    "duration", "timestamp", "matches", "contains", "startsWith", "endsWith", "getDate",
    "getDayOfMonth", "getDayOfWeek", "getDayOfYear", "getFullYear", "getHours", "getMilliseconds",
    "getMinutes", "getMonth", "getSeconds", "null_type",
})


def _listing(names: Iterable[str]) -> str:
    return ", ".join(sorted(names)) or "none"


@dataclass
class Names:
    """What one expression may name (see the module docstring); each question answers None when the
    name is declared, else the finding's message."""

    roots: frozenset[str]
    members: dict[str, frozenset[str]] = field(default_factory=dict)
    params: Optional[dict] = None
    functions: frozenset[str] = frozenset(LIBRARY) | STANDARD_FUNCTIONS

    def undeclared(self, name: str, bound: Iterable[str]) -> Optional[str]:
        """Identifier ``name`` where the comprehension variables ``bound`` are bound."""
        if name in bound or name in self.roots:
            return None
        return f"undeclared name {name!r} (names here: {_listing(self.roots | frozenset(bound))})"

    def unknown_function(self, name: str) -> Optional[str]:
        """A call of ``name``, as a function or a method."""
        return None if name in self.functions else f"unknown function {name!r}"

    def undeclared_member(self, root: str, member: str) -> Optional[str]:
        """``root.member`` or ``root['member']`` of a root that is not a comprehension variable."""
        declared = self.members.get(root)
        if declared is None or member in declared:
            return None
        return f"{root}.{member} is not declared here (declared: {_listing(declared)})"

    def unknown_setting(self, key: str) -> Optional[str]:
        """``settings[params.key]``: the setting the params value ``key`` names must be declared."""
        if self.params is None or "settings" not in self.members:
            return None
        value = self.params.get(key)
        declared = self.members["settings"]
        if isinstance(value, str) and value not in declared:
            return (f"params.{key} names setting {value!r}, which is not in the setting catalog "
                    f"(settings: {_listing(declared)})")
        return None
