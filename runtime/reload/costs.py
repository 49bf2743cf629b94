"""The cost estimates ``accelpolicy diff`` compares (docs/rule-authoring.md "How a rules change goes live").

Every CEL expression is keyed by the document and the rule it belongs to, never by its list position:
``<Kind>/<document name> <field path>``, each list item that has a ``name`` written ``[<name>]``
(``AdmissionPolicy/pods-validation spec.validations[one-accelerator-family].expression``). A rule inserted
before another, or a file split in two, moves no key; only the rule edited, added or removed shows.
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Optional

from runtime.rules.loader import RuleSet, rule_problems

_SEGMENT = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def named_path(spec: Any, path: str) -> str:
    """``path`` (``spec.validations[1].expression``) with each list index whose item (in ``spec``, the
    document's spec model or dict) has a ``name`` replaced by ``[<name>]``; indexes it cannot resolve stay."""
    out, node = [], {"spec": spec}
    for match in _SEGMENT.finditer(path):
        key, index = match.groups()
        if key is not None:
            out.append(("." if out else "") + key)
            node = node.get(key) if isinstance(node, dict) else getattr(node, key, None)
            continue
        items = node if isinstance(node, (list, tuple)) else []
        node = items[int(index)] if int(index) < len(items) else None
        name = node.get("name") if isinstance(node, dict) else getattr(node, "name", None)
        out.append(f"[{name}]" if isinstance(name, str) and name else f"[{index}]")
    return "".join(out)


def _document_at(ruleset: RuleSet, file: str, line: int):
    """The document of ``ruleset`` in ``file`` that holds ``line`` (the last one starting at or before it)."""
    found = None
    for document in ruleset.documents.values():
        if Path(document.file) == Path(file) and document.line <= line and (found is None or
                                                                          document.line > found.line):
            found = document
    return found


def cost_estimates(ruleset: RuleSet) -> Optional[dict[str, int]]:
    """``{key: worst-case cost}`` of every CEL expression of ``ruleset`` (module docstring): the static
    estimates of ``accelpolicy lint --costs`` (:class:`runtime.rules.activations.ExpressionCost`, in
    Kubernetes' CEL cost units, rounded up). None when the rules directory cannot be read again (then
    ``accelpolicy diff`` says the costs were not compared)."""
    costs: list = []
    root = Path(ruleset.root)
    try:
        rule_problems(root, cache=None, costs=costs)
    except OSError:
        return None
    out: dict[str, int] = {}
    for cost in costs:
        document = _document_at(ruleset, cost.file, cost.line)
        if document is None:
            file = Path(cost.file)
            key = f"{file.relative_to(root.name) if file.parts[:1] == (root.name,) else file} {cost.path}"
        else:
            key = f"{document.kind}/{document.name} {named_path(document.spec, cost.path)}"
        out[key] = max(out.get(key, 0), math.ceil(cost.cost))
    return out


def cost_growth(serving: RuleSet, ruleset: RuleSet) -> Optional[list[str]]:
    """``key: old -> new`` for every expression whose cost estimate grew (a new expression counts from 0),
    in key order; None when no estimate is available."""
    old, new = cost_estimates(serving), cost_estimates(ruleset)
    if old is None or new is None:
        return None
    return [f"{key}: {old.get(key, 0)} -> {cost}" for key, cost in sorted(new.items())
            if cost > old.get(key, 0)]
