"""kubectl-style tables: the columns `kubectl get KIND` prints for the kinds accelpolicy derives.

Layout as kubectl's tabwriter prints it: upper-case headers, left-aligned cells, three spaces
between columns, no trailing blanks. Rendering is tabulate's, with a kubectl table format.
Column sets: docs/getting-started.md "Step 1: read the initial pools" (our CRDs' printer columns) and Kueue's
own printer columns.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from tabulate import DataRow, TableFormat, tabulate

KUBECTL_FORMAT = TableFormat(lineabove=None, linebelowheader=None, linebetweenrows=None, linebelow=None,
                             headerrow=DataRow("", "   ", ""), datarow=DataRow("", "   ", ""),
                             padding=0, with_header_hide=None)


def _path(obj: dict, path: str):
    value = obj
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True)
class Column:
    """A printer column: header and how to read the cell; ``wide`` columns show with ``-o wide``."""

    header: str
    read: Callable[[dict], object]
    wide: bool = False


def field(header: str, path: str, wide: bool = False, default: object = None) -> Column:
    """A column reading a dotted JSON path (``status.summary.unit``)."""
    return Column(header, lambda obj: _path(obj, path) if _path(obj, path) is not None else default, wide)


def human_duration(seconds: float) -> str:
    """A duration as kubectl's AGE column prints it (apimachinery ``duration.HumanDuration``):
    ``45s``, ``3m20s``, ``42m``, ``5h10m``, ``30h``, ``3d4h``, ``120d``, ``2y10d``; ``<invalid>`` for
    more than a second in the future (clock skew up to that reads ``0s``)."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes, hours = s // 60, s // 3600
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 24 * 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if hours < 24 * 365 * 2:
        return f"{days}d"
    if hours < 24 * 365 * 8:
        return f"{days // 365}y{days % 365}d" if days % 365 else f"{days // 365}y"
    return f"{days // 365}y"


def age_of(obj: dict, now: float | None = None) -> str:
    """The AGE cell: the time since ``metadata.creationTimestamp`` (RFC 3339, as the API server
    writes it), ``<unknown>`` when the object has none (an object derived but not yet created, or a
    snapshot file written without it)."""
    import time
    from datetime import datetime

    stamp = (obj.get("metadata") or {}).get("creationTimestamp")
    if not isinstance(stamp, str):
        return "<unknown>"
    try:
        created = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return "<unknown>"
    return human_duration((time.time() if now is None else now) - created)


AGE = Column("AGE", age_of)


@dataclass(frozen=True)
class KindTable:
    """The names kubectl accepts for a kind, and its columns."""

    kind: str
    plural: str
    names: tuple[str, ...]
    columns: tuple[Column, ...]


KINDS: tuple[KindTable, ...] = (
    KindTable("ResourceFlavor", "resourceflavors",
              ("resourceflavor", "resourceflavors", "flavor", "flavors", "rf"),
              (field("NAME", "metadata.name"), AGE)),
    KindTable("ClusterQueue", "clusterqueues", ("clusterqueue", "clusterqueues", "cq"),
              (field("NAME", "metadata.name"), field("COHORT", "spec.cohortName"),
               field("PENDING WORKLOADS", "status.pendingWorkloads", default=0),
               field("ADMITTED WORKLOADS", "status.admittedWorkloads", wide=True, default=0))),
    KindTable("LocalQueue", "localqueues", ("localqueue", "localqueues", "queue", "queues", "lq"),
              (field("NAME", "metadata.name"), field("CLUSTERQUEUE", "spec.clusterQueue"),
               field("PENDING WORKLOADS", "status.pendingWorkloads", default=0),
               field("ADMITTED WORKLOADS", "status.admittedWorkloads", default=0))),
    KindTable("AdmissionCheck", "admissionchecks", ("admissioncheck", "admissionchecks", "ac"),
              (field("NAME", "metadata.name"), AGE)),
    KindTable("InstanceType", "instancetypes", ("instancetype", "instancetypes", "instype"),
              (field("NAME", "metadata.name"), field("ENTRANCE", "status.entrance"),
               field("UNIT(CPU/RAM)/STORAGE", "status.summary.unit"),
               field("ACCELERATOR(EX/SH/SL/PT)", "status.summary.accelerator"),
               field("CPU", "status.summary.cpu"), field("PHASE", "status.phase"),
               field("PARTITIONS", "status.summary.partitions", wide=True))),
    KindTable("InstanceTypeFlavor", "instancetypeflavors",
              ("instancetypeflavor", "instancetypeflavors", "instypeflavor"),
              (field("NAME", "metadata.name"), field("GENERALGROUP", "spec.generalGroup"),
               field("ACCELERATORGROUP", "spec.acceleratorGroup"),
               field("ACCELERATABLE", "spec.acceleratable"), field("MANUFACTURER", "spec.manufacturer"),
               field("PRODUCT", "spec.product"), field("MEMORY", "spec.memory"), field("CORES", "spec.cores"),
               field("SLICEABLE", "spec.sliceable"))),
    KindTable("Devices", "devices", ("devices", "device", "devs"),
              (field("NAME", "metadata.name"), Column("AGE", age_of, wide=True))),
)


