"""The resource-key family classifier, ``ResourceFamilyOf`` (spec/pod-requests.md §1-§2).

One pure implementation shared by the admission CEL function ``resourceFamily`` / ``podContainers``
(runtime/rules/celadmission.py) and the node agent's PodResources mapping
(runtime/engine/podresources.py). The table is data: the ``resourceKeys`` value of the
``AdmissionParams`` named by rules/agent.yaml ``podResources.resourceKeysParams`` (``resource-keys``
in rules/admission/pods.yaml); bases and partition kinds come from rules/manufacturers.yaml.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:  # runtime.rules.celadmission imports this module; keep it free of import cycles
    from runtime.engine.policy import Policy


def resource_family(name: str, table: Mapping[str, Any], manufacturers: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Classify one resource key: ``{family, base, profile}`` (pod-requests.md §2 steps 1-5).

    ``family`` is ``none``, ``exclusive``, ``shared``, ``sliced``, ``partitioned`` or ``visibility``;
    ``base`` the manufacturer's ``<base>`` (``""`` for ``none``/``visibility``); ``profile`` the
    per-profile tail (``nvidia.com/gpu.partitioned.mig-3g.40gb`` -> ``3g.40gb``), else ``""``.
    ``table`` keys: ``visibilityPrefix``, ``visibilitySuffix``, ``profileInfix``, ``profileFamily``,
    ``baseFamily``, ``suffixes`` (ordered ``{suffix, family}``); ``manufacturers``: ``{id, base,
    partitionKind}`` mappings. Never raises for an unknown name (it is ``none``).
    """
    none = {"family": "none", "base": "", "profile": ""}
    vis_prefix, vis_suffix = table["visibilityPrefix"], table["visibilitySuffix"]
    ids = {m["id"] for m in manufacturers}
    bases = {m["base"] for m in manufacturers}
    if name.startswith(vis_prefix):
        rest = name[len(vis_prefix):]
        if rest.endswith(vis_suffix) and rest[: -len(vis_suffix)] in ids:
            return {"family": "visibility", "base": "", "profile": ""}
        return none
    for m in manufacturers:
        if not m.get("partitionKind"):
            continue
        prefix = m["base"] + table["profileInfix"] + m["partitionKind"] + "-"
        if name.startswith(prefix) and len(name) > len(prefix):
            return {"family": table["profileFamily"], "base": m["base"], "profile": name[len(prefix):]}
    for row in table["suffixes"]:
        suffix = row["suffix"]
        if name.endswith(suffix) and name[: -len(suffix)] in bases:
            return {"family": row["family"], "base": name[: -len(suffix)], "profile": ""}
    if name in bases:
        return {"family": table["baseFamily"], "base": name, "profile": ""}
    return none


def classifier_manufacturers(policy: "Policy") -> list[dict[str, Any]]:
    """The manufacturer table as the classifier reads it: ``[{id, base, partitionKind}]`` in file order,
    from ``policy.manufacturers`` (so the agent's ``GPUSTACK_<ID>_*`` overrides apply)."""
    return [{"id": m.id, "base": m.base, "partitionKind": m.partitionKind} for m in policy.manufacturers.values()]


def classifier_table(policy: "Policy", params_name: str) -> dict[str, Any]:
    """The ``resourceKeys`` table of the ``AdmissionParams`` document ``params_name``.

    Raises KeyError naming the document when it is missing or has no ``resourceKeys``.
    """
    values = policy.ruleset.get("AdmissionParams", params_name).values
    if "resourceKeys" not in values:
        raise KeyError(f"AdmissionParams {params_name!r} has no values.resourceKeys")
    return dict(values["resourceKeys"])
