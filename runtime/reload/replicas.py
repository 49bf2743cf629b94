"""What the serving replicas say about their rules: the controller's leader asks each of them
(docs/rule-authoring.md "How a rules change goes live").

Every webhook server answers ``GET /generation`` (:func:`runtime.webhook.app.build_app`) with its rules
holder's report (:meth:`runtime.reload.holder.RulesHolder.report`): the generation it serves, the paths
it serves, and its own trial of the latest generation it tried (reason and problems when it refused it,
the recent reviews it replayed and how many the generation newly denies). The replicas stay read-only:
nothing they say is written anywhere; the leader reads it over the same TLS the API server uses
(verified with the registration's CA bundle).

Where the replicas are: the registration's URL base (one server: ``accelpolicy admission`` on a host,
the controller's own), or every ready endpoint of the registration's Service (its EndpointSlices, each
address asked with the Service's DNS name as the TLS server name).
"""
from __future__ import annotations

import http.client
import json
import socket
import ssl
from dataclasses import dataclass
from typing import Callable, Optional
from urllib.parse import urlsplit

from loguru import logger

from runtime.kube.session import KubeApiError

REPORT_PATH = "/generation"


@dataclass(frozen=True)
class Endpoint:
    """One replica: ``host``:``port`` over HTTPS, verified as ``server_name``."""

    host: str
    port: int
    server_name: str

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


class _Connection(http.client.HTTPSConnection):
    """An HTTPS connection to an address whose certificate names another host (a Pod behind a Service)."""

    def __init__(self, endpoint: Endpoint, context: ssl.SSLContext, timeout: float):
        super().__init__(endpoint.host, endpoint.port, context=context, timeout=timeout)
        self._server_name, self._tls = endpoint.server_name, context

    def connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), self.timeout)
        self.sock = self._tls.wrap_socket(sock, server_hostname=self._server_name)


def fetch(endpoint: Endpoint, ca_pem: bytes, timeout: float = 3.0) -> Optional[dict]:
    """``endpoint``'s report (a dict), or None when it does not answer one (logged at DEBUG)."""
    try:
        context = ssl.create_default_context(cadata=ca_pem.decode())
        connection = _Connection(endpoint, context, timeout)
        try:
            connection.request("GET", REPORT_PATH)
            answer = connection.getresponse()
            body = answer.read(1024 * 1024)
        finally:
            connection.close()
        if answer.status != 200:
            return None
        report = json.loads(body)
        return report if isinstance(report, dict) else None
    except (OSError, ValueError, ssl.SSLError) as exc:
        logger.debug("rules report of {}: {}", endpoint, exc)
        return None


def url_endpoints(url_base: str) -> list[Endpoint]:
    """The one server at ``url_base`` (``https://host:port``)."""
    parts = urlsplit(url_base)
    return [Endpoint(parts.hostname or "", parts.port or 443, parts.hostname or "")]


def service_endpoints(session, namespace: str, name: str, port: int) -> list[Endpoint]:
    """Every ready address of Service ``namespace``/``name`` (its EndpointSlices), at the target port of
    its port ``port`` (the slices carry the Pods' port; with one port, that one)."""
    path = f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
    try:
        slices = session.call("get", path, query={"labelSelector": f"kubernetes.io/service-name={name}"})
    except KubeApiError as exc:
        logger.warning("the endpoints of Service {}/{}: {}", namespace, name, exc)
        return []
    out = []
    for item in slices.get("items") or []:
        ports = [p.get("port") for p in item.get("ports") or [] if p.get("port")]
        target = ports[0] if len(ports) == 1 else port
        for endpoint in item.get("endpoints") or []:
            if (endpoint.get("conditions") or {}).get("ready") is False:
                continue
            out += [Endpoint(address, target, f"{name}.{namespace}.svc")
                    for address in endpoint.get("addresses") or []]
    return sorted(set(out), key=str)


class ReplicaReports:
    """The reports of the replicas ``endpoints()`` lists, verified with ``ca_pem()`` (module docstring)."""

    def __init__(self, endpoints: Callable[[], list[Endpoint]], ca_pem: Callable[[], bytes],
                 timeout: float = 3.0):
        self.endpoints, self.ca_pem, self.timeout = endpoints, ca_pem, timeout

    def fetch(self) -> dict[str, Optional[dict]]:
        """``{endpoint: report or None}`` (None: it did not answer)."""
        ca = self.ca_pem()
        return {str(e): fetch(e, ca, self.timeout) for e in self.endpoints()}

    def served_paths(self) -> Optional[set[str]]:
        """The webhook paths every answering replica serves (None when none answered: unknown)."""
        reports = [r for r in self.fetch().values() if r is not None]
        if not reports:
            return None
        paths = set(reports[0].get("paths") or [])
        for report in reports[1:]:
            paths &= set(report.get("paths") or [])
        return paths
