"""A connection to one API server: kubeconfig or in-cluster credentials -> REST calls by path.

This module (with the rest of ``runtime.kube``) is the only place that imports ``kubernetes``
(import-linter contract in pyproject.toml). Callers get plain dicts and :class:`KubeApiError`;
they never see the client library's types.

* :func:`connect` builds a :class:`Session` (an ``ApiClient`` and a ``kubernetes.dynamic.DynamicClient``).
* :meth:`Session.ref` resolves a kind (``runtime.engine.snapshot.KNOWN_KINDS``) to a
  :class:`ResourceRef` (plural from discovery) that builds collection, object and status paths.
* :meth:`Session.call` sends one request and returns the decoded JSON body;
  :meth:`Session.stream` opens a watch and yields its events (one JSON object per line).
"""
from __future__ import annotations

import json
import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import DynamicApiError, ResourceNotFoundError
from kubernetes.watch.watch import iter_resp_lines
from urllib3.exceptions import HTTPError

from runtime.engine.snapshot import KNOWN_KINDS

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class KubeApiError(RuntimeError):
    """A non-2xx answer: ``status`` (HTTP code), ``reason`` (e.g. ``AlreadyExists``, ``Conflict``,
    ``NotFound``, ``Expired``) and the server's ``message``."""

    def __init__(self, status: int, reason: str, message: str):
        self.status, self.reason, self.message = status, reason, message
        super().__init__(f"{status} {reason}: {message}")

    @classmethod
    def from_dynamic(cls, exc: DynamicApiError) -> "KubeApiError":
        """The error of a ``kubernetes.dynamic`` exception (reason and message from its Status body)."""
        status = int(getattr(exc, "status", 0) or 0)
        reason, message = str(getattr(exc, "reason", "") or ""), str(exc)
        body = getattr(exc, "body", None)
        try:
            data = json.loads(body) if body else {}
            reason, message = data.get("reason") or reason, data.get("message") or message
        except (TypeError, ValueError):
            pass
        return cls(status, reason, message)


@dataclass(frozen=True)
class ResourceRef:
    """Where objects of one kind live: ``apiVersion``, ``plural``, ``namespaced``."""

    kind: str
    api_version: str
    plural: str
    namespaced: bool

    def path(self, namespace: str | None = None, name: str | None = None,
             subresource: str | None = None) -> str:
        """``/api/v1/...`` or ``/apis/<group>/<version>/...``; no namespace on a namespaced kind
        means every namespace (list and watch only)."""
        base = f"/api/{self.api_version}" if "/" not in self.api_version else f"/apis/{self.api_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base


