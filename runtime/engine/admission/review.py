"""Reading an AdmissionReview v1 request, and building one for offline use (``accelpolicy admit``).

:func:`parse_review` type-checks everything the engine reads and raises :class:`BadReview` (with
the uid when one could be read) for anything else, so a malformed review is answered with a
well-formed denial (or HTTP 400 without a uid), never a crash.
"""
from __future__ import annotations

import json
import uuid
from typing import Any, Optional

from runtime.engine.admission.engine import AdmissionRequest

API_VERSION = "admission.k8s.io/v1"
OLD_VERSIONS = ("admission.k8s.io/v1beta1",)
OLD_VERSION_HINT = (" (this webhook reads admission.k8s.io/v1 only; kube-apiserver sends v1 when the webhook "
                    "configuration's admissionReviewVersions lists it)")
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")


class BadReview(ValueError):
    """A request body that is not a usable AdmissionReview; ``uid`` is None when none was readable."""

    def __init__(self, message: str, uid: Optional[str] = None):
        super().__init__(message)
        self.uid = uid


def _mapping(value: Any, what: str, uid: Optional[str], optional: bool = True) -> dict:
    if value is None and optional:
        return {}
    if not isinstance(value, dict):
        raise BadReview(f"{what} must be an object", uid)
    return value


def _json_type(value: Any) -> str:
    """The JSON name of a decoded value's type (``null``, ``boolean``, ``number``, ``string``, ``array``,
    ``object``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "array", dict: "object"}.get(type(value), type(value).__name__)


def _shown(value: Any) -> str:
    """A field value for a message: a short string quoted, else its JSON type (``<missing>`` for None)."""
    if value is None:
        return "<missing>"
    if isinstance(value, str) and is_text(value):
        return json.dumps(value[:80])
    return f"<{_json_type(value)}>"


def is_text(value: str) -> bool:
    """Whether ``value`` is valid Unicode (no lone surrogate such as a JSON ``"\\ud800"`` escape)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _string(value: Any, what: str, uid: Optional[str]) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadReview(f"{what} must be a string", uid)
    if not is_text(value):
        raise BadReview(f"{what} must be valid Unicode text (it holds a lone surrogate)", uid)
    return value


def parse_review(body: Any) -> AdmissionRequest:
    """A decoded JSON body -> :class:`AdmissionRequest`. Raises :class:`BadReview`."""
    if not isinstance(body, dict):
        raise BadReview("the body must be an AdmissionReview object")
    request = body.get("request")
    uid = request.get("uid") if isinstance(request, dict) else None
    uid = uid if isinstance(uid, str) and uid and is_text(uid) else None
    if body.get("apiVersion") != API_VERSION or body.get("kind") != "AdmissionReview":
        raise BadReview(f"expected apiVersion {API_VERSION}, kind AdmissionReview; got apiVersion "
                        f"{_shown(body.get('apiVersion'))}, kind {_shown(body.get('kind'))}"
                        + (OLD_VERSION_HINT if body.get("apiVersion") in OLD_VERSIONS else ""), uid)
    if "request" not in body:
        raise BadReview("request is required: an AdmissionReview carries the object to judge in request "
                        "(uid, kind, operation, object)", uid)
    if not isinstance(request, dict):
        raise BadReview(f"request must be an object, got {_json_type(request)}", uid)
    if uid is None:
        raw = request.get("uid")
        if isinstance(raw, str) and raw and not is_text(raw):
            raise BadReview("request.uid must be valid Unicode text (it holds a lone surrogate)")
        raise BadReview("request.uid must be a non-empty string")
    kind = _mapping(request.get("kind"), "request.kind", uid, optional=False)
    for key in ("group", "version", "kind"):
        _string(kind.get(key), f"request.kind.{key}", uid)
    resource = _mapping(request.get("resource"), "request.resource", uid)
    operation = request.get("operation")
    if operation not in OPERATIONS:
        raise BadReview(f"request.operation must be one of {', '.join(OPERATIONS)}", uid)
    obj = _mapping(request.get("object"), "request.object", uid)
    old = _mapping(request.get("oldObject"), "request.oldObject", uid)
    if operation in ("CREATE", "CONNECT"):
        old = {}  # kube-apiserver sends none: a CREATE carrying one is not judged as an update
    if operation in ("CREATE", "UPDATE") and not obj:
        raise BadReview(f"request.object is required for {operation}", uid)
    meta = _mapping(obj.get("metadata"), "request.object.metadata", uid)
    _mapping(old.get("metadata"), "request.oldObject.metadata", uid)
    labels = _mapping(meta.get("labels"), "request.object.metadata.labels", uid)
    if any(not isinstance(v, str) for v in labels.values()):
        raise BadReview("request.object.metadata.labels values must be strings", uid)
    if not all(is_text(k) and is_text(v) for k, v in labels.items()):
        raise BadReview("request.object.metadata.labels must be valid Unicode text (a lone surrogate)", uid)
    return AdmissionRequest(
        uid=uid, kind=kind, resource=resource, operation=operation,
        name=_string(request.get("name"), "request.name", uid) or _string(
            meta.get("name"), "metadata.name", uid),
        namespace=_string(request.get("namespace"), "request.namespace", uid)
        or _string(meta.get("namespace"), "metadata.namespace", uid),
        object=obj, old_object=old, user=_mapping(request.get("userInfo"), "request.userInfo", uid))


def review_for(obj: dict, operation: str = "CREATE", old: Optional[dict] = None,
               uid: Optional[str] = None) -> dict:
    """An AdmissionReview v1 request for ``obj`` as kube-apiserver would send it (offline use).

    ``kind.group``/``version`` come from ``obj['apiVersion']``; ``resource`` is the lower-case
    plural of the kind; the namespace defaults to ``default`` for a namespaced object without one.
    """
    source = obj or old or {}
    api_version = str(source.get("apiVersion", "v1"))
    group, _, version = api_version.rpartition("/")
    kind = str(source.get("kind", ""))
    meta = source.get("metadata") or {}
    request: dict[str, Any] = {
        "uid": uid or str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": kind.lower() + "s"},
        "operation": operation,
        "name": meta.get("name", ""),
        "namespace": meta.get("namespace", "default" if kind in ("Pod", "Instance", "Setting") else ""),
        "userInfo": {"username": "accelpolicy-admit"},
        "object": None if operation == "DELETE" else obj,
        "oldObject": old,
        "dryRun": True,
    }
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "request": request}
