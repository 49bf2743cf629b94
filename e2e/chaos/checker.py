"""The fault suite's checker: the cluster against the state derived from its own facts (docs/reliability.md "Reliability: the fault suite").

:func:`read_cluster` lists every kind the engine reads (``runtime.engine.snapshot.KNOWN_KINDS``, the settings
Secret alone of the Secrets) through the API server. :func:`drift` derives the pools from those facts with
the same pure function the controller and ``accelpolicy get`` use (``runtime.engine.pools.derive``, live
phases) and names every difference between what the cluster holds and what it should hold:

* the ``kubectl get instancetypes`` table rendered from both (``runtime.report.tables``), column-exact
  (AGE aside);
* for each pool kind (ResourceFlavor, ClusterQueue, LocalQueue, AdmissionCheck, InstanceType,
  InstanceTypeFlavor, Devices): the same names, and every label and ``spec`` field of the derived object
  present with that value (Kueue and the API server add defaults); ``status`` too for the kinds whose
  status is ours (InstanceType, Devices).

Beside it, what docs/reliability.md "The faults" counts per fault, each from one listing:

* :func:`admin_fingerprints`: objects an administrator authored (Instances' spec, labels and annotations;
  InstanceTypes without the controller's derived label; Settings' spec; InstancePersistentVolumes'
  spec; ConfigMaps outside the system namespaces), so :func:`changed` can name those that changed;
* :func:`instance_pods`: each Instance's Pods (owner reference) -> duplicates (more than one Pod) and
  orphans (a Pod whose owning Instance does not exist);
* :func:`pool_identity`: the uid and the normalized body of every pool object (what "byte-identical"
  compares: everything but resourceVersion, managedFields, generation and timestamps);
* :func:`restart_counts`: container restarts of the system namespace's Pods.

Objects of the load generator (label ``chaos.accelpolicy.dev/load``) are left out of every count.
"""
from __future__ import annotations

import copy
import hashlib
import json

from runtime.engine.policy import Policy
from runtime.engine.pools import derive
from runtime.engine.snapshot import KNOWN_KINDS, Snapshot
from runtime.report.tables import render, resolve_kind

from chaos.load import LOAD_LABEL

SYSTEM = "gpustack-system"
LOAD_NAMESPACE = "chaos-load"   # the load generator's namespace (the suite creates it)
SYSTEM_NAMESPACES = (SYSTEM, "kube-system", "kube-public", "kube-node-lease", "kueue-system",
                     "node-feature-discovery")
POOL_KINDS = ("ResourceFlavor", "ClusterQueue", "LocalQueue", "AdmissionCheck", "InstanceType",
              "InstanceTypeFlavor", "Devices")
OUR_STATUS = ("InstanceType", "Devices")
VOLATILE_META = ("resourceVersion", "managedFields", "generation", "creationTimestamp")
TIME_KEYS = {"lastTransitionTime", "lastUpdateTime", "lastProbeTime", "lastHeartbeatTime"}


def read_cluster(session, policy: Policy) -> list[dict]:
    """Every object of the engine's kinds (each with its ``kind``), listed through ``session``; Secrets: only
    the settings Secret. A kind the server does not serve is skipped."""
    from runtime.kube.session import KubeApiError
    out: list[dict] = []
    for kind, (api_version, _) in KNOWN_KINDS.items():
        try:
            ref = session.ref(kind)
        except KubeApiError:
            continue
        if kind == "Secret":
            path = ref.path(SYSTEM, policy.settings.secretName)
            try:
                items = [session.call("get", path)]
            except KubeApiError as exc:
                if exc.status != 404:
                    raise
                items = []
        else:
            items = session.call("get", ref.path()).get("items") or []
        for item in items:
            item["kind"], item["apiVersion"] = kind, api_version
            out.append(item)
    return out


def _load_objects(objects: list[dict]) -> list[dict]:
    return [o for o in objects if LOAD_LABEL not in ((o.get("metadata") or {}).get("labels") or {})]


def snapshot_of(objects: list[dict]) -> Snapshot:
    """An engine Snapshot of ``objects`` (copies)."""
    return Snapshot.from_objects(copy.deepcopy(objects), origin="<cluster>")


