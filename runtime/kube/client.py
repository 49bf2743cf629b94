"""A small wrapper over the official ``kubernetes`` client: the only place the agent talks to the API.

Objects go in and come out as JSON-shaped dicts (camelCase, as the API server stores them).

* :meth:`KubeClient.load` - the one kubeconfig loader (:func:`runtime.kube.session.connect`).
* reads: :meth:`get_node`, :meth:`get_custom`, :meth:`get_secret`, :meth:`pods_on_node`.
* writes: :meth:`upsert_custom` (create, or replace labels/ownerReferences/spec keeping the
  resourceVersion), :meth:`replace_custom_status`, :meth:`patch_node_annotations`,
  :meth:`patch_node_status`, :meth:`patch_pod_annotations`, :meth:`warn` (a Warning Event).
* :meth:`node_watches` + :meth:`start_watches` - daemon threads that set a wake-up Event on every
  change of what the agent depends on (Node, its NodeFeatures, its Pods, the settings Secret).
* :meth:`delete_custom_owned` deletes only an object whose controller ownerReference is the given
  owner: the agent never deletes what it does not own.

Conflicts (HTTP 409) and transient failures (429, 500, 502, 503, 504) are retried with tenacity
(re-reading before each replace); any other :class:`kubernetes.client.exceptions.ApiException`
propagates.
"""
from __future__ import annotations

import datetime
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from kubernetes import client as k8s
from kubernetes import watch as k8s_watch
from kubernetes.client.exceptions import ApiException
from loguru import logger
from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential

from runtime.kube.events import warning_event
from runtime.kube.ownership import owned_by
from runtime.kube.session import connect

__all__ = ["KubeClient", "WatchSpec", "owned_by", "retry_conflicts", "watch_forever"]

RETRIED_STATUS = frozenset({409, 429, 500, 502, 503, 504})


def _retriable(exc: BaseException) -> bool:
    return isinstance(exc, ApiException) and exc.status in RETRIED_STATUS


_retry = retry(retry=retry_if_exception(_retriable), stop=stop_after_attempt(5),
               wait=wait_exponential(multiplier=0.2, max=3), reraise=True)


def _not_found(exc: ApiException) -> bool:
    return exc.status == 404


