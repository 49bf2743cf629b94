"""The Mutating/ValidatingWebhookConfigurations that register the AdmissionPolicies
(docs/reference/controller.md "Controller and webhooks").

:func:`webhook_configurations` renders them from the rule files: each ``kind: AdmissionPolicy`` is
one webhook (``spec.webhook`` its name, ``spec.path`` its path, ``spec.match`` its rule, object and
namespace selectors, ``spec.failurePolicy``); ``kind: WebhookRegistration``
(rules/admission/registration.yaml) names the two configurations and gives what every webhook
shares (sideEffects, admissionReviewVersions, timeoutSeconds, matchPolicy, the ownership labels, the
matchCondition of policies that skip objects being deleted).
:func:`drift` compares a live configuration with the rendered one, both ways: a webhook the rendered one
lacks is drift too (a path the replicas no longer serve). Pure: no I/O.
"""
from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Iterable, Mapping

from runtime.engine.policy import Policy
from runtime.model.admission import AdmissionPolicySpec, WebhookRegistrationSpec

API_VERSION = "admissionregistration.k8s.io/v1"
KINDS = {"mutating": "MutatingWebhookConfiguration", "validating": "ValidatingWebhookConfiguration"}


@dataclass(frozen=True)
class ClientConfig:
    """Where the API server reaches the webhook server, and the CA that signed its certificate.

    Exactly one of ``url_base`` (e.g. ``https://127.0.0.1:9443``; each webhook's path is appended) and
    ``service`` (``(namespace, name, port)`` of a Service in front of the controller) is set;
    ``ca_pem`` is the PEM bundle put (base64) into ``caBundle``. Raises ValueError otherwise.
    """

    ca_pem: bytes
    url_base: str | None = None
    service: tuple[str, str, int] | None = None

    def __post_init__(self):
        if (self.url_base is None) == (self.service is None):
            raise ValueError("give exactly one of url_base and service")
        if not self.ca_pem.strip():
            raise ValueError("the CA bundle is empty")

    def render(self, path: str) -> dict:
        """The ``clientConfig`` of the webhook served at ``path``."""
        bundle = base64.b64encode(self.ca_pem).decode()
        if self.url_base is not None:
            return {"url": self.url_base.rstrip("/") + path, "caBundle": bundle}
        namespace, name, port = self.service
        return {"service": {"namespace": namespace, "name": name, "path": path, "port": port},
                "caBundle": bundle}


def registration_of(policy: Policy) -> WebhookRegistrationSpec:
    """The one ``kind: WebhookRegistration`` of the rules (KeyError naming the kind when missing)."""
    return policy.ruleset.get("WebhookRegistration")


def _webhook(spec: AdmissionPolicySpec, reg: WebhookRegistrationSpec, client: ClientConfig) -> dict:
    m = spec.match
    hook = {
        "name": spec.webhook,
        "clientConfig": client.render(spec.path),
        "rules": [{"apiGroups": [m.group], "apiVersions": list(m.versions), "operations": list(m.operations),
                   "resources": [m.resource], "scope": "*"}],
        "failurePolicy": spec.failurePolicy,
        "matchPolicy": reg.matchPolicy,
        "sideEffects": reg.sideEffects,
        "admissionReviewVersions": list(reg.admissionReviewVersions),
        "timeoutSeconds": reg.timeoutSeconds,
    }
    if m.labelsExist:
        hook["objectSelector"] = {"matchExpressions": [{"key": k,
                                                        "operator": "Exists"} for k in m.labelsExist]}
    if m.excludeNamespaces:
        hook["namespaceSelector"] = {"matchExpressions": [
            {"key": reg.namespaceLabel, "operator": "NotIn", "values": list(m.excludeNamespaces)}]}
    if m.skipDeleting and reg.skipDeletingCondition is not None:
        hook["matchConditions"] = [reg.skipDeletingCondition.model_dump()]
    if spec.type == "mutating":
        hook["reinvocationPolicy"] = "Never"
    return hook


