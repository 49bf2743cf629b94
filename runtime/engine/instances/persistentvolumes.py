"""InstancePersistentVolume -> its PersistentVolumeClaim (docs/concepts/instances.md "Persistent volumes"):
pure rendering.

An InstancePersistentVolume (namespaced) stands for one PVC of the same name and namespace, created
and controlled by the controller: ``storageClassName: <spec.type>``, ``accessModes:
[<spec.accessMode>]``, ``resources.requests.storage: <spec.capacity>`` (default from
rules/instances/pod.yaml ``placement.defaultCapacity``, 20Gi). Its ``status`` mirrors the claim:
``phase`` (the PVC's phase) and ``volume`` (the bound PersistentVolume's name). The claim is what
Instances mount (``volume.persistent`` / ``additionalVolumes[].persistent``) and what the claim
placement reads.
"""
from __future__ import annotations

from runtime.engine.policy import Policy
from runtime.engine.snapshot import KNOWN_KINDS


def render_claim(policy: Policy, ipv: dict) -> dict:
    """The PersistentVolumeClaim of ``ipv``, with a controller ownerReference to it (so it goes with the
    InstancePersistentVolume). ``spec.type`` absent gives no ``storageClassName`` (the cluster's default
    class), ``spec.accessMode`` absent no ``accessModes`` (the API server then refuses the claim, and the
    error names the field)."""
    meta = ipv["metadata"]
    spec = ipv.get("spec") or {}
    claim: dict = {"resources": {"requests": {"storage": str(
        spec.get("capacity") or policy.ruleset.get("InstancePod").placement.defaultCapacity)}}}
    if spec.get("type"):
        claim["storageClassName"] = spec["type"]
    if spec.get("accessMode"):
        claim["accessModes"] = [spec["accessMode"]]
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": meta["name"], "namespace": meta.get("namespace") or "default",
                         "ownerReferences": [{"apiVersion": ipv.get(
                             "apiVersion", KNOWN_KINDS["InstancePersistentVolume"][0]),
                                              "kind": "InstancePersistentVolume", "name": meta["name"],
                                              "uid": meta.get("uid", ""), "controller": True,
                                              "blockOwnerDeletion": True}]},
            "spec": claim}


def claim_status(pvc: dict | None) -> dict:
    """``InstancePersistentVolume.status`` from its claim: ``{phase, volume}``, each only when set;
    ``{}`` when there is no claim yet."""
    if pvc is None:
        return {}
    out = {}
    if (pvc.get("status") or {}).get("phase"):
        out["phase"] = pvc["status"]["phase"]
    if (pvc.get("spec") or {}).get("volumeName"):
        out["volume"] = pvc["spec"]["volumeName"]
    return out


def owns_claim(ipv: dict, pvc: dict) -> bool:
    """Whether ``pvc``'s controller ownerReference is ``ipv`` (same uid): only such a claim is the
    InstancePersistentVolume's; a same-named claim of someone else is left alone and not mirrored."""
    uid = (ipv.get("metadata") or {}).get("uid")
    return any(ref.get("controller") and ref.get("kind") == "InstancePersistentVolume"
               and ref.get("uid") == uid
               for ref in (pvc.get("metadata") or {}).get("ownerReferences") or [])
