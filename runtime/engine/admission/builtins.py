"""Named built-in mutations an AdmissionPolicy may call (``mutations[].builtin``).

A built-in reuses engine code that already implements a spec section, so the policy does not restate
it in CEL: it returns the mutated object, and the engine turns the difference into writes
(``patch.diff_writes``). Each takes ``(policy, object, view, params)`` and must be pure.
"""
from __future__ import annotations

from typing import Callable

from runtime.engine.admission.context import AdmissionView
from runtime.engine.pools.instancetypes import default_instance_type
from runtime.engine.policy import Policy


def instance_type_defaults(policy: Policy, obj: dict, view: AdmissionView, params: dict) -> dict:
    """docs/concepts/pools-and-flavors.md "InstanceType admission" defaulting (generalGroup, finalizer,
    schedule and entrance labels, enrichment from the first matching ResourceFlavor). ``params.settingAware``
    names the awareness setting."""
    aware = view.settings.get(params["settingAware"]) is True
    return default_instance_type(policy, obj, aware, view.snapshot.list("ResourceFlavor"))


BUILTINS: dict[str, Callable[[Policy, dict, AdmissionView, dict], dict]] = {
    "instanceTypeDefaults": instance_type_defaults,
}