def owner_reference(owner: Mapping) -> dict:
    """The ``ownerReferences`` entry naming ``owner`` (a live object: apiVersion, kind, metadata name
    and uid): a configuration it owns is deleted by the garbage collector once the owner is gone."""
    meta = owner["metadata"]
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"],
            "uid": meta["uid"]}


def webhook_configurations(policy: Policy, client: ClientConfig, owner: Mapping | None = None,
                           paths: Iterable[str] | None = None) -> list[dict]:
    """The MutatingWebhookConfiguration and the ValidatingWebhookConfiguration (in that order) for
    every AdmissionPolicy of ``policy`` (whose path is in ``paths`` when given: the paths the serving
    replicas serve), webhooks in policy-name order; a configuration no policy uses is left out. Each
    carries the registration's ``labels`` (accelpolicy owns it) and, with ``owner`` (a live cluster-scoped
    object, e.g. the chart's ClusterRole), an ownerReference to it: the configurations then go when the
    owner goes (``helm uninstall``, hooks or not)."""
    reg = registration_of(policy)
    served = None if paths is None else set(paths)
    docs = sorted((d for d in policy.ruleset.all("AdmissionPolicy")
                   if served is None or d.spec.path in served), key=lambda d: d.name)
    out = []
    for kind_type in ("mutating", "validating"):
        hooks = [_webhook(d.spec, reg, client) for d in docs if d.spec.type == kind_type]
        if hooks:
            meta = {"name": getattr(reg.configurations, kind_type), "labels": dict(reg.labels)}
            if owner is not None:
                meta["ownerReferences"] = [owner_reference(owner)]
            out.append({"apiVersion": API_VERSION, "kind": KINDS[kind_type], "metadata": meta,
                        "webhooks": hooks})
    return out


def owned_configuration(policy: Policy, obj: Mapping) -> bool:
    """Whether a webhook configuration carries every registration label (accelpolicy owns it)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in registration_of(policy).labels.items())


def drift(live: Mapping | None, desired: Mapping) -> list[str]:
    """Paths where ``live`` differs from ``desired`` (``[]`` when every field we set holds).

    Fields the server defaults or other managers add are ignored; webhooks are matched by name (one
    ``live`` holds that ``desired`` does not is ``webhooks[<name>] (extra)``), other lists element by element
    and must have the same length. ``live`` None -> ``["<missing>"]``.
    """
    if live is None:
        return ["<missing>"]
    out: list[str] = []
    _diff(live.get("metadata", {}).get("labels") or {}, desired["metadata"].get("labels") or {},
          "metadata.labels", out)
    if "ownerReferences" in desired["metadata"]:
        _diff(live.get("metadata", {}).get("ownerReferences") or [], desired["metadata"]["ownerReferences"],
              "metadata.ownerReferences", out)
    by_name = {w.get("name"): w for w in live.get("webhooks") or []}
    for hook in desired.get("webhooks") or []:
        _diff(by_name.get(hook["name"]), hook, f"webhooks[{hook['name']}]", out)
    wanted = {hook["name"] for hook in desired.get("webhooks") or []}
    out += [f"webhooks[{name}] (extra)" for name in sorted(n for n in by_name if n not in wanted)]
    return out


def _diff(live, want, path: str, out: list[str]) -> None:
    if isinstance(want, dict):
        if not isinstance(live, dict):
            out.append(path)
            return
        for key, value in want.items():
            _diff(live.get(key), value, f"{path}.{key}", out)
    elif isinstance(want, list):
        if not isinstance(live, list) or len(live) != len(want):
            out.append(path)
            return
        for i, (a, b) in enumerate(zip(live, want)):
            _diff(a, b, f"{path}[{i}]", out)
    elif live != want:
        out.append(path)


def stale_configurations(policy: Policy, live: Iterable[Mapping],
                         desired: Iterable[Mapping]) -> list[Mapping]:
    """Live configurations accelpolicy owns (:func:`owned_configuration`) that the rules no longer
    render (a configuration name changed in rules/admission/registration.yaml)."""
    wanted = {(d["kind"], d["metadata"]["name"]) for d in desired}
    return [o for o in live if owned_configuration(policy, o)
            and (o.get("kind"), (o.get("metadata") or {}).get("name")) not in wanted]
