"""The resource-key family classifier, ``ResourceFamilyOf`` (docs/reference/controller.md "Pod accelerator
requests"): pure, below the rules.

One implementation shared by the admission CEL functions ``resourceFamily`` / ``podContainers``
(runtime/rules/cel/library/objects.py), the admission check and the node agent's PodResources mapping
(through :mod:`runtime.engine.resourcekeys`, which reads the table and the manufacturers from a Policy).
The table is data: the ``resourceKeys`` value of the ``AdmissionParams`` named by rules/agent.yaml
``podResources.resourceKeysParams`` (``resource-keys`` in rules/admission/pods.yaml); bases and partition
kinds come from rules/manufacturers.yaml.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence


def resource_family(name: str, table: Mapping[str, Any],
                    manufacturers: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Classify one resource key: ``{family, base, profile}``.

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
