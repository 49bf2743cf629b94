"""The static check of one CEL condition an object carries (a PolicyException's ``spec.match.condition``),
with the same parser, name check, type check and cost model as every rule (docs/rule-authoring.md "What
lint checks"; docs/concepts/exceptions.md "The match condition").

The condition reads one name, ``object``, typed by the schema of the kind it is written for
(:mod:`runtime.rules.schemas`), must be a bool, and its worst-case cost must stay within
``maxExpressionCost`` of rules/cel.yaml.
"""
from __future__ import annotations

from runtime.model.cellimits import CelStaticLimits
from runtime.rules.cel import names as celnames

from runtime.rules.cel import check as celtyping
from runtime.rules.cel.library.strings import SIGNATURES
from runtime.rules.activations import kind_type

CONDITION_ROOTS = frozenset({"object"})
# the names of runtime.engine.admission.builtins.VARIABLES, for the static checks (the rules layer does not
# import the engine; tests/admission/test_exceptions.py holds the two equal)
BUILTIN_VARIABLES = frozenset({"exceptionConditionProblems"})


def condition_problems(source: str, kind: str, limits: CelStaticLimits) -> list[str]:
    """What is wrong with the CEL ``source`` as a condition on an object of ``kind`` (``Pod``,
    ``Instance``, ...): syntax (``line:column: message``), names, types, a non-bool result, a worst-case
    cost over ``limits.maxExpressionCost``; empty when it passes."""
    tree = celnames.parse(source)
    if isinstance(tree, celnames.CelSyntaxError):
        return [f"{tree.line}:{tree.column}: {tree.message}"]
    problems = [f"{p.line}:{p.column}: {p.message}"
                for p in celnames.check_names(tree, celnames.Names(roots=CONDITION_ROOTS))]
    if problems:
        return problems
    bounds = celtyping.Bounds(float(limits.unboundedStringSize), float(limits.unboundedListSize))
    scope = celtyping.Scope(roots={"object": kind_type(kind, bounds)}, functions=SIGNATURES, bounds=bounds)
    try:
        result = celtyping.check(source, tree, scope, "bool")
    except (RecursionError, ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
        return [f"the type checker could not read this expression ({exc!r})"]
    problems = [f"{p.line}:{p.column}: {p.message}" for p in result.problems]
    if result.cost > limits.maxExpressionCost:
        cost = "unbounded" if result.cost == celtyping.INF else f"{result.cost:.3g}"
        problems.append(f"worst-case cost estimate {cost} is over maxExpressionCost "
                        f"{limits.maxExpressionCost} (rules/cel.yaml)")
    return problems
