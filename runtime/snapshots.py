"""Read a cluster snapshot from files: the I/O half of :class:`runtime.engine.snapshot.Snapshot`.

A path is a file, a directory (read recursively, following symlinked directories: ``*.yaml``,
``*.yml``, ``*.json``, in path order, so ``dir/base/...`` comes before ``dir/overlay.yaml``) or
``-`` for standard input. Documents may be multi-document YAML and ``kind: List`` (``items``); several
paths layer, a later object replacing an earlier one of the same kind and name, as a re-apply would
(an overlay file beside its base). Within one file, an object given twice is a mistake: the later one
is used and a warning names both items (docs/node-facts-robustness.md "Snapshot files"). Inside a
directory, what is not a regular file (a FIFO, a socket, a device) is skipped with a warning: reading
it could block forever. A path named directly is read whatever it is
(``--snapshot <(kubectl get ... -o yaml)`` is a pipe).
"""
from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Iterable, TextIO

import yaml

from runtime.engine.snapshot import Snapshot, SnapshotError, object_ref
from runtime.model.normalize import QuantityError, parse_quantity
from runtime.rules.yamlsrc import plain_documents

SUFFIXES = (".yaml", ".yml", ".json")


def _files(path: Path, warnings: list[str]) -> list[Path]:
    if path.is_dir():  # os.walk follows symlinked directories (a step fixture links its base)
        found = [Path(root) / name for root, _, names in os.walk(path, followlinks=True) for name in names]
        out = []
        for p in sorted(p for p in found if p.suffix in SUFFIXES):
            try:
                mode = p.stat().st_mode
            except OSError as exc:
                raise SnapshotError(f"{p}: cannot read: {exc}") from exc
            if stat.S_ISREG(mode):
                out.append(p)
            else:
                warnings.append(f"{p}: skipped: not a regular file")
        return out
    if path.exists():
        return [path]
    raise SnapshotError(f"{path}: no such file or directory")


# libyaml's parser when PyYAML was built with it: same safe constructor, ~10x faster (a 1,000-node
# snapshot of 3.8 MB: 3 s instead of 31 s).
class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml when installed: ~10x faster
    """Safe YAML that refuses a mapping with the same key twice (PyYAML would keep the last one;
    the API server refuses such a manifest)."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {seen[key]})", key_node.start_mark)
            try:
                seen[key] = key_node.start_mark.line + 1
            except TypeError:  # an unhashable key; the base constructor reports it
                break
        return super().construct_mapping(node, deep=deep)


_LOADER = _Loader


def _documents(text: str, origin: str) -> list:
    try:
        docs = [d for d in plain_documents(text, _LOADER, refuse_duplicates=True) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{origin}:{mark.line + 1}" if mark else origin
        problem = getattr(exc, "problem", None) or str(exc)
        raise SnapshotError(f"{where}: not valid YAML or JSON: {problem}") from exc
    out = []
    for doc in docs:
        if isinstance(doc, dict) and doc.get("kind") == "List" or (
                isinstance(doc, dict) and str(doc.get("kind", "")).endswith("List") and "items" in doc):
            items = doc.get("items") or []
            if not isinstance(items, list):
                raise SnapshotError(f"{origin}: {doc.get('kind')} items must be a list")
            out.extend(items)
        else:
            out.append(doc)
    return out


def read_objects(paths: Iterable[str | Path], stdin: TextIO | None = None,
                 warnings: list[str] | None = None) -> tuple[list[dict], list[str]]:
    """All objects of ``paths`` in order, with the origin file of each (for error messages).

    ``warnings`` (when given) receives a line for each file skipped (see the module docstring)."""
    warnings = [] if warnings is None else warnings
    objects: list[dict] = []
    origins: list[str] = []
    for raw in paths:
        if str(raw) == "-":
            text = (stdin or sys.stdin).read()
            docs = _documents(text, "<stdin>")
            objects.extend(docs)
            origins.extend(["<stdin>"] * len(docs))
            continue
        for file in _files(Path(raw), warnings):
            try:
                text = file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise SnapshotError(f"{file}: cannot read: {exc}") from exc
            docs = _documents(text, str(file))
            objects.extend(docs)
            origins.extend([str(file)] * len(docs))
    return objects, origins


def load_snapshot(paths: Iterable[str | Path], stdin: TextIO | None = None) -> Snapshot:
    """Build a Snapshot from files. Raises SnapshotError naming the file and object at fault.

    Its ``warnings`` name skipped files, objects of kinds accelpolicy does not use and objects given
    twice in one file."""
    warnings: list[str] = []
    objects, origins = read_objects(list(paths), stdin, warnings)
    merged: list = []
    position: dict[str, int] = {}
    seen: dict[tuple[str, str, str], tuple[str, int]] = {}  # (kind, namespace, name) -> (origin, item)
    for obj, origin in zip(objects, origins):
        item = position[origin] = position.get(origin, -1) + 1  # the object's place in its file
        snap = Snapshot.from_objects([obj], origin=origin, first_item=item)
        warnings.extend(snap.warnings)
        if snap.warnings:
            continue
        problem = _quantity_problem(obj)
        if problem:
            raise SnapshotError(f"{origin}: {object_ref(obj)}: {problem}")
        merged.append(obj)
        for kind, keys in snap.objects.items():
            for namespace, name in keys:
                first = seen.get((kind, namespace, name))
                if first is not None and first[0] == origin:
                    ref = f"{kind} {namespace + '/' if namespace else ''}{name}"
                    warnings.append(f"{origin}: {ref} appears twice (items {first[1]} and {item}); "
                                    f"the later one is used")
                seen[(kind, namespace, name)] = (origin, item)
    result = Snapshot.from_objects(merged, origin="snapshot")
    return Snapshot(objects=result.objects, warnings=tuple(warnings))


def _quantity_problem(obj: dict) -> str | None:
    """The first quantity derive reads that the API server would have refused, as ``field.path: ...``
    (Pod container resources, ClusterQueue ``status.flavorsReservation`` totals); None when all read.
    Only files need this: the API server validates quantities before it stores an object."""
    fields: list[tuple[str, object]] = []
    if obj.get("kind") == "Pod":
        spec = obj.get("spec") or {}
        for group in ("initContainers", "containers"):
            for i, container in enumerate(spec.get(group) or [] if isinstance(spec, dict) else []):
                resources = (container or {}).get("resources") if isinstance(container, dict) else None
                for part in ("limits", "requests"):
                    values = (resources or {}).get(part) if isinstance(resources, dict) else None
                    for name, value in (values or {}).items() if isinstance(values, dict) else ():
                        fields.append((f"spec.{group}[{i}].resources.{part}.{name}", value))
    elif obj.get("kind") == "ClusterQueue":
        status = obj.get("status") or {}
        for i, flavor in enumerate(
                status.get("flavorsReservation") or [] if isinstance(status, dict) else []):
            for j, res in enumerate(
                    (flavor or {}).get("resources") or [] if isinstance(flavor, dict) else []):
                if isinstance(res, dict) and res.get("total") is not None:
                    fields.append((f"status.flavorsReservation[{i}].resources[{j}].total", res["total"]))
    for path, value in fields:
        try:
            parse_quantity(value)
        except QuantityError as exc:
            return f"{path}: {exc}"
    return None
