"""The static check of one CEL condition an object carries (a PolicyException's ``spec.match.condition``),
with the same parser, checker and cost model as every rule (docs/rule-authoring.md "What lint checks";
docs/concepts/exceptions.md "The match condition").

The condition reads one name, ``object``, typed by the schema of the kind it is written for
(:mod:`runtime.rules.schemas`), must be a bool, and its worst-case cost must stay within
``maxExpressionCost`` of rules/cel.yaml.
"""
from __future__ import annotations

from runtime.model.cellimits import CelStaticLimits
from runtime.rules.activations import kind_type
from runtime.rules.cel.check import check
from runtime.rules.cel.errors import Finding
from runtime.rules.cel.library.table import LIBRARY
from runtime.rules.cel.names import Names
from runtime.rules.cel.parse import parse
from runtime.rules.cel.types import INF, Bounds, Scope

CONDITION_ROOTS = frozenset({"object"})
# the names of runtime.engine.admission.builtins.VARIABLES, for the static checks (the rules layer does not
# import the engine; tests/admission/test_exceptions.py holds the two equal)
BUILTIN_VARIABLES = frozenset({"exceptionConditionProblems"})


def condition_problems(source: str, kind: str, limits: CelStaticLimits) -> list[str]:
    """What is wrong with the CEL ``source`` as a condition on an object of ``kind`` (``Pod``,
    ``Instance``, ...): syntax (``line:column: message``), names, else types, a non-bool result, a
    worst-case cost over ``limits.maxExpressionCost``; empty when it passes."""
    tree = parse(source)
    if isinstance(tree, Finding):
        return [f"{tree.line}:{tree.column}: {tree.message}"]
    bounds = Bounds(float(limits.unboundedStringSize), float(limits.unboundedListSize))
    scope = Scope(roots={"object": kind_type(kind, bounds)}, functions=LIBRARY, bounds=bounds)
    try:
        result = check(source, tree, Names(roots=CONDITION_ROOTS), scope, "bool")
    except (RecursionError, ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
        return [f"the type checker could not read this expression ({exc!r})"]
    if result.names:
        return [f"{p.line}:{p.column}: {p.message}" for p in result.names]
    problems = [f"{p.line}:{p.column}: {p.message}" for p in result.types]
    if result.cost > limits.maxExpressionCost:
        cost = "unbounded" if result.cost == INF else f"{result.cost:.3g}"
        problems.append(f"worst-case cost estimate {cost} is over maxExpressionCost "
                        f"{limits.maxExpressionCost} (rules/cel.yaml)")
    return problems
