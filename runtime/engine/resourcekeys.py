"""The inputs of the resource-key family classifier (:func:`runtime.model.resourcefamily.resource_family`,
docs/reference/controller.md "Pod accelerator requests") read from a Policy, for the admission check, the
Kueue configuration and the node agent's PodResources mapping (runtime/engine/devices/podresources.py). The
table is data: the ``resourceKeys`` value of the ``AdmissionParams`` named by rules/agent.yaml
``podResources.resourceKeysParams`` (``resource-keys`` in rules/admission/pods.yaml); bases and partition
kinds come from rules/manufacturers.yaml.
"""
from __future__ import annotations

from typing import Any

from runtime.engine.policy import Policy


def classifier_manufacturers(policy: Policy) -> list[dict[str, Any]]:
    """The manufacturer table as the classifier reads it: ``[{id, base, partitionKind, views, refusals}]``
    in file order, from ``policy.manufacturers`` (so the agent's ``GPUSTACK_<ID>_*`` overrides apply);
    ``views`` the views its devices can offer, ``refusals`` view -> the denial message for each view they
    never offer (rules/manufacturers.yaml ``views`` and ``messages.viewNotOffered``;
    :meth:`runtime.model.manufacturers.ManufacturerTableSpec.classifier_rows`)."""
    return policy.manufacturer_table.classifier_rows(list(policy.manufacturers.values()))


def classifier_table(policy: Policy, params_name: str) -> dict[str, Any]:
    """The ``resourceKeys`` table of the ``AdmissionParams`` document ``params_name``.

    Raises KeyError naming the document when it is missing or has no ``resourceKeys``.
    """
    values = policy.ruleset.get("AdmissionParams", params_name).values
    if "resourceKeys" not in values:
        raise KeyError(f"AdmissionParams {params_name!r} has no values.resourceKeys")
    return dict(values["resourceKeys"])