class Session:
    """One authenticated connection; thread-safe for concurrent calls (urllib3 pool).

    ``api_client`` and ``dynamic`` are exposed for callers inside ``runtime.kube`` only.
    """

    def __init__(self, api_client: k8s_client.ApiClient):
        """Discovers the server's API groups; raises :class:`KubeApiError` (status 0,
        ``Unreachable``) when the server cannot be reached, or the server's error."""
        self.api_client = api_client
        try:
            self.dynamic = DynamicClient(api_client)
        except DynamicApiError as exc:
            raise KubeApiError.from_dynamic(exc) from exc
        except (HTTPError, OSError) as exc:
            raise KubeApiError(0, "Unreachable", f"{api_client.configuration.host}: {exc}") from exc
        self._refs: dict[str, ResourceRef] = {}
        self._lock = threading.Lock()

    def ref(self, kind: str) -> ResourceRef:
        """The :class:`ResourceRef` of ``kind`` (a KNOWN_KINDS kind or ``Lease``/``Event``).

        Raises :class:`KubeApiError` (404 ``NotFound``) when the server does not serve the kind
        (its CRD is not installed).
        """
        with self._lock:
            if kind in self._refs:
                return self._refs[kind]
        api_version = EXTRA_KINDS.get(kind) or KNOWN_KINDS[kind][0]
        try:
            res = self.dynamic.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError as exc:
            raise KubeApiError(404, "NotFound", f"the server does not serve {kind} ({api_version})") from exc
        ref = ResourceRef(kind=kind, api_version=api_version, plural=res.name,
                          namespaced=bool(res.namespaced))
        with self._lock:
            self._refs[kind] = ref
        return ref

    def call(self, method: str, path: str, body: dict | list | None = None, query: dict | None = None,
             content_type: str | None = None, timeout: float = 30.0) -> dict:
        """Send one request; return the decoded JSON body (``{}`` when empty).

        Raises :class:`KubeApiError` for any non-2xx answer.
        """
        try:
            resp = self.dynamic.request(method, path, body=body, query_params=list((query or {}).items()),
                                        content_type=content_type, serialize=False,
                                        _request_timeout=timeout)
        except DynamicApiError as exc:
            raise KubeApiError.from_dynamic(exc) from exc
        except HTTPError as exc:
            raise KubeApiError(0, "Unreachable", str(exc)) from exc
        data = resp.data
        return json.loads(data) if data else {}

    def username(self) -> str | None:
        """Who the API server takes this session for (``authentication.k8s.io/v1``
        SelfSubjectReview), or None when the server does not answer it."""
        try:
            review = self.call("post", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                               body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
        except KubeApiError:
            return None
        return ((review.get("status") or {}).get("userInfo") or {}).get("username")

    def stream(self, path: str, query: dict, timeout: float) -> "WatchStream":
        """Open a watch (``query`` must carry ``watch=true``); see :class:`WatchStream`."""
        try:
            resp = self.dynamic.request("get", path, query_params=list(query.items()), serialize=False,
                                        _request_timeout=(10.0, timeout))
        except DynamicApiError as exc:
            raise KubeApiError.from_dynamic(exc) from exc
        return WatchStream(resp)


class WatchStream:
    """Events of one open watch: iterate for ``{"type", "object"}`` dicts; :meth:`close` from any
    thread ends the iteration (the reader then sees the stream end or an error it should ignore)."""

    def __init__(self, resp):
        self._resp = resp

    def __iter__(self) -> Iterator[dict]:
        for line in iter_resp_lines(self._resp):
            if line:
                yield json.loads(line)

    def close(self) -> None:
        """Close from the reading thread (releases the connection)."""
        try:
            self._resp.close()
            self._resp.release_conn()
        except Exception:  # noqa: BLE001 - closing a broken stream is best effort
            pass

    def abort(self) -> None:
        """Stop from another thread: shut the socket down so a blocked read returns at once
        (closing the response itself would wait for the reader's buffer lock)."""
        conn = getattr(self._resp, "connection", None) or getattr(self._resp, "_connection", None)
        sock = getattr(conn, "sock", None)
        try:
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


# Kinds the controller uses beyond the engine's snapshot kinds.
EXTRA_KINDS = {"Lease": "coordination.k8s.io/v1", "Event": "v1",
               "Report": "openreports.io/v1alpha1", "ClusterReport": "openreports.io/v1alpha1",
               "MutatingWebhookConfiguration": "admissionregistration.k8s.io/v1",
               "ValidatingWebhookConfiguration": "admissionregistration.k8s.io/v1",
               "ClusterRole": "rbac.authorization.k8s.io/v1"}


def connect(kubeconfig: str | Path | None = None, context: str | None = None) -> Session:
    """A :class:`Session` from ``kubeconfig`` (a file), else ``$KUBECONFIG``/``~/.kube/config``,
    else the in-cluster ServiceAccount.

    Raises :class:`KubeConfigError` when no usable configuration is found.
    """
    cfg = k8s_client.Configuration()
    cfg.connection_pool_maxsize = POOL_SIZE  # one connection per watch thread plus writers
    if kubeconfig is None and not os.environ.get("KUBECONFIG"):
        try:
            k8s_config.load_incluster_config(client_configuration=cfg)
            return Session(k8s_client.ApiClient(cfg))
        except k8s_config.ConfigException:
            pass
    try:
        k8s_config.load_kube_config(config_file=str(kubeconfig) if kubeconfig else None, context=context,
                                    client_configuration=cfg)
    except (k8s_config.ConfigException, OSError) as exc:
        raise KubeConfigError(
            f"no usable kubeconfig ({kubeconfig or '$KUBECONFIG or ~/.kube/config'}): {exc}") from exc
    return Session(k8s_client.ApiClient(cfg))


POOL_SIZE = 32


class KubeConfigError(RuntimeError):
    """No kubeconfig and no in-cluster ServiceAccount to connect with."""
