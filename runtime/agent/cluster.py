"""The agent's side of the cluster: the controller's kube layer narrowed to one node.

The agent connects, watches and writes with the same parts as the controller
(docs/agent.md "Labels, annotations and NodeFeatures" and "The Devices object and its ledger"):

* one :class:`runtime.kube.session.Session` (:func:`runtime.kube.session.connect`, the one kubeconfig
  loader);
* one :class:`runtime.kube.clustercache.ClusterCache` of what the agent depends on (:func:`node_watches`): its
  Node, the Pods bound to it, its NodeFeatures, its Devices, the AcceleratorMaintenance objects naming it and
  the settings Secret. Every watch event
  wakes the agent's loop; every read of a pass comes from the cache;
* one :class:`runtime.kube.applier.Applier` (field manager :data:`FIELD_MANAGER`) whose answers are
  written through to the cache, so the next pass sees them before their watch events arrive.

Objects go in and come out as JSON-shaped dicts. Conflicts and transient failures are retried by the
applier; any other :class:`runtime.kube.session.KubeApiError` propagates to the agent's pass.
"""
from __future__ import annotations

import datetime
import time
from typing import Any, Callable, Mapping

from loguru import logger

from runtime.engine.devices import agent_rules
from runtime.engine.ownership import owned_by
from runtime.engine.policy import Policy
from runtime.kube.applier import Applier
from runtime.kube.cache import WatchedKind
from runtime.kube.clustercache import ClusterCache
from runtime.kube.events import event as make_event
from runtime.kube.session import KubeApiError, Session, connect

FIELD_MANAGER = "accelpolicy-agent"


class NodeMissingError(LookupError):
    """The agent's Node is not in the cluster (or not yet in its watch cache)."""


class SettingsUnreadable(RuntimeError):
    """The settings Secret's watch has not listed (forbidden, or no answer yet)."""


class MaintenanceUnreadable(RuntimeError):
    """The AcceleratorMaintenance watch has not listed (no CRD, forbidden, or no answer yet)."""


def node_watches(policy: Policy, node: str, namespace: str, settings_namespace: str,
                 dra: bool = False) -> list[WatchedKind]:
    """What the agent reacts to: its Node and Devices (by name), the Pods bound to it (``spec.nodeName``), its
    NodeFeatures in ``namespace`` (label ``nodeFeatureNode``), the AcceleratorMaintenance objects naming it
    (their selectable ``nodeField``, read only: docs/concepts/out-of-service.md "Maintenance") and the
    settings Secret in ``settings_namespace``; with ``dra`` (the ``dra`` backend, docs/concepts/dra.md
    "Accelerators from DRA drivers") also the ResourceSlices naming the node (``spec.nodeName``) and every
    ResourceClaim (a claim has no node to select on; its allocation names the node's devices)."""
    rules = agent_rules(policy)
    extra = [WatchedKind("ResourceSlice", field_selector=f"spec.nodeName={node}"),
             WatchedKind("ResourceClaim")] if dra else []
    return extra + [
        WatchedKind("Node", field_selector=f"metadata.name={node}"),
        WatchedKind("Pod", field_selector=f"spec.nodeName={node}"),
        WatchedKind(rules.nodeFeature.kind, namespace=namespace,
                    label_selector=f"{policy.key('nodeFeatureNode')}={node}"),
        WatchedKind(rules.devices.kind, field_selector=f"metadata.name={node}"),
        WatchedKind(rules.maintenance.kind, field_selector=f"{rules.maintenance.nodeField}={node}"),
        WatchedKind("Secret", namespace=settings_namespace,
                    field_selector=f"metadata.name={policy.settings.secretName}"),
    ]


