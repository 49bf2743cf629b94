"""What the cluster holds of one of our objects once the controller applied it
(docs/node-facts-robustness.md "`get` shows what the cluster holds").

The controller writes with server-side apply (runtime/kube/applier.py): labels and annotations that
another tool added stay. ``accelpolicy get`` shows them as the cluster would, per the rules of
runtime/engine/plan.py:

* ResourceFlavor: the live object's labels and annotations stay, ours win; the ``note.gpustack.ai/``
  annotations are ours alone (stale notes are pruned). A flavor whose ``spec.nodeLabels`` changed is
  recreated: nothing of the old object stays.
* ClusterQueue: the same, except that stale ``general.``/``acceleratable.`` labels are pruned.
* AdmissionCheck, InstanceTypeFlavor: the live labels and annotations stay, ours win.
* LocalQueue: create-only; the live labels and annotations stay, ours win.
"""
from __future__ import annotations

from runtime.engine.policy import Policy


def as_kept(policy: Policy, kind: str, ours: dict, live: dict | None) -> dict:
    """``ours`` with the metadata another manager gave ``live`` merged in (see the module docstring);
    ``ours`` itself when nothing is added. Never mutates either object."""
    if not live:
        return ours
    if kind == "ResourceFlavor" and (live.get("spec") or {}).get("nodeLabels") != (
            ours.get("spec") or {}).get("nodeLabels"):
        return ours
    live_meta = live.get("metadata") or {}
    meta = ours.get("metadata") or {}
    labels = dict(live_meta.get("labels") or {})
    annotations = dict(live_meta.get("annotations") or {})
    if kind == "ClusterQueue":
        ours_prefixes = (policy.prefix("general"), policy.prefix("acceleratable"))
        labels = {k: v for k, v in labels.items() if not k.startswith(ours_prefixes)}
    if kind == "ResourceFlavor":
        annotations = {k: v for k, v in annotations.items() if not k.startswith(policy.prefix("note"))}
    labels.update(meta.get("labels") or {})
    annotations.update(meta.get("annotations") or {})
    if labels == (meta.get("labels") or {}) and annotations == (meta.get("annotations") or {}):
        return ours
    merged = {**meta, "labels": labels}
    if annotations:
        merged["annotations"] = annotations
    return {**ours, "metadata": merged}