class KubeClient:
    """See the module docstring. ``api_client`` is a configured :class:`kubernetes.client.ApiClient`."""

    def __init__(self, api_client: k8s.ApiClient):
        self.api_client = api_client
        self.core = k8s.CoreV1Api(api_client)
        self.custom = k8s.CustomObjectsApi(api_client)

    @classmethod
    def load(cls, kubeconfig: str | None = None) -> "KubeClient":
        """Configure with the one kubeconfig loader, :func:`runtime.kube.session.connect`: ``kubeconfig``
        (if given), else ``$KUBECONFIG``/``~/.kube/config``, else the in-cluster ServiceAccount.

        Raises :class:`runtime.kube.session.KubeConfigError` when none works.
        """
        return cls(connect(kubeconfig).api_client)

    def _dict(self, obj: Any) -> dict[str, Any]:
        return self.api_client.sanitize_for_serialization(obj)

    # -- reads -------------------------------------------------------------------------------------
    @_retry
    def get_node(self, name: str) -> dict[str, Any]:
        """The Node ``name``; ApiException 404 when it does not exist."""
        return self._dict(self.core.read_node(name))

    @_retry
    def get_custom(self, group: str, version: str, plural: str, name: str,
                   namespace: str | None = None) -> dict[str, Any] | None:
        """A custom object, or None when it does not exist."""
        try:
            if namespace:
                return self.custom.get_namespaced_custom_object(group, version, namespace, plural, name)
            return self.custom.get_cluster_custom_object(group, version, plural, name)
        except ApiException as exc:
            if _not_found(exc):
                return None
            raise

    @_retry
    def get_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A Secret as a dict (``data`` still base64), or None when missing."""
        try:
            return self._dict(self.core.read_namespaced_secret(name, namespace))
        except ApiException as exc:
            if _not_found(exc):
                return None
            raise

    @_retry
    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        """Every Pod bound to ``node`` (field selector ``spec.nodeName``), all namespaces."""
        pods = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}")
        return [self._dict(p) for p in pods.items]

    # -- writes ------------------------------------------------------------------------------------
    @_retry
    def upsert_custom(self, group: str, version: str, plural: str, desired: Mapping[str, Any],
                      fields: tuple[str, ...] = ("spec",)) -> tuple[str, dict[str, Any]]:
        """Create ``desired`` or make the existing object's labels, ownerReferences and ``fields`` equal
        to it. Returns ``(action, object)`` with action ``created``, ``replaced`` or ``unchanged``."""
        meta = desired["metadata"]
        ns = meta.get("namespace")
        current = self.get_custom(group, version, plural, meta["name"], ns)
        if current is None:
            body = {k: v for k, v in desired.items() if k != "status"}
            if ns:
                return "created", self.custom.create_namespaced_custom_object(group, version, ns, plural, body)
            return "created", self.custom.create_cluster_custom_object(group, version, plural, body)
        cur_meta = current.setdefault("metadata", {})
        same = (cur_meta.get("labels") or {}) == (meta.get("labels") or {}) and \
            (cur_meta.get("ownerReferences") or []) == (meta.get("ownerReferences") or []) and \
            all(current.get(f) == desired.get(f) for f in fields)
        if same:
            return "unchanged", current
        cur_meta["labels"] = dict(meta.get("labels") or {})
        cur_meta["ownerReferences"] = list(meta.get("ownerReferences") or [])
        for f in fields:
            current[f] = desired.get(f)
        if ns:
            return "replaced", self.custom.replace_namespaced_custom_object(group, version, ns, plural, meta["name"], current)
        return "replaced", self.custom.replace_cluster_custom_object(group, version, plural, meta["name"], current)

    @_retry
    def replace_custom_status(self, group: str, version: str, plural: str, name: str,
                              status: Mapping[str, Any]) -> bool:
        """Write a cluster-scoped object's ``status`` through the status subresource when it differs.
        Returns whether it wrote."""
        current = self.get_custom(group, version, plural, name)
        if current is None or current.get("status") == status:
            return False
        current["status"] = dict(status)
        self.custom.replace_cluster_custom_object_status(group, version, plural, name, current)
        return True

    @_retry
    def delete_custom_owned(self, group: str, version: str, plural: str, name: str, namespace: str | None,
                            owner_uid: str, owner_name: str) -> bool:
        """Delete the object only when its controller reference is the owner; returns whether it did."""
        current = self.get_custom(group, version, plural, name, namespace)
        if current is None or not owned_by(current, owner_uid, owner_name):
            return False
        try:
            if namespace:
                self.custom.delete_namespaced_custom_object(group, version, namespace, plural, name)
            else:
                self.custom.delete_cluster_custom_object(group, version, plural, name)
        except ApiException as exc:
            if not _not_found(exc):
                raise
        return True

    @_retry
    def patch_node_annotations(self, name: str, annotations: Mapping[str, str]) -> None:
        """Merge-patch only the given annotation keys onto the Node."""
        self.core.patch_node(name, {"metadata": {"annotations": dict(annotations)}})

    @_retry
    def patch_pod_annotations(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        """Merge-patch only the given annotation keys onto the Pod ``namespace``/``name``."""
        self.core.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": dict(annotations)}})

    @_retry
    def patch_node_status(self, name: str, status: Mapping[str, Any]) -> None:
        """Merge-patch the Node's status subresource (capacity/allocatable keys)."""
        self.core.patch_node_status(name, {"status": dict(status)})

    def node_watches(self, node: str, feature_group: str, feature_version: str, feature_plural: str,
                     namespace: str, node_label: str, secret_namespace: str, secret_name: str) -> list[WatchSpec]:
        """What the agent reacts to (node-facts.md §3.3, §7.6): its Node, its NodeFeatures, the Pods on
        the node and the settings Secret."""
        return [
            WatchSpec("Node", self.core.list_node, kwargs={"field_selector": f"metadata.name={node}"}),
            WatchSpec("Pod", self.core.list_pod_for_all_namespaces, kwargs={"field_selector": f"spec.nodeName={node}"}),
            WatchSpec("NodeFeature", self.custom.list_namespaced_custom_object,
                      (feature_group, feature_version, namespace, feature_plural),
                      {"label_selector": f"{node_label}={node}"}),
            WatchSpec("Secret", self.core.list_namespaced_secret, (secret_namespace,),
                      {"field_selector": f"metadata.name={secret_name}"}),
        ]

    def pod_watches(self, nodes: list[str]) -> list[WatchSpec]:
        """One watch per node of the Pods bound to it (field selector ``spec.nodeName``), all namespaces."""
        return [WatchSpec("Pod", self.core.list_pod_for_all_namespaces, kwargs={"field_selector": f"spec.nodeName={n}"})
                for n in nodes]

    def start_watches(self, specs: list[WatchSpec], wake: threading.Event, stop: threading.Event) -> list[threading.Thread]:
        """One daemon thread per :class:`WatchSpec` running :func:`watch_forever`."""
        threads = []
        for spec in specs:
            t = threading.Thread(target=watch_forever, args=(spec, wake, stop), name=f"watch-{spec.kind}", daemon=True)
            t.start()
            threads.append(t)
        return threads

    @_retry
    def warn(self, involved: Mapping[str, Any], reason: str, message: str, component: str) -> None:
        """Record a Warning Event on ``involved`` (keys ``api_version, kind, name``, optional ``namespace, uid``).
        Events on cluster-scoped objects go to namespace ``default``."""
        ref = {"apiVersion": involved.get("api_version"), **{k: involved.get(k) for k in ("kind", "name", "namespace", "uid")}}
        body = warning_event(ref, reason, message, component, datetime.datetime.now(datetime.timezone.utc))
        try:
            self.core.create_namespaced_event(body["metadata"]["namespace"], body)
        except ApiException as exc:
            logger.warning("cannot record event {} on {} {}: {}", reason, involved.get("kind"), involved.get("name"), exc)


@dataclass(frozen=True)
class WatchSpec:
    """One watched list: ``kind`` names it in logs; ``list_call`` is a bound list method of the API
    (e.g. ``core.list_node``); ``args``/``kwargs`` its arguments (selectors)."""

    kind: str
    list_call: Callable[..., Any]
    args: tuple = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


def watch_forever(spec: WatchSpec, wake: threading.Event, stop: threading.Event,
                  timeout_seconds: int = 300, backoff: float = 5.0) -> None:
    """Set ``wake`` on every event of ``spec`` until ``stop``; restart the watch when it ends or fails
    (logging the failure, then waiting ``backoff`` seconds). Meant for a daemon thread."""
    while not stop.is_set():
        watcher = k8s_watch.Watch()
        try:
            for _ in watcher.stream(spec.list_call, *spec.args, timeout_seconds=timeout_seconds, **spec.kwargs):
                wake.set()
                if stop.is_set():
                    break
        except Exception as exc:  # the loop must survive API outages
            logger.warning("watch of {} failed, retrying in {}s: {}", spec.kind, backoff, exc)
            stop.wait(backoff)
        finally:
            watcher.stop()


def retry_conflicts(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The client's retry policy for callers composing several calls (409/429/5xx, 5 attempts)."""
    return _retry(fn)
