"""`accelpolicy audit`: judge what a cluster holds with the same engine as the webhooks (docs/audit.md).

:func:`audit` is pure on a snapshot and returns :class:`~runtime.report.results.Result` objects:

1. Admission: every existing object an AdmissionPolicy matches is judged by
   :meth:`AdmissionEngine.run` as the policy's ``audit`` operation says (CREATE; UPDATE of the object
   onto itself for rules about transitions; ``skip``). A denial is ``fail`` (``error`` when a rule
   failed to evaluate), a ``warn``/``dryrun`` policy's would-be denial is ``warn``, else ``pass``.
2. Drift (rules/audit.yaml ``drift``): the derived objects of :func:`runtime.engine.pools.derive`
   compared field by field with the cluster's (hand edits), missing and extra derived objects,
   derived InstanceTypes no pool derives any more (stale collapsed types after an awareness flip),
   and the derivation's own warnings about input it skipped (malformed labels).
3. CEL checks (rules/audit.yaml ``checks``), e.g. a held host-access grant whose setting is off.
4. Device ledgers: each node's Pod allocation annotations replayed against its Devices
   (:func:`runtime.engine.devices.rebuild_ledger`); a refused annotation is a finding.
5. Reach (rules/audit.yaml ``reach``; docs/audit.md "Pools that cannot schedule"): on each pool's
   InstanceType, a flavor whose ``spec.nodeLabels`` select fewer of its contributing Nodes than
   contribute (labels stripped while the NodeFeatures remain), a node whose labels count more
   accelerators than its Devices can use (:func:`runtime.report.reach.pool_findings`).
6. Unit presets (rules/audit.yaml ``presets``): a derived accelerated InstanceType whose product no
   preset matches, so its unit is the fallback tier's (:func:`runtime.report.unitpreset.fallback_units`).
7. Exceptions (rules/exceptions.yaml; docs/concepts/exceptions.md "In the audit"): a rule a PolicyException
   lifts at ``now`` is ``skip`` naming it; exceptions expired lately and those matching nothing are listed
   (:mod:`runtime.report.exceptions`).
8. Accelerators out of service (rules/audit.yaml ``outOfService``; docs/concepts/out-of-service.md): each
   unhealthy or maintenance accelerator with the Pods still on it, each closed node
   (:func:`runtime.report.outofservice.out_of_service_results`).
"""
from __future__ import annotations

import json
from typing import Any

from runtime.engine import admissioncheck as ac
from runtime.engine.admission import AdmissionEngine, AdmissionRequest, AdmissionView, Outcome, admission_view
from runtime.engine.devices import rebuild_ledger
from runtime.engine.policy import Policy
from runtime.engine.pools import DesiredState, derive
from runtime.engine.snapshot import Snapshot, labels_of, name_of
from runtime.model.audit import AuditPolicySpec
from runtime.report.exceptions import exception_results, lifted_results
from runtime.report.outofservice import out_of_service_results
from runtime.report.reach import pool_findings
from runtime.report.results import ObjectRef, Result, ordered
from runtime.report.unitpreset import fallback_units
from runtime.rules.cel.errors import CelEvalError

_DESIRED = {"ResourceFlavor": "resource_flavors", "ClusterQueue": "cluster_queues",
            "LocalQueue": "local_queues", "InstanceTypeFlavor": "instance_type_flavors",
            "AdmissionCheck": "admission_checks"}
AUDIT_USER = {"username": "accelpolicy-audit"}


