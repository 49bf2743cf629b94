"""kubectl-style tables: the columns `kubectl get KIND` prints for the kinds accelpolicy derives.

Layout as kubectl's tabwriter prints it: upper-case headers, left-aligned cells, three spaces
between columns, no trailing blanks. Rendering is tabulate's, with a kubectl table format.
Column sets: spec/pools.md §13 (our CRDs' printer columns) and Kueue's own printer columns.
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


AGE = Column("AGE", lambda obj: "<unknown>")


@dataclass(frozen=True)
class KindTable:
    """The names kubectl accepts for a kind, and its columns."""

    kind: str
    plural: str
    names: tuple[str, ...]
    columns: tuple[Column, ...]


KINDS: tuple[KindTable, ...] = (
    KindTable("ResourceFlavor", "resourceflavors", ("resourceflavor", "resourceflavors", "flavor", "flavors", "rf"),
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
    KindTable("InstanceTypeFlavor", "instancetypeflavors", ("instancetypeflavor", "instancetypeflavors", "instypeflavor"),
              (field("NAME", "metadata.name"), field("GENERALGROUP", "spec.generalGroup"),
               field("ACCELERATORGROUP", "spec.acceleratorGroup"), field("ACCELERATABLE", "spec.acceleratable"),
               field("MANUFACTURER", "spec.manufacturer"), field("PRODUCT", "spec.product"),
               field("MEMORY", "spec.memory"), field("CORES", "spec.cores"), field("SLICEABLE", "spec.sliceable"))),
    KindTable("Devices", "devices", ("devices", "device", "devs"),
              (field("NAME", "metadata.name"), Column("AGE", lambda obj: "<unknown>", wide=True))),
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


def render(table: KindTable, objects: Sequence[dict], wide: bool = False, headers: bool = True) -> str:
    """The table text (no trailing newline); "No resources found" when ``objects`` is empty."""
    if not objects:
        return "No resources found"
    columns = [c for c in table.columns if wide or not c.wide]
    rows = [[_cell(c.read(obj)) for c in columns] for obj in objects]
    if headers:  # as a data row: tabulate pads header cells by a minimum that kubectl does not
        rows.insert(0, [c.header for c in columns])
    text = tabulate(rows, tablefmt=KUBECTL_FORMAT, stralign="left", numalign="left", disable_numparse=True)
    return "\n".join(line.rstrip() for line in text.splitlines())
