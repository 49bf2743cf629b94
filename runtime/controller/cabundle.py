"""The serving CA certificate published for clients of the webhook server.

The serving Secret (:mod:`runtime.controller.servingcert`) holds the server's private key and, when
accelpolicy issues the certificate, the CA's private key too. A client that only needs to verify the
server (Prometheus scraping ``/metrics`` through the webhook Service, ``helm test``) must not be given
read access to that Secret. So the leader copies ``ca.crt`` alone into a ConfigMap
(``--webhook-ca-configmap``, in the controller's namespace) whenever the CA bundle changes; the chart's
ServiceMonitor reads the CA from there.
"""
from __future__ import annotations

from loguru import logger

from runtime.engine.policy import Policy
from runtime.kube.applier import Applier
from runtime.kube.session import KubeApiError, Session

CA_KEY = "ca.crt"


def ca_configmap(namespace: str, name: str, ca_pem: bytes) -> dict:
    """The ConfigMap ``namespace/name`` holding ``ca_pem`` (PEM bytes) under ``ca.crt``."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"app.kubernetes.io/name": "accelpolicy",
                                    "app.kubernetes.io/component": "webhook-ca"}},
            "data": {CA_KEY: ca_pem.decode()}}


class CaPublisher:
    """Keeps ConfigMap ``namespace/name`` equal to the CA bundle given to :meth:`publish` (server-side
    apply, field manager ``accelpolicy``); call it from the leader only."""

    def __init__(self, session: Session, policy: Policy, namespace: str, name: str):
        self.applier = Applier(session, policy)
        self.namespace, self.name = namespace, name
        self.published: bytes | None = None

    def publish(self, ca_pem: bytes) -> bool:
        """Apply the ConfigMap when ``ca_pem`` differs from the last one published; returns whether it
        wrote. A refusal is logged (the webhooks keep serving) and retried on the next call."""
        if ca_pem == self.published:
            return False
        try:
            self.applier.apply(ca_configmap(self.namespace, self.name, ca_pem))
        except KubeApiError as exc:
            logger.warning("serving CA ConfigMap {}/{}: {}", self.namespace, self.name, exc)
            return False
        self.published = ca_pem
        logger.info("serving CA certificate published in ConfigMap {}/{}", self.namespace, self.name)
        return True
