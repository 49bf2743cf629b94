"""`accelpolicy explain`: why a pool holds what it holds, and how a review was decided (docs/audit.md).

:func:`explain_instance_type` reads the same derivation as the controller: the pool's flavors (the
type's schedule labels as a flavor selector, docs/concepts/pools-and-flavors.md "Pools: InstanceType +
ClusterQueue of one name"), the nodes behind them, every node left out with the label or rule (file:line) that
excluded it, and the four views with the per accelerator inputs they were computed from (mode, ledger
remaining, shares).

:func:`explain_admission` judges one object with an engine that records every CEL evaluation: the
expression's rule file, line and field path, the names it read (``variables.x`` narrowed to those
used) and its result. Pure: no I/O.
"""
from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from runtime.engine.admission import AdmissionEngine, AdmissionView
from runtime.engine.admission.engine import AdmissionRequest
from runtime.engine.admission.memokeys import _refs
from runtime.engine.admission.verdict import status_of
from runtime.engine.policy import Policy
from runtime.engine.pools import accelerators, derive, flavor_selector, matches, node_views
from runtime.engine.snapshot import Snapshot, labels_of, name_of
from runtime.model.rulefiles import Expr
from runtime.report import reach
from runtime.report.outofservice import out_of_service
from runtime.report.unitpreset import fallback_units
from runtime.report.drasource import accelerator_sources, render_sources
from runtime.rules.yamlsrc import dotted


class ExplainError(KeyError):
    """The object to explain is not in the snapshot."""


def rule_origin(policy: Policy, kind: str, path: tuple) -> str:
    """``file:line spec.path`` of a field of the one ``kind`` rule document."""
    doc = policy.ruleset.all(kind)[0]
    line = doc.source.line_of(("spec",) + path) if doc.source else doc.line
    return f"{doc.file}:{line} {dotted(('spec',) + path)}"


def _excluded(policy: Policy, node, selector: dict, flavors: list[dict]) -> str:
    managed_key = policy.key("managed")
    if not node.managed:
        return (f"not managed: {rule_origin(policy, 'PoolDerivation', ('managed',))} is false for its labels "
                f"({managed_key}={node.labels.get(managed_key, '<absent>')!r})")
    if not node.gkey:
        return f"no {policy.prefix('general')}<gKey>=true label (no CPU group: it contributes no flavor)"
    if not node.os or not node.arch:
        return f"no {policy.key('os')}/{policy.key('arch')} label (it contributes no flavor)"
    uncounted = _uncounted_group(policy, node, selector)
    if uncounted:
        return uncounted
    own = [f for f in flavors if all(
        node.labels.get(k) == v for k, v in ((f.get("spec") or {}).get("nodeLabels") or {}).items())]
    for flavor in own:
        for key, want in selector.items():
            got = labels_of(flavor).get(key)
            if got != want:
                return (f"its flavor {name_of(flavor)} has {key}={got if got is not None else '<absent>'!s}, "
                        f"the pool selects {key}={want}")
    return "it contributes no flavor to this pool"


def _uncounted_group(policy: Policy, node, selector: dict) -> str:
    """Why a node that carries the pool's accelerator group key contributes no device flavor for it:
    its ``<aKey>.count`` label is absent, or a fact of that group was refused (decision 19); "" else."""
    acc = policy.prefix("acceleratable")
    for key, want in selector.items():
        if not key.startswith(acc) or want != "true" or node.labels.get(key) != "true":
            continue
        akey = key[len(acc):]
        if node.akeys.get(akey):
            continue
        count_key = f"{key}{policy.suffix('count')}"
        problem = next((p for p in node.problems if p.key == count_key), None) or \
            next((p for p in node.problems if p.key.startswith(f"{key}.")), None)
        if problem is not None:
            return problem.message  # decision 19's warning: it names node, label, value and what it costs
        if node.labels.get(count_key) is None:
            return (f"it carries {key}=true but no {count_key} label: a node contributes a device flavor for "
                    f"{akey} only with that count (the agent writes it beside the group key)")
    return ""