def audit(policy: Policy, snapshot: Snapshot, engine: AdmissionEngine | None = None,
          now=None) -> list[Result]:
    """Every finding on ``snapshot`` in report order (see the module docstring), PolicyExceptions judged at
    ``now`` (an aware datetime from the caller's clock; None: no exception applies).

    Raises KeyError when the rules hold no AuditPolicy, CelEvalError when a check fails to evaluate
    (the rule file is named).
    """
    spec: AuditPolicySpec = policy.ruleset.get("AuditPolicy")
    engine = engine or AdmissionEngine(policy)
    view = admission_view(policy, snapshot)
    desired = derive(policy, snapshot)
    results = admission_results(engine, view, snapshot, spec, now)
    results += exception_results(engine, view, now, audited_requests(engine, snapshot))
    results += drift_results(policy, snapshot, desired, spec)
    results += check_results(spec, snapshot, view.settings)
    results += ledger_results(policy, snapshot, spec)
    results += reach_results(policy, snapshot, desired, spec)
    results += retry_loop_results(policy, snapshot, spec)
    results += preset_results(policy, desired, spec)
    results += out_of_service_results(policy, snapshot, desired)
    return ordered(results)


def _request(spec, obj: dict, operation: str) -> AdmissionRequest:
    group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
    meta = obj.get("metadata") or {}
    return AdmissionRequest(uid="audit",
                            kind={"group": group, "version": version, "kind": obj.get("kind", "")},
                            resource={"group": group, "version": version, "resource": spec.match.resource},
                            operation=operation, name=str(meta.get("name", "")),
                            namespace=str(meta.get("namespace") or ""), object=obj,
                            old_object=obj if operation == "UPDATE" else {}, user=AUDIT_USER)


def _outcome_results(name: str, outcome: Outcome, ref: ObjectRef, operation: str, audit_spec) -> list[Result]:
    props = {"operation": operation}
    last = outcome.rules[-1] if outcome.rules else ""
    if outcome.errors:
        return [Result(name, e.rule, "fail", ref, e.render(), e.field, props) for e in outcome.errors]
    if outcome.denial is not None:
        code, reason, message = outcome.denial
        kind = "error" if reason == "InternalError" else "fail"
        return [Result(name, last, kind, ref, message, "", props)]
    if outcome.would_deny:
        return [Result(name, last, "warn", ref, outcome.would_deny, "",
                       {**props, "enforcement": outcome.enforcement})]
    if outcome.lifted:   # the lifted rules are skip results (runtime.report.exceptions), never pass
        return []
    return [Result(name, "", "pass", ref, audit_spec.passMessage, "", props)]


def audited_requests(engine: AdmissionEngine, snapshot: Snapshot):
    """``(policy name, object, AdmissionRequest or None)`` of every existing object an AdmissionPolicy
    matches, as the audit judges it (each policy's ``audit:`` operation; None for ``skip``), in policy
    then snapshot order."""
    for name in sorted(engine.policies):
        spec = engine.policies[name]
        operation = spec.audit_operation
        for obj in snapshot.list(spec.match.kind):
            if operation == "skip":
                if engine.matches(spec, _request(spec, obj, spec.match.operations[0])):
                    yield name, obj, None
                continue
            request = _request(spec, obj, operation)
            if engine.matches(spec, request):
                yield name, obj, request


def admission_results(engine: AdmissionEngine, view: AdmissionView, snapshot: Snapshot,
                      audit_spec: AuditPolicySpec, now=None) -> list[Result]:
    """Results of judging every matched existing object with every AdmissionPolicy at ``now``."""
    out: list[Result] = []
    for name, obj, request in audited_requests(engine, snapshot):
        if request is None:
            out.append(Result(name, "", "skip", ObjectRef.of(obj), audit_spec.skipMessage))
            continue
        outcome, ref = engine.run(name, request, view, now=now), ObjectRef.of(obj)
        out.extend(_outcome_results(name, outcome, ref, request.operation, audit_spec))
        out.extend(lifted_results(engine, view, name, outcome, ref, request.operation))
    return out