def _subset(expected, actual, path: str) -> list[str]:
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{path}: expected a map, got {json.dumps(actual)[:200]}"]
        out: list[str] = []
        for key, value in expected.items():
            out += _subset(value, actual.get(key), f"{path}.{key}")
        return out
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [f"{path}: expected {json.dumps(expected)[:300]}, got {json.dumps(actual)[:300]}"]
        out = []
        for i, (e, a) in enumerate(zip(expected, actual)):
            out += _subset(e, a, f"{path}[{i}]")
        return out
    return [] if expected == actual else [f"{path}: expected {expected!r}, got {actual!r}"]


def _table_rows(text: str) -> list[list[str]]:
    from testing.localcluster.walkthrough import table_rows
    headers, rows = table_rows(text)
    return [headers] + [[r[h] for h in headers] for r in rows]


def derived_table(policy: Policy, objects: list[dict], kind: str = "instancetypes") -> str:
    """``kubectl get <kind>`` as the cluster should print it, derived from ``objects``' facts."""
    snapshot = snapshot_of(objects)
    state = derive(policy, snapshot, live=True, settings_namespace=SYSTEM)
    table = resolve_kind(kind)
    return render(table, state.view(policy, table.kind, snapshot))


def tables_match(actual: str, expected: str) -> bool:
    """Column-exact, AGE aside (testing.localcluster.walkthrough.tables_equal)."""
    from testing.localcluster.walkthrough import tables_equal
    return tables_equal(actual, expected)


def drift(policy: Policy, objects: list[dict]) -> list[str]:
    """What the cluster (``objects``) holds that differs from the state derived from its own facts;
    ``[]`` when they agree. Each entry names kind, object and field."""
    snapshot = snapshot_of(objects)
    state = derive(policy, snapshot, live=True, settings_namespace=SYSTEM)
    out: list[str] = []
    by_kind: dict[str, dict[tuple, dict]] = {}
    for o in objects:
        by_kind.setdefault(o["kind"], {})[((o["metadata"].get("namespace") or ""), o["metadata"]["name"])] = o
    for kind in POOL_KINDS:
        want = {((o["metadata"].get("namespace") or ""), o["metadata"]["name"]): o
                for o in state.view(policy, kind, snapshot)}
        have = by_kind.get(kind, {})
        live_names = {k for k, o in have.items() if not o["metadata"].get("deletionTimestamp")}
        for key in sorted(set(want) - set(have)):
            out.append(f"{kind} {'/'.join(p for p in key if p)}: missing")
        for key in sorted(live_names - set(want)):
            out.append(f"{kind} {'/'.join(p for p in key if p)}: present but not derived")
        for key in sorted(set(want) & set(have)):
            name = "/".join(p for p in key if p)
            w, h = want[key], have[key]
            out += [f"{kind} {name}: {m}" for m in _subset((w["metadata"].get("labels") or {}),
                                                            (h["metadata"].get("labels") or {}), "metadata.labels")]
            if "spec" in w:
                out += [f"{kind} {name}: {m}" for m in _subset(w["spec"], h.get("spec"), "spec")]
            if kind in OUR_STATUS and "status" in w:
                out += [f"{kind} {name}: {m}" for m in _subset(w["status"], h.get("status"), "status")]
    table = resolve_kind("instancetypes")
    want_table = render(table, state.view(policy, "InstanceType", snapshot))
    have_table = render(table, sorted(by_kind.get("InstanceType", {}).values(), key=lambda o: o["metadata"]["name"]))
    if not tables_match(have_table, want_table):
        out.append(f"kubectl get instancetypes:\n--- derived\n{want_table}\n--- cluster\n{have_table}")
    return out


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def _key(o: dict) -> str:
    ns = o["metadata"].get("namespace")
    return f"{o['kind']} {ns + '/' if ns else ''}{o['metadata']['name']}"


