"""Audit results and the report objects they become (docs/audit.md).

One vocabulary: ``pass|fail|warn|error|skip`` (openreports.io's ``result`` enum). A :class:`Result`
names its policy, rule, object, message and field path. :func:`reports` groups results into
openreports.io/v1alpha1 ``Report`` objects (one per namespace) and one ``ClusterReport`` (cluster-scoped
objects), each with ``summary`` counts; :func:`table` renders them for a terminal. Pure: no clock (no
``timestamp``), no I/O.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from dataclasses import field as dc_field
from typing import Iterable

from tabulate import tabulate

from runtime.engine.snapshot import KNOWN_KINDS
from runtime.report.tables import KUBECTL_FORMAT

RESULT_KINDS = ("pass", "fail", "warn", "error", "skip")
REPORTS_API = "openreports.io/v1alpha1"


@dataclass(frozen=True)
class ObjectRef:
    """The object a result is about (``namespace`` "" for cluster-scoped kinds)."""

    kind: str
    name: str
    namespace: str = ""
    api_version: str = ""
    uid: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace + '/' if self.namespace else ''}{self.name}"

    @classmethod
    def of(cls, obj: dict) -> "ObjectRef":
        """The reference of a Kubernetes object (apiVersion defaults from the known kinds)."""
        meta = obj.get("metadata") or {}
        kind = str(obj.get("kind", ""))
        return cls(kind=kind, name=str(meta.get("name", "")), namespace=str(meta.get("namespace") or ""),
                   api_version=str(obj.get("apiVersion") or KNOWN_KINDS.get(kind, ("",))[0]),
                   uid=str(meta.get("uid") or ""))


@dataclass(frozen=True)
class Result:
    """One finding: ``result`` is one of :data:`RESULT_KINDS`; ``properties`` are strings (openreports)."""

    policy: str
    rule: str
    result: str
    resource: ObjectRef
    message: str
    field: str = ""
    properties: dict = dc_field(default_factory=dict, compare=False, hash=False)

    def as_dict(self) -> dict:
        """The JSON form of ``-o json``: flat keys, the object as ``{kind, namespace, name}``."""
        out = asdict(self)
        out["resource"] = {"kind": self.resource.kind, "namespace": self.resource.namespace,
                           "name": self.resource.name}
        return out


def summary(results: Iterable[Result]) -> dict[str, int]:
    """Counts per result kind, every kind present (0 when none), in :data:`RESULT_KINDS` order."""
    counts = dict.fromkeys(RESULT_KINDS, 0)
    for r in results:
        counts[r.result] += 1
    return counts


def _entry(r: Result, source: str) -> dict:
    resource = {"apiVersion": r.resource.api_version, "kind": r.resource.kind, "name": r.resource.name}
    if r.resource.namespace:
        resource["namespace"] = r.resource.namespace
    if r.resource.uid:
        resource["uid"] = r.resource.uid
    properties = {k: str(v) for k, v in r.properties.items()}
    if r.field:
        properties["field"] = r.field
    entry = {"source": source, "policy": r.policy, "rule": r.rule, "result": r.result, "message": r.message,
             "scored": True, "resources": [resource]}
    if properties:
        entry["properties"] = properties
    return entry


def reports(results: list[Result], name: str, source: str, labels: dict | None = None) -> list[dict]:
    """openreports.io ``Report`` per namespace (namespace order) then the ``ClusterReport``.

    Every report holds its results in (kind, namespace, name, policy, rule) order and a ``summary``
    with all five counts. A ClusterReport is emitted even when empty (it says the cluster was audited).
    """
    by_ns: dict[str, list[Result]] = {}
    for r in results:
        by_ns.setdefault(r.resource.namespace, []).append(r)
    by_ns.setdefault("", [])
    out = []
    for ns in sorted(by_ns, key=lambda n: (n == "", n)):
        items = sorted(by_ns[ns], key=_order)
        meta: dict = {"name": name}
        if ns:
            meta["namespace"] = ns
        if labels:
            meta["labels"] = dict(labels)
        out.append({"apiVersion": REPORTS_API, "kind": "Report" if ns else "ClusterReport", "metadata": meta,
                    "source": source, "summary": summary(items),
                    "results": [_entry(r, source) for r in items]})
    return out


def _order(r: Result) -> tuple:
    return (r.resource.kind, r.resource.namespace, r.resource.name, r.policy, r.rule, r.field, r.message)


def ordered(results: Iterable[Result]) -> list[Result]:
    """Results in report order: object (kind, namespace, name), then policy, rule, field."""
    return sorted(results, key=_order)


def table(results: list[Result], show_pass: bool = False) -> str:
    """kubectl-style table (RESULT, POLICY, RULE, OBJECT, FIELD, MESSAGE) and a summary line.

    ``pass`` and ``skip`` rows are left out unless ``show_pass``; the summary counts them all.
    """
    rows = [(r.result, r.policy, r.rule, str(r.resource), r.field, r.message) for r in ordered(results)
            if show_pass or r.result not in ("pass", "skip")]
    counts = summary(results)
    line = ", ".join(f"{counts[k]} {k}" for k in RESULT_KINDS)
    if not rows:
        return line
    text = tabulate(rows, headers=["RESULT", "POLICY", "RULE", "OBJECT", "FIELD", "MESSAGE"],
                    tablefmt=KUBECTL_FORMAT, disable_numparse=True)
    return "\n".join(line_.rstrip() for line_ in text.splitlines()) + "\n" + line
