"""Named built-in mutations and variables an AdmissionPolicy may call (``mutations[].builtin``,
``variables[].builtin``).

A built-in reuses engine code that already implements a spec section, so the policy does not restate
it in CEL: a mutation returns the mutated object, and the engine turns the difference into writes
(``patch.diff_writes``); a variable returns its value. Each takes ``(policy, object, view, params)``
and must be pure.
"""
from __future__ import annotations

from typing import Callable

from runtime.engine.admission.context import AdmissionView
from runtime.engine.pools.instancetypes import default_instance_type
from runtime.engine.policy import Policy
from runtime.model.cellimits import CelLimitsSpec
from runtime.rules.conditioncheck import condition_problems


def instance_type_defaults(policy: Policy, obj: dict, view: AdmissionView, params: dict) -> dict:
    """docs/concepts/pools-and-flavors.md "InstanceType admission" defaulting (generalGroup, finalizer,
    schedule and entrance labels, enrichment from the first matching ResourceFlavor). ``params.settingAware``
    names the awareness setting."""
    aware = view.settings.get(params["settingAware"]) is True
    return default_instance_type(policy, obj, aware, view.snapshot.list("ResourceFlavor"))


BUILTINS: dict[str, Callable[[Policy, dict, AdmissionView, dict], dict]] = {
    "instanceTypeDefaults": instance_type_defaults,
}


def exception_condition_problems(policy: Policy, obj: dict, view: AdmissionView, params: dict) -> str:
    """What is wrong with a PolicyException's ``spec.match.condition`` as CEL on an object of its policy's
    kind (:func:`runtime.rules.conditioncheck.condition_problems`: syntax, names, types, cost within
    rules/cel.yaml), ``; ``-joined; "" when it passes, is absent, or its policy is unknown (another rule
    says so). ``params.exceptions.policies`` gives each policy's kind."""
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    match = spec.get("match") if isinstance(spec.get("match"), dict) else {}
    condition = match.get("condition")
    known = (params.get("exceptions") or {}).get("policies") or {}
    if not isinstance(condition, str) or not condition or spec.get("policy") not in known:
        return ""
    limits = policy.ruleset.all("CelLimits")
    static = limits[0].spec.static if limits else CelLimitsSpec().static
    return "; ".join(condition_problems(condition, known[spec["policy"]]["kind"], static))


VARIABLES: dict[str, Callable[[Policy, dict, AdmissionView, dict], object]] = {
    "exceptionConditionProblems": exception_condition_problems,
}