def explain_instance_type(policy: Policy, snapshot: Snapshot, name: str, *, live: bool = False,
                          settings_namespace: str | None = None) -> dict:
    """The pool of InstanceType ``name``: ``{name, selector, flavors, nodes, excluded, views, accelerators}``.

    ``flavors``: ``{name, nodes}``; ``excluded``: node -> reason; ``views``: the type's status views;
    ``reach``: node -> whether its Node carries the labels its flavors select and, where fewer, how many
    of its accelerators its Devices can use (:func:`runtime.report.reach.node_lines`);
    ``accelerators``: per node of the pool, per accelerator ``{id, mode, remaining, allocatedSlices}``
    (the ledger the four views add up, docs/concepts/pools-and-flavors.md "InstanceType status");
    ``unitFallback``: why the derived type's unit is the preset table's fallback and where to give it one (""
    when a preset matched, :func:`runtime.report.unitpreset.fallback_units`). ``live``,
    ``settings_namespace``: as :func:`derive`'s (a live cluster: queue phases as Kueue reports them now; where
    its settings Secret lives). Raises :class:`ExplainError`.
    """
    desired = derive(policy, snapshot, live=live, settings_namespace=settings_namespace)
    types = {name_of(t): t for t in desired.instance_types}
    if name not in types:
        raise ExplainError(f"no InstanceType {name!r} in the snapshot or the derivation "
                           f"(known: {', '.join(sorted(types)) or 'none'})")
    it = types[name]
    # the ClusterQueue = the type's name
    queue = next((q for q in desired.cluster_queues if name_of(q) == name), None)
    selector = flavor_selector(policy, labels_of(queue)) if queue is not None else None
    selector = selector or {}
    flavors = [f for f in desired.resource_flavors if matches(selector, labels_of(f))]
    nodes = node_views(policy, snapshot)
    members: dict[str, list[str]] = {}
    for flavor in flavors:
        node_labels = (flavor.get("spec") or {}).get("nodeLabels") or {}
        members[name_of(flavor)] = [
            n.name for n in nodes if all(n.labels.get(k) == v for k, v in node_labels.items())]
    in_pool = sorted({n for names in members.values() for n in names})
    excluded = {
        n.name: _excluded(policy, n, selector, desired.resource_flavors) for n in nodes
        if n.name not in in_pool}
    accel: dict[str, list[dict]] = {}
    if (it.get("spec") or {}).get("acceleratable"):
        for node in in_pool:
            devices = snapshot.get("Devices", node)
            if devices is not None:
                accel[node] = [{"id": a.id, "group": a.group_id, "mode": a.mode, "remaining": a.remaining,
                                "allocatedSlices": a.allocated_slices} for a in accelerators(policy, devices)]
    status = it.get("status") or {}
    views = {k: status[k] for k in ("accelerator", "acceleratorShared", "acceleratorSliced",
                                    "acceleratorPartitioned", "cpu") if k in status}
    return {"name": name, "selector": selector, "unitFallback": fallback_units(policy, desired).get(name, ""),
            "flavors": [{"name": f, "nodes": members[f]} for f in sorted(members)],
            "nodes": in_pool, "excluded": excluded, "views": views, "accelerators": accel,
            # docs/concepts/dra.md "Accelerators from DRA drivers"
            "sources": accelerator_sources(policy, snapshot, in_pool + sorted(excluded)),
            "reach": reach.node_lines(policy, snapshot, desired, reach.flavor_names(desired, name)),
            # docs/concepts/out-of-service.md: the pool's accelerators out of service, its closed nodes
            "outOfService": [row.message for row in out_of_service(policy, snapshot, desired, in_pool)],
            "credits": {"perAccelerator": policy.constants.creditsPerAccelerator,
                        "perShare": policy.constants.share}}