def admin_fingerprints(policy: Policy, objects: list[dict]) -> dict[str, str]:
    """``"<Kind> <ns>/<name>" -> digest`` of what an administrator authored in each object (module docstring);
    kubectl's last-applied annotation is left out (it repeats the spec)."""
    derived_label = policy.key("derivedFromNode")
    out: dict[str, str] = {}
    for o in _load_objects(objects):
        kind, meta = o["kind"], o["metadata"]
        labels = meta.get("labels") or {}
        annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                       if k != "kubectl.kubernetes.io/last-applied-configuration"}
        if kind == "Instance":
            body = {"labels": labels, "annotations": annotations, "spec": o.get("spec")}
        elif kind == "InstanceType" and derived_label not in labels:
            body = {"labels": labels, "spec": o.get("spec")}
        elif kind in ("Setting", "InstancePersistentVolume"):
            body = {"labels": labels, "spec": o.get("spec")}
        elif kind == "ConfigMap" and meta.get("namespace") not in SYSTEM_NAMESPACES \
                and meta["name"] != "kube-root-ca.crt":
            body = {"labels": labels, "data": o.get("data")}
        else:
            continue
        out[_key(o)] = _digest(body)
    return out


def changed(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Keys of :func:`admin_fingerprints` changed, gone or new between two readings."""
    return sorted([f"{k}: changed" for k in before if k in after and before[k] != after[k]]
                  + [f"{k}: gone" for k in before if k not in after]
                  + [f"{k}: new" for k in after if k not in before])


def instance_pods(objects: list[dict]) -> dict:
    """``{"pods": {"<ns>/<instance>": [pod uid, ...]}, "duplicates": [...], "orphans": [...]}`` over the
    Instances and Pods of ``objects`` (load objects aside)."""
    instances = {o["metadata"]["uid"]: o for o in _load_objects(objects) if o["kind"] == "Instance"}
    pods: dict[str, list[str]] = {f"{o['metadata']['namespace']}/{o['metadata']['name']}": []
                                  for o in instances.values()}
    orphans = []
    for p in _load_objects(objects):
        if p["kind"] != "Pod":
            continue
        owners = [r for r in p["metadata"].get("ownerReferences") or [] if r.get("kind") == "Instance"]
        for ref in owners:
            owner = instances.get(ref.get("uid"))
            if owner is None:
                orphans.append(f"{p['metadata']['namespace']}/{p['metadata']['name']}")
            else:
                pods[f"{owner['metadata']['namespace']}/{owner['metadata']['name']}"].append(p["metadata"]["uid"])
    return {"pods": pods, "duplicates": sorted(k for k, v in pods.items() if len(v) > 1), "orphans": sorted(orphans)}


def _normalized(o: dict) -> dict:
    out = copy.deepcopy(o)
    if o["kind"] not in OUR_STATUS:
        out.pop("status", None)   # Kueue's: usage and pending counts follow the load's Workloads
    meta = out.get("metadata") or {}
    for k in VOLATILE_META:
        meta.pop(k, None)

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in TIME_KEYS}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value
    return strip(out)


def pool_identity(objects: list[dict]) -> dict[str, tuple[str, str]]:
    """``"<Kind> <name>" -> (uid, digest of the normalized object)`` of every pool object (the load
    namespace's LocalQueues aside: they come and go with it). Normalized: without resourceVersion,
    managedFields, generation, creationTimestamp, condition timestamps, and Kueue's ``status``."""
    return {_key(o): (o["metadata"].get("uid", ""), _digest(_normalized(o)))
            for o in objects if o["kind"] in POOL_KINDS
            and (o["metadata"].get("namespace") or "") != LOAD_NAMESPACE}


def identity_changes(before: dict[str, tuple[str, str]], after: dict[str, tuple[str, str]]) -> list[str]:
    """Pool objects re-created (uid), changed (body), gone or new between two :func:`pool_identity` readings."""
    out = []
    for k in sorted(set(before) | set(after)):
        if k not in after:
            out.append(f"{k}: gone")
        elif k not in before:
            out.append(f"{k}: new")
        elif before[k][0] != after[k][0]:
            out.append(f"{k}: re-created (uid {before[k][0][:8]} -> {after[k][0][:8]})")
        elif before[k][1] != after[k][1]:
            out.append(f"{k}: changed")
    return out


def restart_counts(objects: list[dict], namespace: str = SYSTEM) -> dict[str, int]:
    """``"<pod>" -> total container restarts`` of the Pods in ``namespace``."""
    return {p["metadata"]["name"]: sum(int(c.get("restartCount") or 0)
                                       for c in (p.get("status") or {}).get("containerStatuses") or [])
            for p in objects if p["kind"] == "Pod" and p["metadata"].get("namespace") == namespace}
