"""The shared builders of the unit tests' objects: a Pod and its containers as the API server serves
them, each key present only when it is given, so a test names exactly what its object holds. A test
whose object means something more (a DRA extended claim, an allocation annotation) keeps a thin local
wrapper that calls these (docs/development/testing.md "Builders and the in-memory API")."""
from __future__ import annotations

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def container(name: str = "main", *, image: str | None = None, limits: dict | None = None,
              requests: dict | None = None, resources: dict | None = None, **fields) -> dict:
    """``{"name", "image"?, "resources"?: {"requests"?, "limits"?}, **fields}``.

    ``resources`` is the whole resources object as given; otherwise it holds ``requests`` and ``limits``
    where given, and is left out when neither is."""
    if resources is None:
        resources = _given(requests=requests, limits=limits) or None
    return {"name": name, **_given(image=image, resources=resources), **fields}


def pod(name: str = "demo", namespace: str | None = "default", *, containers: list[dict] | None = None,
        image: str | None = None, limits: dict | None = None, requests: dict | None = None,
        queue: str | None = None, labels: dict | None = None, annotations: dict | None = None,
        uid: str | None = None, created: str | None = None, owner: dict | None = None,
        node: str | None = None, spec: dict | None = None, phase: str | None = None,
        status: dict | None = None, **metadata) -> dict:
    """``{"apiVersion": "v1", "kind": "Pod", "metadata", "spec", "status"?}``.

    metadata: ``name``, ``namespace`` (left out when None), ``uid``, ``creationTimestamp`` (``created``),
    ``labels`` (``queue`` as the Kueue queue-name label first, then ``labels``), ``annotations``,
    ``ownerReferences: [owner]``, then ``**metadata`` as given (they may replace any of these).
    spec: ``spec`` as given when given, else ``{"nodeName"?: node, "containers": containers}`` where
    ``containers`` defaults to one ``container("main", image=, limits=, requests=)``.
    status: ``{"phase"?: phase, **status}``, left out when both are None."""
    if queue is not None or labels is not None:
        labels = {**_given(**{QUEUE_LABEL: queue}), **(labels or {})}
    meta = {"name": name, **_given(namespace=namespace, uid=uid, creationTimestamp=created, labels=labels,
                                   annotations=annotations, ownerReferences=None if owner is None else [owner]),
            **metadata}
    if spec is None:
        spec = {"nodeName": node} if node is not None else {}
        spec["containers"] = containers if containers is not None else [
            container("main", image=image, limits=limits, requests=requests)]
    out = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    if phase is not None or status is not None:
        out["status"] = {**_given(phase=phase), **(status or {})}
    return out


def _given(**fields) -> dict:
    """The ``fields`` that are not None, in their order."""
    return {key: value for key, value in fields.items() if value is not None}