def render_instance_type(info: dict) -> str:
    """The text form of :func:`explain_instance_type`."""
    lines = [f"InstanceType {info['name']}",
             "pool selector: " + ", ".join(f"{k}={v}" for k, v in sorted(info["selector"].items()))]
    if info.get("unitFallback"):
        lines.append(f"unit: {info['unitFallback']}")
    lines.append("flavors:")
    lines += [
        f"  {f['name']}: nodes {', '.join(f['nodes']) or '(none)'}" for f in info["flavors"]] or ["  (none)"]
    lines.append("left out:")
    lines += [f"  {node}: {why}" for node, why in sorted(info["excluded"].items())] or ["  (none)"]
    if info.get("reach"):  # whether the Node carries what its flavors select, what its Devices can use
        lines.append("nodes (as the scheduler sees them):")
        lines += [f"  {node}: {line}" for node, line in info["reach"].items()]
    lines.append(f"views (capacity/remaining/onceMaxRequest; {info['credits']['perAccelerator']} credits per "
                 f"accelerator, {info['credits']['perShare']} per share):")
    for view, numbers in info["views"].items():
        lines.append(
            f"  {view}: {numbers.get('capacity')}/{numbers.get('remaining')}/{numbers.get('onceMaxRequest')}")
    for node, rows in sorted(info["accelerators"].items()):
        for row in rows:
            lines.append(f"  {node} {row['group']}/{row['id']}: mode {row['mode']}, ledger remaining "
                         f"{row['remaining']}, allocated slices {row['allocatedSlices']}")
    if info.get("outOfService"):
        lines.append("out of service:")
        lines += [f"  {line}" for line in info["outOfService"]]
    lines += render_sources(info.get("sources") or {})
    # Kueue's Workloads of the pool (none: no lines, as from a snapshot without any)
    if info.get("workloads"):
        lines += render_workloads(info["workloads"])
    return "\n".join(lines)


def _condition(workload: dict, kind: str) -> dict:
    return next((c for c in (workload.get("status") or {}).get("conditions") or [] if c.get("type") == kind),
                {})


def pool_workloads(policy: Policy, snapshot: Snapshot, name: str) -> list[dict]:
    """Kueue's Workloads of the pool (ClusterQueue) ``name``, in namespace/name order:
    ``{namespace, name, state, reason, message, check}``. ``state`` is ``admitted`` (its ``Admitted``
    condition is True), ``reserved`` (quota reserved, its admission checks pending) or ``pending``;
    a Workload is the pool's when its quota is reserved in the ClusterQueue, or it waits in a
    LocalQueue of that ClusterQueue. ``reason``/``message``: Kueue's, from the ``QuotaReserved``
    condition of a pending Workload (e.g. ``Pending``: "couldn't assign flavors ..."), else from
    ``Admitted``. ``check``: the state and message of the check of rules/pools/queues.yaml
    ``admissionCheck.name`` in ``status.admissionChecks`` (None when Kueue has not asked it yet)."""
    check_name = policy.queues.admissionCheck.name
    queues = {(meta.get("namespace") or "", meta.get("name")): (lq.get("spec") or {}).get("clusterQueue")
              for lq in snapshot.list("LocalQueue") for meta in [lq.get("metadata") or {}]}
    out = []
    for wl in snapshot.list("Workload"):
        meta, status = wl.get("metadata") or {}, wl.get("status") or {}
        reserved_in = (status.get("admission") or {}).get("clusterQueue")
        queued_in = queues.get((meta.get("namespace") or "", (wl.get("spec") or {}).get("queueName")))
        if (reserved_in or queued_in) != name:
            continue
        admitted, reserved = _condition(wl, "Admitted"), _condition(wl, "QuotaReserved")
        state = "admitted" if admitted.get("status") == "True" else \
            "reserved" if reserved.get("status") == "True" else "pending"
        why = reserved if state == "pending" else admitted
        check = next((c for c in status.get("admissionChecks") or [] if c.get("name") == check_name), None)
        out.append({"namespace": meta.get("namespace") or "", "name": meta.get("name"), "state": state,
                    "reason": why.get("reason"), "message": why.get("message"),
                    "check": None if check is None else {"state": check.get("state"),
                                                         "message": check.get("message")}})
    return out