def _dig(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def field_diff(want: Any, got: Any, path: str = "") -> str:
    """What a hand edit changed, by path: ``+key=value`` added, ``-key=value`` removed,
    ``path: old -> new`` changed (maps by key, equal-length lists by index), comma-separated."""
    def key(k: Any) -> str:
        return f"{path}[{k}]" if isinstance(k, int) else (f"{path}.{k}" if path else str(k))
    if isinstance(want, dict) and isinstance(got, dict):
        parts = [f"+{key(k)}={_json(got[k])}" for k in sorted(set(got) - set(want))]
        parts += [f"-{key(k)}={_json(want[k])}" for k in sorted(set(want) - set(got))]
        parts += [field_diff(want[k], got[k], key(k)) for k in sorted(set(want) & set(got))
                  if _json(want[k]) != _json(got[k])]
        return ", ".join(parts)
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        return ", ".join(
            field_diff(a, b, key(i)) for i, (a, b) in enumerate(zip(want, got)) if _json(a) != _json(b))
    return f"{path + ': ' if path else ''}{_json(want)} -> {_json(got)}"


def drift_results(policy: Policy, snapshot: Snapshot, desired: DesiredState,
                  spec: AuditPolicySpec) -> list[Result]:
    """Hand-edited, missing and extra derived objects, stale derived InstanceTypes, skipped input."""
    drift = spec.drift
    out: list[Result] = []
    type_key = policy.key("resourceType")
    for kind, fields in drift.compare.items():
        wanted = getattr(desired, _DESIRED[kind]) if kind in _DESIRED else []
        names = set()
        type_values = {labels_of(d).get(type_key) for d in wanted} - {None}
        for want in wanted:
            ref = ObjectRef.of(want)
            names.add((ref.namespace, ref.name))
            got = snapshot.get(kind, ref.name, ref.namespace)
            if got is None:
                out.append(Result(drift.policy, "missing", drift.missing.result, ref,
                                  drift.missing.message.format(kind=kind, name=ref.name)))
                continue
            for dotted in fields:
                a, b = _dig(want, dotted), _dig(got, dotted)
                if _json(a) != _json(b):
                    out.append(Result(drift.policy, "edited", drift.edited.result, ObjectRef.of(got),
                                      drift.edited.message.format(kind=kind, name=ref.name, field=dotted,
                                                                  want=_json(a), got=_json(b),
                                                                  diff=field_diff(a, b)), dotted))
        for obj in snapshot.list(kind):
            ref = ObjectRef.of(obj)
            if (ref.namespace, ref.name) not in names and labels_of(obj).get(type_key) in type_values:
                out.append(Result(drift.policy, "extra", drift.extra.result, ref,
                                  drift.extra.message.format(kind=kind, name=ref.name)))
    out += _stale_types(policy, snapshot, drift)
    for warning in desired.warnings:
        out.append(Result(drift.policy, "input", drift.input.result, ObjectRef("Snapshot", "input"),
                          drift.input.message.format(message=warning)))
    return out


def _stale_types(policy: Policy, snapshot: Snapshot, drift) -> list[Result]:
    """Derived InstanceTypes (``derivedFromNode`` label) that a derivation from scratch no longer creates."""
    derived_key = policy.key("derivedFromNode")
    held = [it for it in snapshot.list("InstanceType") if labels_of(it).get(derived_key) == "true"]
    if not held:
        return []
    fresh = derive(policy, Snapshot.from_objects([o for o in snapshot if o.get("kind") != "InstanceType"]))
    pools = set(fresh.created_instance_types)
    if not pools:  # derivation of types is off: nothing is stale, nothing is derived
        return []
    return [Result(drift.policy, "stale-type", drift.staleType.result, ObjectRef.of(it),
                   drift.staleType.message.format(name=it["metadata"]["name"]))
            for it in held if it["metadata"]["name"] not in pools]


def check_results(spec: AuditPolicySpec, snapshot: Snapshot, settings: dict) -> list[Result]:
    """The CEL checks of rules/audit.yaml on every object of their kind; a true expression passes."""
    out: list[Result] = []
    for check in spec.checks:
        for obj in snapshot.list(check.kind):
            activation = {"object": obj, "settings": settings}
            if check.when is not None and check.when.evaluate(activation) is not True:
                continue
            ref = ObjectRef.of(obj)
            if check.expression.evaluate(activation) is True:
                out.append(Result(check.policy, check.name, "pass", ref, spec.passMessage, check.field))
            else:
                out.append(Result(check.policy, check.name, check.result, ref, check.message, check.field))
    return out


def ledger_results(policy: Policy, snapshot: Snapshot, spec: AuditPolicySpec) -> list[Result]:
    """Allocation annotations each node's Devices refuses (the node agent's own ledger rebuild)."""
    pods_by_node: dict[str, list[dict]] = {}
    for pod in snapshot.list("Pod"):
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            pods_by_node.setdefault(node, []).append(pod)
    out: list[Result] = []
    for node, pods in sorted(pods_by_node.items()):
        devices = snapshot.get("Devices", node)
        if devices is None:
            continue
        try:
            _, events = rebuild_ledger(policy, node, devices.get("spec") or {}, pods)
        except (KeyError, TypeError, ValueError, CelEvalError) as exc:
            out.append(Result(spec.ledger.policy, "rebuild", "error", ObjectRef.of(devices), str(exc)))
            continue
        for event in events:
            ref = ObjectRef(event.kind, event.name, event.namespace,
                            api_version="v1" if event.kind == "Pod" else "worker.gpustack.ai/v1")
            out.append(Result(spec.ledger.policy, event.reason, spec.ledger.result, ref, event.message))
    return out


def reach_results(policy: Policy, snapshot: Snapshot, desired: DesiredState,
                  spec: AuditPolicySpec) -> list[Result]:
    """The pools that cannot keep a promise (:func:`runtime.report.reach.pool_findings`), each on the
    pool's InstanceType; ``properties`` name the ResourceFlavor (and the node of a Devices finding)."""
    types = {name_of(it): it for it in desired.instance_types}
    out = []
    for finding in pool_findings(policy, snapshot, desired):
        it = types.get(finding.pool)
        ref = ObjectRef.of(it) if it is not None else ObjectRef("InstanceType", finding.pool,
                                                                 api_version="worker.gpustack.ai/v1")
        props = {"resourceFlavor": finding.flavor, **({"node": finding.node} if finding.node else {})}
        out.append(Result(spec.reach.policy, finding.rule, finding.result, ref, finding.message, "", props))
    return out


def retry_loop_results(policy: Policy, snapshot: Snapshot, spec: AuditPolicySpec) -> list[Result]:
    """Workloads whose check entry is ``Retry`` while another flavor of their pool holds a node that can
    take them (:func:`runtime.engine.admissioncheck.flavor_that_holds`): rules/audit.yaml ``retryLoop``."""
    check = policy.queues.admissionCheck.name
    out: list[Result] = []
    nodes = None
    for workload in snapshot.list("Workload"):
        status = workload.get("status") or {}
        entry = next((c for c in status.get("admissionChecks") or [] if c.get("name") == check), None)
        if entry is None or entry.get("state") != ac.RETRY or not status.get("admission"):
            continue
        nodes = nodes if nodes is not None else ac.managed_nodes(policy, snapshot)
        try:
            verdict = ac.check_workload(policy, snapshot, workload, nodes)
        except ac.AdmissionCheckError:
            continue
        held = ac.flavor_that_holds(policy, snapshot, workload, verdict, nodes)
        if held is None:
            continue
        loop = spec.retryLoop
        message = loop.message.format(flavor=verdict.flavor, other=held[0], node=held[1],
                                      pool=status["admission"].get("clusterQueue", ""))
        out.append(Result(loop.policy, loop.rule, loop.result, ObjectRef.of(workload), message, "",
                          {"resourceFlavor": verdict.flavor, "node": held[1]}))
    return out


def preset_results(policy: Policy, desired: DesiredState, spec: AuditPolicySpec) -> list[Result]:
    """A ``presets.fallback`` finding on each derived InstanceType whose unit is the preset table's
    fallback because no preset matches its product (field ``spec.unitResources``)."""
    types = {name_of(it): it for it in desired.instance_types}
    words = spec.presets
    return [Result(words.policy, words.rule, words.fallback.result, ObjectRef.of(types[pool]), message,
                   "spec.unitResources")
            for pool, message in sorted(fallback_units(policy, desired).items())]