class UnknownKindError(KeyError):
    """A kind name kubectl would not resolve among the kinds accelpolicy prints."""


def resolve_kind(name: str) -> KindTable:
    """kubectl spelling (singular, plural, short name; any case; `.group` suffix allowed) -> table."""
    key = name.lower().split(".", 1)[0]
    for table in KINDS:
        if key in table.names:
            return table
    known = ", ".join(t.plural for t in KINDS)
    raise UnknownKindError(f'the server doesn\'t have a resource type "{name}" (accelpolicy knows: {known})')


def cells(table: KindTable, obj: dict, wide: bool = False) -> dict[str, str]:
    """Header -> cell of ``obj`` in ``table`` (AGE left out: it is the object's, not a derived value)."""
    return {c.header: _cell(c.read(obj)) for c in table.columns if (wide or not c.wide) and c.header != "AGE"}


def drift(table: KindTable, held: Sequence[dict], derived: Sequence[dict], wide: bool = False) -> tuple[
        list[dict], list[str]]:
    """What the cluster holds now, each row marked where the derived state differs
    (docs/tasks/ask-the-cluster.md): ``(objects, marks)``, objects in name order, ``marks[i]`` "" when
    object ``i`` is as derived, ``derived: HEADER=value, ...`` (the cells the controller would change),
    ``missing: derived, not in the cluster`` (the derived object is listed in its place) or
    ``not derived: deleted on reconcile``."""
    def key(obj: dict) -> tuple[str, str]:
        meta = obj.get("metadata") or {}
        return meta.get("namespace") or "", meta.get("name") or ""

    want = {key(o): o for o in derived}
    have = {key(o): o for o in held}
    objects, marks = [], []
    for k in sorted(set(want) | set(have)):
        if k not in have:
            objects.append(want[k])
            marks.append("missing: derived, not in the cluster")
            continue
        objects.append(have[k])
        if k not in want:
            marks.append("not derived: deleted on reconcile")
            continue
        got, should = cells(table, have[k], wide), cells(table, want[k], wide)
        changed = [f"{h}={should[h] or '<none>'}" for h in should if should[h] != got.get(h)]
        marks.append(f"derived: {', '.join(changed)}" if changed else "")
    return objects, marks


def render(table: KindTable, objects: Sequence[dict], wide: bool = False, headers: bool = True,
           marks: Sequence[str] | None = None) -> str:
    """The table text (no trailing newline); "No resources found" when ``objects`` is empty. ``marks``
    (one per object, :func:`drift`) add a last ``DRIFT`` column when any is not empty."""
    if not objects:
        return "No resources found"
    columns = [c for c in table.columns if wide or not c.wide]
    rows = [[_cell(c.read(obj)) for c in columns] for obj in objects]
    header = [c.header for c in columns]
    if marks and any(marks):
        rows = [row + [mark] for row, mark in zip(rows, marks)]
        header.append("DRIFT")
    if headers:  # as a data row: tabulate pads header cells by a minimum that kubectl does not
        rows.insert(0, header)
    text = tabulate(rows, tablefmt=KUBECTL_FORMAT, stralign="left", numalign="left", disable_numparse=True)
    return "\n".join(line.rstrip() for line in text.splitlines())
