"""One read of a live cluster for the one-shot commands (``get``, ``derive``, ``explain``, ``admit``,
``audit``, ``snapshot``): each kind a command needs listed once, page by page, and nothing else.

:func:`list_cluster` lists every kind of a :class:`Needs` with ``limit``/``continue`` (``page_size``
objects a page, four kinds at a time), the settings Secret only by name (one ``get`` of it in its
namespace: no other Secret is ever read), and drops ``metadata.managedFields`` (the API server's
field ownership record, read by no code here nor by any rule). Unlike the watch caches
(:mod:`runtime.kube.cache`) nothing is watched: the command reads the cluster as it is now.

Errors are the API server's, in its words (docs/tasks/ask-the-cluster.md):

* a kind whose CRD is not installed is not an error: it is named in :attr:`ClusterRead.missing`
  and reads as empty, so the caller can say what it still answers without it;
* a ``403 Forbidden`` list raises :class:`ListForbidden` carrying the verb, resource, API group and
  namespace the identity lacks;
* an unreachable server raises :class:`runtime.kube.session.KubeApiError` (status 0, ``Unreachable``).
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from runtime.kube.session import KubeApiError, Session


@dataclass(frozen=True)
class Needs:
    """What a command reads: ``kinds`` (``KNOWN_KINDS`` names, Secrets excluded) and, when
    ``settings`` is ``(namespace, name)``, that one Secret."""

    kinds: tuple[str, ...]
    settings: tuple[str, str] | None = None


@dataclass
class ClusterRead:
    """The result of :func:`list_cluster`: ``objects`` (plain dicts, kind and apiVersion set, no
    managedFields), ``missing`` (kinds the server does not serve), ``requests`` (HTTP requests sent,
    discovery excluded)."""

    objects: list[dict] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    requests: int = 0


class ListForbidden(RuntimeError):
    """The server refused a list (403): ``verb``, ``resource`` (plural), ``group`` ("" for core),
    ``namespace`` (None: cluster-wide or every namespace), ``name`` (the one object asked for, else None)
    and the server's ``message``."""

    def __init__(self, verb: str, resource: str, group: str, namespace: str | None, name: str | None,
                 message: str):
        self.verb, self.resource, self.group, self.namespace, self.name = (verb, resource, group, namespace,
                                                                           name)
        self.message = message
        super().__init__(message)


def stripped(obj: dict) -> dict:
    """``obj`` less ``metadata.managedFields`` (a shallow copy of the object and its metadata)."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or "managedFields" not in meta:
        return obj
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


def _pages(session: Session, kind: str, path: str, page_size: int, read: ClusterRead) -> list[dict]:
    items: list[dict] = []
    cont = None
    while True:
        page = session.call("get", path, query={"limit": page_size, **({"continue": cont} if cont else {})})
        read.requests += 1
        api_version = page.get("apiVersion", "v1")
        for obj in page.get("items") or []:
            obj.setdefault("kind", kind)
            obj.setdefault("apiVersion", api_version)
            items.append(stripped(obj))
        cont = (page.get("metadata") or {}).get("continue")
        if not cont:
            return items


def _list_one(session: Session, ref, page_size: int, read: ClusterRead) -> None:
    try:
        read.objects.extend(_pages(session, ref.kind, ref.path(), page_size, read))
    except KubeApiError as exc:
        if exc.status == 403:
            group = ref.api_version.split("/")[0] if "/" in ref.api_version else ""
            raise ListForbidden("list", ref.plural, group, None, None, exc.message) from exc
        raise


def list_cluster(session: Session, needs: Needs, page_size: int = 500, workers: int = 4) -> ClusterRead:
    """Every object of ``needs`` as the server holds it now (see the module docstring): the kinds
    resolved one after another (discovery), then listed ``workers`` at a time; the objects in the
    order of ``needs.kinds``, the settings Secret last.

    Raises :class:`ListForbidden` (403) or :class:`KubeApiError` (any other failure, status 0 when
    the server cannot be reached), for the first kind in that order that failed."""
    read = ClusterRead()
    refs = []
    for kind in needs.kinds:
        if kind == "Secret":
            continue
        try:
            refs.append(session.ref(kind))
        except KubeApiError as exc:
            if exc.status != 404:
                raise
            read.missing.append(kind)
    parts = [ClusterRead() for _ in refs]
    with ThreadPoolExecutor(max(1, min(workers, len(refs)))) as pool:
        futures = [pool.submit(_list_one, session, ref, page_size, part) for ref, part in zip(refs, parts)]
    for future, part in zip(futures, parts):
        future.result()
        read.objects.extend(part.objects)
        read.requests += part.requests
    if needs.settings is not None:
        _get_settings(session, *needs.settings, read)
    return read


def _get_settings(session: Session, namespace: str, name: str, read: ClusterRead) -> None:
    """GET the one settings Secret (absent: nothing added; the derivation then uses the defaults)."""
    ref = session.ref("Secret")
    try:
        secret = session.call("get", ref.path(namespace=namespace, name=name))
    except KubeApiError as exc:
        if exc.status == 403:
            raise ListForbidden("get", "secrets", "", namespace, name, exc.message) from exc
        if exc.status == 404:
            return
        raise
    finally:
        read.requests += 1
    secret.setdefault("kind", "Secret")
    secret.setdefault("apiVersion", "v1")
    read.objects.append(stripped(secret))