class NodeCluster:
    """One node's view of the cluster and its writes (see the module docstring).

    ``on_event(kind, event_type, obj)`` is called on every watch event (the agent sets its wake-up
    Event there). Call :meth:`start` before the first read; :meth:`stop` at the end.
    """

    def __init__(self, session: Session, policy: Policy, node: str, namespace: str, settings_namespace: str,
                 on_event: Callable[[str, str, dict], None] | None = None, watch_timeout: int = 300,
                 dra: bool = False):
        self.session, self.policy, self.node_name = session, policy, node
        self.namespace, self.settings_namespace = namespace, settings_namespace
        self.rules = agent_rules(policy)
        self.cache = ClusterCache(session, node_watches(policy, node, namespace, settings_namespace, dra),
                                  on_event=on_event, watch_timeout=watch_timeout)
        self.applier = Applier(session, policy, cache=self.cache, field_manager=FIELD_MANAGER)

    @classmethod
    def connect(cls, kubeconfig: str | None, policy: Policy, node: str, namespace: str,
                settings_namespace: str) -> "NodeCluster":
        """Connect with :func:`runtime.kube.session.connect` (``kubeconfig``, else ``$KUBECONFIG`` or
        ``~/.kube/config``, else the in-cluster ServiceAccount). Raises
        :class:`runtime.kube.session.KubeConfigError` or :class:`KubeApiError` (unreachable server)."""
        return cls(connect(kubeconfig), policy, node, namespace, settings_namespace)

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self, sync_timeout: float = 60.0, settings_wait: float = 5.0) -> "NodeCluster":
        """Start the watches and wait until each listed once. Raises TimeoutError naming the kinds
        not listed after ``sync_timeout`` seconds, and why (the last error, e.g. a 403). The settings
        Secret is optional: on the first start it is waited for at most ``settings_wait`` seconds, and
        while it cannot be listed :meth:`settings_secret` says why (the agent plans with the default
        settings and a warning)."""
        first = not self.cache.started
        self.cache.start()
        deadline = time.monotonic() + sync_timeout
        optional = ("Secret", self.rules.maintenance.kind)
        missing = [kind for kind, cache in self.cache.caches.items()
                   if kind not in optional and not cache.synced.wait(max(0.0, deadline - time.monotonic()))]
        if missing:
            why = "; ".join(
                f"{kind}: {self.cache[kind].last_error}" for kind in missing if self.cache[kind].last_error)
            raise TimeoutError(f"watch caches not synced after {sync_timeout:g}s: {', '.join(missing)}"
                               + (f" ({why})" if why else ""))
        if first:
            for kind in optional:
                self.cache[kind].synced.wait(settings_wait)
        return self

    def stop(self) -> None:
        """Stop the watches."""
        self.cache.stop()

    # -- reads (the watch cache) ------------------------------------------------------------------
    def node(self) -> dict[str, Any]:
        """The agent's Node; :class:`NodeMissingError` when the cluster does not hold it."""
        node = self.cache.get("Node", self.node_name)
        if node is None:
            raise NodeMissingError(f"Node {self.node_name} not found")
        return node

    def node_feature(self, name: str) -> dict[str, Any] | None:
        """The NodeFeature ``name`` of this node in the agent's namespace, or None."""
        return self.cache.get(self.rules.nodeFeature.kind, name, self.namespace)

    def devices(self) -> dict[str, Any] | None:
        """This node's Devices object, or None."""
        return self.cache.get(self.rules.devices.kind, self.node_name)

    def pods(self) -> list[dict[str, Any]]:
        """Every Pod bound to this node, all namespaces."""
        return list(self.cache["Pod"].objects()) if "Pod" in self.cache.caches else []

    def resource_slices(self) -> list[dict[str, Any]]:
        """The ResourceSlices naming this node (the ``dra`` backend's watch; empty without it)."""
        return list(self.cache["ResourceSlice"].objects()) if "ResourceSlice" in self.cache.caches else []

    def resource_claims(self) -> list[dict[str, Any]]:
        """Every ResourceClaim, all namespaces (the ``dra`` backend's watch; empty without it)."""
        return list(self.cache["ResourceClaim"].objects()) if "ResourceClaim" in self.cache.caches else []

    def maintenances(self) -> list[dict[str, Any]]:
        """The AcceleratorMaintenance objects naming this node. Raises :class:`MaintenanceUnreadable` while
        their watch has not listed (the CRD is not installed, RBAC refuses it), naming why."""
        kind = self.rules.maintenance.kind
        cache = self.cache[kind]
        if not cache.synced.is_set():
            raise MaintenanceUnreadable(f"not listed: {cache.last_error or 'no answer yet'}")
        return list(cache.objects())

    def settings_secret(self) -> dict[str, Any] | None:
        """The settings Secret (``data`` still base64), or None when missing. Raises
        :class:`SettingsUnreadable` while its watch has not listed (e.g. RBAC refuses it), naming why."""
        secrets = self.cache["Secret"]
        if not secrets.synced.is_set():
            raise SettingsUnreadable(f"not listed: {secrets.last_error or 'no answer yet'}")
        return self.cache.get("Secret", self.policy.settings.secretName, self.settings_namespace)

    # -- writes (the applier) ---------------------------------------------------------------------
    def upsert(self, desired: Mapping[str, Any], current: Mapping[str, Any] | None,
               reread_on_conflict: bool = True) -> str:
        """Create ``desired`` or replace its labels, ownerReferences and spec (``current``: as cached, or
        as the plan read it). Returns ``created``, ``replaced`` or ``unchanged``; with
        ``reread_on_conflict=False`` a 409 (the object changed since ``current``) raises KubeApiError."""
        return self.applier.update(dict(desired), ("spec",), current,
                                   reread_on_conflict=reread_on_conflict)[0]

    def write_status(self, desired: Mapping[str, Any]) -> bool:
        """Make the object's status equal to ``desired["status"]``; returns whether it wrote."""
        return self.applier.update_status(dict(desired))

    def delete_owned(self, current: Mapping[str, Any] | None, node: Mapping[str, Any]) -> bool:
        """Delete ``current`` only when its controller ownerReference is ``node``: the agent never
        deletes what it does not own. Returns whether it deleted."""
        meta = node.get("metadata") or {}
        if current is None or not owned_by(dict(current), meta.get("uid", ""), meta.get("name", "")):
            return False
        return self.applier.delete(dict(current), owner=dict(node))

    def patch_node_annotations(self, annotations: Mapping[str, str]) -> None:
        """Merge-patch only the given annotation keys onto the Node."""
        self.applier.merge_patch("Node", self.node_name, {"metadata": {"annotations": dict(annotations)}})

    def patch_node_status(self, status: Mapping[str, Any]) -> None:
        """Merge-patch the Node's status subresource (capacity/allocatable keys)."""
        self.applier.merge_patch("Node", self.node_name, {"status": dict(status)}, subresource="status")

    def patch_pod_annotations(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        """Merge-patch only the given annotation keys onto the Pod ``namespace``/``name``."""
        self.applier.merge_patch("Pod", name, {"metadata": {"annotations": dict(annotations)}}, namespace)

    def warn(self, involved: Mapping[str, Any], reason: str, message: str, component: str,
             type_: str = "Warning") -> None:
        """Record an Event (``type_``: Warning, or Normal for a recovery) on ``involved`` (``apiVersion``,
        ``kind``, ``name``, optional ``namespace``, ``uid``); a refused Event is logged, never raised."""
        event = make_event(involved, type_, reason, message, component,
                           datetime.datetime.now(datetime.timezone.utc))
        try:
            self.applier.create(event)
        except KubeApiError as exc:
            logger.warning("cannot record event {} on {} {}: {}", reason, involved.get("kind"),
                           involved.get("name"), exc)
