"""An in-memory stand-in for runtime.kube.client.KubeClient (same method names and semantics)."""
from __future__ import annotations

import copy

from runtime.kube.client import owned_by


class FakeClient:
    def __init__(self, node: dict, secret: dict | None = None, pods: list | None = None):
        self.node = copy.deepcopy(node)
        self.secret = secret
        self.pods = pods or []
        self.objects: dict[tuple, dict] = {}
        self.events: list[tuple] = []
        self.calls: list[str] = []
        self.fail_with: Exception | None = None

    def _check(self):
        if self.fail_with is not None:
            raise self.fail_with

    def get_node(self, name):
        self._check()
        return copy.deepcopy(self.node)

    def get_custom(self, group, version, plural, name, namespace=None):
        self._check()
        obj = self.objects.get((plural, namespace, name))
        return copy.deepcopy(obj) if obj else None

    def get_secret(self, namespace, name):
        return self.secret

    def pods_on_node(self, node):
        return copy.deepcopy(self.pods)

    def upsert_custom(self, group, version, plural, desired, fields=("spec",)):
        key = (plural, desired["metadata"].get("namespace"), desired["metadata"]["name"])
        current = self.objects.get(key)
        body = {k: v for k, v in copy.deepcopy(desired).items() if k != "status"}
        if current is None:
            self.objects[key] = body
            self.calls.append(f"create {plural} {key[2]}")
            return "created", body
        same = current["metadata"].get("labels") == body["metadata"].get("labels") and \
            all(current.get(f) == body.get(f) for f in fields)
        if same:
            return "unchanged", current
        current["metadata"]["labels"] = body["metadata"]["labels"]
        for f in fields:
            current[f] = body[f]
        self.calls.append(f"replace {plural} {key[2]}")
        return "replaced", current

    def replace_custom_status(self, group, version, plural, name, status):
        obj = self.objects.get((plural, None, name))
        if obj is None or obj.get("status") == status:
            return False
        obj["status"] = copy.deepcopy(status)
        self.calls.append(f"status {plural} {name}")
        return True

    def delete_custom_owned(self, group, version, plural, name, namespace, owner_uid, owner_name):
        obj = self.objects.get((plural, namespace, name))
        if obj is None or not owned_by(obj, owner_uid, owner_name):
            return False
        del self.objects[(plural, namespace, name)]
        self.calls.append(f"delete {plural} {name}")
        return True

    def patch_node_annotations(self, name, annotations):
        self.node["metadata"].setdefault("annotations", {}).update(annotations)
        self.calls.append("annotate node")

    def patch_pod_annotations(self, namespace, name, annotations):
        for p in self.pods:
            if p["metadata"].get("namespace") == namespace and p["metadata"]["name"] == name:
                p["metadata"].setdefault("annotations", {}).update(annotations)
                self.calls.append(f"annotate pod {namespace}/{name}")
                return
        raise LookupError(f"no Pod {namespace}/{name}")

    def patch_node_status(self, name, status):
        for part in ("capacity", "allocatable"):
            self.node.setdefault("status", {}).setdefault(part, {}).update(status[part])
        self.calls.append("node status")

    def warn(self, involved, reason, message, component):
        self.events.append((involved["kind"], involved["name"], reason, message))
