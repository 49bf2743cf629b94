"""A scripted API server for controller tests without one: lists every kind from a dict, watches that
idle (or end with 410 Gone), and writes answered with the object written (a new resourceVersion).

``fail_lists``: kinds whose list answers 503; ``slow_lists``: kind -> seconds a list takes; ``expire``:
kinds whose next watch ends with 410 Gone; ``writes``: ``(method, path)`` of every write received.
Writes change the stored objects (a JSON merge patch of the body; a delete removes), so a later list sees them.
"""
from __future__ import annotations

import copy
import threading

from runtime.engine.snapshot import KNOWN_KINDS
from runtime.kube.session import KubeApiError, ResourceRef


def merge(target, patch):
    """RFC 7386 JSON merge patch of ``patch`` onto ``target`` (a new object; None deletes a key)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


class IdleStream:
    """A watch that yields nothing for 0.2 s and ends (or yields one 410 ``ERROR`` event)."""

    def __init__(self, stop: threading.Event, gone: bool):
        self.stop, self.gone = stop, gone

    def __iter__(self):
        if self.gone:
            yield {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
            return
        self.stop.wait(0.2)

    def close(self):
        pass

    def abort(self):
        pass


class ScriptedApi:
    """See the module docstring; ``objects``: kind -> items."""

    def __init__(self, objects: dict[str, list[dict]]):
        self.objects = objects
        self.fail_lists: set[str] = set()
        self.slow_lists: dict[str, float] = {}
        self.expire: set[str] = set()
        self.stop = threading.Event()
        self.version = 1
        self.writes: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def ref(self, kind):
        api_version, namespaced = KNOWN_KINDS.get(kind, ("v1", False))
        return ResourceRef(kind, api_version, kind, namespaced)

    def _parse(self, path: str) -> tuple[str, str, str | None, str | None]:
        """``(kind, namespace, name, subresource)`` of a path :class:`ResourceRef` built (plural = kind)."""
        parts = path.strip("/").split("/")
        parts = parts[2:] if parts[0] == "api" else parts[3:]
        namespace = ""
        if parts[0] == "namespaces" and len(parts) > 2:
            namespace, parts = parts[1], parts[2:]
        return parts[0], namespace, (parts[1] if len(parts) > 1 else None), (parts[2] if len(parts) > 2 else None)

    def _next(self) -> str:
        with self._lock:
            self.version += 1
            return str(self.version)

    def _find(self, kind: str, namespace: str, name: str) -> dict | None:
        return next((o for o in self.objects.get(kind, []) if o["metadata"]["name"] == name
                     and (o["metadata"].get("namespace") or "") == namespace), None)

    def call(self, method, path, query=None, body=None, **_):
        kind, namespace, name, _sub = self._parse(path)
        if method == "get":
            if name is not None:
                found = self._find(kind, namespace, name)
                if found is None:
                    raise KubeApiError(404, "NotFound", f"{kind} {name} not found")
                return dict(found)
            if kind in self.fail_lists:
                raise KubeApiError(503, "ServiceUnavailable", "scripted")
            if kind in self.slow_lists:
                self.stop.wait(self.slow_lists[kind])
            return {"apiVersion": "v1", "items": [dict(o) for o in self.objects.get(kind, [])],
                    "metadata": {"resourceVersion": self._next()}}
        self.writes.append((method, path))
        with self._lock:
            return self._write(method, kind, namespace, name, body)

    def _write(self, method, kind, namespace, name, body):
        """A write on the stored objects (the body merged in: enough for a pass's echo)."""
        items = self.objects.setdefault(kind, [])
        found = self._find(kind, namespace, name or (body or {}).get("metadata", {}).get("name", ""))
        if method == "delete":
            if found is not None:
                items.remove(found)
            return found or {}
        obj = copy.deepcopy(found or {"metadata": {"name": name, "namespace": namespace}})
        if isinstance(body, dict):  # merge patch, apply, create (a JSON patch: unchanged, a new version)
            obj = merge(obj, body)
        obj["metadata"].setdefault("name", name)
        if namespace:
            obj["metadata"]["namespace"] = namespace
        self.version += 1
        obj["metadata"].update(resourceVersion=str(self.version),
                               uid=obj["metadata"].get("uid") or f"uid-{kind}-{obj['metadata']['name']}")
        if found is not None:
            items.remove(found)
        items.append(obj)
        return dict(obj)

    def stream(self, path, query, timeout):
        kind = self._parse(path)[0]
        gone = kind in self.expire
        self.expire.discard(kind)
        return IdleStream(self.stop, gone)
