"""Which of the four views one accelerator offers, by its manufacturer's row (rules/manufacturers.yaml
``views``; docs/concepts/dra.md, docs/tasks/add-manufacturer-or-preset.md). Pure.

A row's ``views`` maps a view (``exclusive``, ``shared``, ``sliced``, ``partitioned``) to a CEL condition
over ``accelerator``: ``{name, memoryMib, migEnabled, source, driver}``, ``source`` being ``dra`` for an
accelerator a DRA driver published (``driver`` its name) and ``devicePlugin`` otherwise. A view left out
is never offered; a row without ``views`` offers every view (as the device itself allows: slices when
the manufacturer slices, partitions with MIG on). What a view not offered means downstream (0 in every
pool, no capacity key, no capability entry, a denied request) is the callers' (devicesobject,
accelerators, the admission params: :func:`runtime.engine.resourcekeys.classifier_manufacturers`'
``refusals``).
"""
from __future__ import annotations

from typing import Any

from runtime.engine.policy import Policy
from runtime.model.facts import AcceleratorFacts
from runtime.model.manufacturers import VIEWS
from runtime.rules.cel.errors import CelEvalError

SOURCE_DRA = "dra"
SOURCE_PLUGIN = "devicePlugin"


def accelerator_activation(acc: AcceleratorFacts) -> dict[str, Any]:
    """The ``accelerator`` a view condition reads (module docstring)."""
    return {"name": acc.name, "memoryMib": acc.memoryMib, "migEnabled": acc.migEnabled,
            "source": SOURCE_DRA if acc.dra is not None else SOURCE_PLUGIN,
            "driver": acc.dra.driver if acc.dra is not None else ""}


def offered_views(policy: Policy, acc: AcceleratorFacts) -> list[str]:
    """The views ``acc`` offers by its manufacturer's row, in :data:`VIEWS` order. A condition that does
    not evaluate to true (false, not a boolean, or an evaluation error such as a field ``accelerator``
    does not have: the rules' static checks bind the name ``accelerator`` only) does not offer its view."""
    manu = policy.manufacturers[acc.manufacturer]
    if manu.views is None:
        return list(VIEWS)
    activation = {"accelerator": accelerator_activation(acc)}
    return [view for view in VIEWS if view in manu.views and _holds(manu.views[view], activation)]


def _holds(condition, activation: dict[str, Any]) -> bool:
    try:
        return condition.evaluate(activation) is True
    except CelEvalError:
        return False
