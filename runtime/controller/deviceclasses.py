"""The controller's DeviceClasses for the DRA drivers of the rules (docs/concepts/dra.md "The ledger from
claims").

:class:`DeviceClassFeature` finds out once, at start, whether the cluster can take them: it serves
``resource.k8s.io/v1`` ``deviceclasses`` (discovery) and keeps ``spec.extendedResourceName`` (a
server-side dry-run create of the first derived class: a server without Kubernetes' DRA
extended-resource feature drops the field). When it cannot, the controller says so at start, a
Warning Event (rules/dra.yaml ``events.featureMissing``, on the system Namespace) and a log line,
and derives nothing for DRA.

:func:`plan_device_classes` is the pure part, planned each pass like the ResourceFlavors: a missing
class or one whose labels or spec differ is applied (server-side apply), an owned class no DraDriver
derives any more is deleted; a class being deleted is left alone.
"""
from __future__ import annotations

from loguru import logger

from runtime.controller.clock import Clock, utc_now
from runtime.engine.devices.draslices import dra_drivers, dra_policy
from runtime.engine.plan import Action, Verb
from runtime.engine.policy import Policy
from runtime.engine.pools.deviceclasses import device_classes, owned_device_class
from runtime.engine.snapshot import Snapshot, is_deleting, labels_of, name_of
from runtime.kube.events import CONTROLLER_COMPONENT, warning_event
from runtime.kube.session import KubeApiError, Session

KIND = "DeviceClass"


def plan_device_classes(policy: Policy, snapshot: Snapshot) -> list[Action]:
    """Actions making the cluster's DeviceClasses the derived ones (module docstring)."""
    out = []
    wanted = set()
    for dc in device_classes(policy):
        name = name_of(dc)
        wanted.add(name)
        live = snapshot.get(KIND, name)
        if live is not None and is_deleting(live):
            continue
        if live is None:
            out.append(Action(Verb.APPLY, KIND, name, body=dc, reason="missing"))
            continue
        live_spec = live.get("spec") or {}
        same = all(labels_of(live).get(k) == v for k, v in dc["metadata"]["labels"].items()) and \
            all(live_spec.get(k) == v for k, v in dc["spec"].items())
        if not same:
            out.append(Action(Verb.APPLY, KIND, name, body=dc, reason="labels or spec differ"))
    for live in snapshot.list(KIND):
        if name_of(live) not in wanted and owned_device_class(policy, live) and not is_deleting(live):
            out.append(Action(Verb.DELETE, KIND, name_of(live), body=live, reason="no DraDriver derives it"))
    return out


class DeviceClassFeature:
    """Whether the cluster serves DeviceClasses (:attr:`served`, known at construction: the controller
    watches them then) and keeps ``extendedResourceName`` (:meth:`check`, at start)."""

    def __init__(self, session: Session, clock: Clock = utc_now):
        self.session = session
        self.clock = clock   # the time its Event is stamped with (the controller's clock)
        self.served = True
        self.why = ""
        try:
            session.ref(KIND)
        except KubeApiError as exc:
            self.served, self.why = False, str(exc)
        self.available = False

    def check(self, policy: Policy, system_namespace: str, create_event=None) -> bool:
        """Decide :attr:`available` for ``policy``'s drivers; when they cannot be served, log it and
        record the Warning Event through ``create_event(event)`` (module docstring). Returns
        :attr:`available`."""
        wanted = device_classes(policy)
        if not wanted:
            self.available = self.served
            return self.available
        if self.served:
            self.available, self.why = self._keeps_extended_resource(wanted[0])
        if not self.available:
            self._report(policy, system_namespace, create_event)
        return self.available

    def _keeps_extended_resource(self, dc: dict) -> tuple[bool, str]:
        ref = self.session.ref(KIND)
        try:
            answer = self.session.call("post", ref.path(), body=dc, query={"dryRun": "All"})
        except KubeApiError as exc:
            if exc.status == 409:   # it exists already: the server took the field once
                live = self.session.call("get", ref.path(name=name_of(dc)))
                answer = live
            else:
                return False, f"dry-run create of DeviceClass {name_of(dc)} refused: {exc}"
        kept = (answer.get("spec") or {}).get("extendedResourceName") == dc["spec"]["extendedResourceName"]
        return kept, "" if kept else "spec.extendedResourceName is dropped by the server"

    def _report(self, policy: Policy, system_namespace: str, create_event) -> None:
        rules = dra_policy(policy)
        drivers = sorted(dra_drivers(policy))
        bases = sorted({policy.manufacturers[r.manufacturer].base for r in dra_drivers(policy).values()})
        message = rules.messages.featureMissing.format(apiVersion=rules.deviceClass.apiVersion,
                                                       plural=rules.deviceClass.plural,
                                                       drivers=", ".join(drivers), bases=", ".join(bases))
        if self.why:
            message += f" ({self.why})"
        logger.warning("{}", message)
        involved = {"apiVersion": "v1", "kind": "Namespace", "name": system_namespace,
                    "namespace": system_namespace}
        if create_event is not None:
            create_event(warning_event(involved, rules.events.featureMissing, message, CONTROLLER_COMPONENT,
                                       self.clock()))