def render_workloads(workloads: list[dict]) -> list[str]:
    """The lines of :func:`pool_workloads`: one per Workload, its state, Kueue's reason and the check's
    verdict."""
    lines = ["workloads (Kueue, live):"]
    for wl in workloads:
        check = wl["check"]
        verdict = f"check {check['state']}" + (f": {check['message']}" if check.get("message") else "") \
            if check else "check not asked yet"
        why = f" ({wl['reason']}: {wl['message']})" if wl["state"] != "admitted" and wl.get("reason") else ""
        lines.append(f"  {wl['namespace']}/{wl['name']}: {wl['state']}{why}; {verdict}")
    return lines


class _TracingEngine(AdmissionEngine):
    """An AdmissionEngine that records every CEL evaluation (the same evaluation, memo bypassed)."""

    def __init__(self, policy: Policy):
        super().__init__(policy)
        self.trace: list[dict] = []
        self.origins: dict[int, str] = {}
        for doc in policy.ruleset.all("AdmissionPolicy"):
            self._index(doc, doc.spec, ("spec",))

    def _index(self, doc, value: Any, path: tuple) -> None:
        if isinstance(value, Expr):
            line = doc.source.line_of(path) if doc.source else doc.line
            self.origins[id(value)] = f"{doc.file}:{line} {dotted(path)}"
        elif isinstance(value, BaseModel):
            for name in type(value).model_fields:
                self._index(doc, getattr(value, name), path + (name,))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                self._index(doc, item, path + (i,))

    def _eval(self, expr: Expr, scope) -> Any:
        result = super()._eval(expr, scope)
        names, var_names = _refs(expr)
        inputs = {}
        for n in names:
            if n == "variables":
                inputs.update({f"variables.{v}": scope.variables.get(v) for v in var_names})
            elif n not in ("object", "oldObject", "params", "lookups", "settings"):
                inputs[n] = scope.item if n == "item" else scope.base.get(n)
        self.trace.append({"where": self.origins.get(id(expr), "<expression>"), "expression": str(expr),
                           "inputs": inputs, "result": result})
        return result


def explain_admission(policy: Policy, request: AdmissionRequest, view: AdmissionView, now=None) -> dict:
    """Every policy that matches ``request`` at ``now`` (PolicyExceptions' instant): its verdict and each CEL
    evaluation in order.

    Returns ``{policies: [{policy, verdict, message, evaluations: [{where, expression, inputs, result}],
    lifted: [{rule, exception, expiresAt, reason}]}]}``;
    ``inputs`` lists the ``variables.*`` and ``item``/``request`` values the expression read (the object,
    params, lookups and settings are named by the expression itself).
    """
    engine = _TracingEngine(policy)
    out = []
    for name in engine.matching(request):
        engine.trace = []
        outcome = engine.run(name, request, view, now=now)
        status = status_of(outcome)
        out.append({"policy": name, "verdict": outcome.verdict(),
                    "message": (status or {}).get("message", outcome.would_deny),
                    "patch": outcome.patch, "evaluations": engine.trace,
                    "lifted": [{"rule": rule, "exception": grant.ref, "expiresAt": grant.expires_at,
                                "reason": grant.reason} for rule, grant in dict.fromkeys(outcome.lifted)]})
    return {"policies": out}


def render_admission(info: dict) -> str:
    """The text form of :func:`explain_admission` (values shortened to 120 characters)."""
    def short(value: Any) -> str:
        text = json.dumps(value, sort_keys=True, default=str)
        return text if len(text) <= 120 else text[:117] + "..."

    lines = []
    for p in info["policies"]:
        lines.append(f"policy {p['policy']}: {p['verdict']}" + (f": {p['message']}" if p["message"] else ""))
        for e in p["evaluations"]:
            inputs = ", ".join(f"{k}={short(v)}" for k, v in e["inputs"].items())
            lines.append(f"  {e['where']}: {short(e['result'])}" + (f"  <- {inputs}" if inputs else ""))
        lines += [f"  lifted: {x['rule']} by PolicyException {x['exception']} until {x['expiresAt']}: "
                  f"{x['reason']}" for x in p.get("lifted") or ()]
    return "\n".join(lines) or "no policy matches the object"
