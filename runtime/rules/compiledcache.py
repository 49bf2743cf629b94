"""The compiled-rules cache: a rules directory's parsed documents and CEL code objects, kept on disk
so the next process (or the next hot reload) with the same rule files skips YAML parsing, cel-python's
lark parser and transpiler, and the static checks (docs/performance.md "Fast to start, light to hold").

An entry is one file ``<key>.rules`` in the cache directory. ``key`` is the SHA-256 of:

- the rule files, in load order: each file's display name (``rules/pools/derivation.yaml``: it is
  part of every error message and ``where``) and its bytes;
- the versions of accelpolicy, cel-python and lark, Python's version (``marshal``'s format), and a
  digest of the source of the modules that shape the result (``runtime/rules``, ``runtime/model``,
  cel-python's package and grammar): a development checkout changes code without changing its
  version, and such a change must miss too.

What is stored is plain data and code only, never a pickled object: per file the documents' values
and their line and column maps (:class:`runtime.rules.yamlsrc.SourceDocument` without its text, which
is the file's own), and per distinct CEL source the Python code object cel-python's transpiler made of
it, all through :mod:`marshal`. Nothing of lark's trees or cel-python's classes is stored, so a new
cel-python or lark is a new key, never a stale object. An entry is written only for rules that loaded
without a single problem, so a hit never hides a lint finding; the loader still validates every
document with its pydantic model and links the vocabulary.

Layout of an entry: 8 magic bytes, the SHA-256 of the payload (32 bytes), the payload (``marshal`` of
``{"format", "key", "files", "code"}``). A damaged entry (truncated, bytes changed), a foreign one (a
file of another key or format) or one that cannot be rebuilt is ignored with ONE warning naming it,
and the rules are compiled again (and the entry rewritten): the cache can cost time, never change a
verdict. Writes go to a temporary file renamed into place, so readers never see half an entry; at most
:data:`KEEP` entries are kept (the oldest are removed).

The directory is trusted like ``__pycache__``: whoever can write it can change what the rules
evaluate, so it lives in the user's own cache directory (``$XDG_CACHE_HOME/accelpolicy/rules``,
default ``~/.cache/accelpolicy/rules``), ``--rules-cache DIR`` / ``ACCELPOLICY_RULES_CACHE`` elsewhere,
``--no-rules-cache`` / ``ACCELPOLICY_RULES_CACHE=off`` for none. ``ACCELPOLICY_RULES_CACHE`` may name
several directories (``:``-separated): entries are read from each in turn and written to the first.
The image ships an entry for its own rules, built when the image is built, in a read-only directory
it names second (deploy/image/Dockerfile).
"""
from __future__ import annotations

import functools
import hashlib
import marshal
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

FORMAT = "accelpolicy-rules-cache/1"
MAGIC = b"APRULES\x01"
SUFFIX = ".rules"
KEEP = 16
ENV = "ACCELPOLICY_RULES_CACHE"
OFF = ("off", "none", "false", "0", "no")


def default_directories() -> list[Path]:
    """Where rule loads look for entries, the first also where they write them: ``$ACCELPOLICY_RULES_CACHE``
    (directories separated by ``:``, as PATH; empty when it says off), else
    ``$XDG_CACHE_HOME/accelpolicy/rules``, else ``~/.cache/accelpolicy/rules``; none without a home."""
    env = os.environ.get(ENV, "").strip()
    if env:
        return [] if env.lower() in OFF else [Path(part) for part in env.split(os.pathsep) if part.strip()]
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except (RuntimeError, KeyError):  # no HOME and no passwd entry (a bare container user)
            return []
    return [Path(base) / "accelpolicy" / "rules"]


@functools.lru_cache(maxsize=1)
def code_identity() -> bytes:
    """The digest of everything besides the rule files that shapes an entry: the versions of
    accelpolicy, cel-python and lark, Python's, and the source of runtime/rules (its packages too),
    runtime/model and cel-python (computed once a process; a few milliseconds)."""
    import importlib.metadata

    import celpy
    import lark

    digest = hashlib.sha256(FORMAT.encode())

    def version(dist: str) -> str:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return "unknown"

    for part in (sys.version, sys.implementation.cache_tag or "", version("accelpolicy"),
                 version("cel-python"), getattr(lark, "__version__", version("lark"))):
        digest.update(part.encode() + b"\0")
    runtime_root = Path(__file__).resolve().parents[1]
    folders = [(runtime_root / "rules", "**/*.py"), (runtime_root / "rules" / "schemas", "*.json"),
               (runtime_root / "model", "*.py"), (Path(celpy.__file__).parent, "*.py"),
               (Path(celpy.__file__).parent, "*.lark")]
    for folder, pattern in folders:
        for path in sorted(folder.glob(pattern)):
            name = path.relative_to(folder).as_posix()
            digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.digest()


@dataclass
class Entry:
    """A cache hit: ``files`` maps each display name to its packed documents (:func:`pack_documents`);
    ``code`` maps each CEL source to its code object."""

    files: dict[str, bytes]
    code: dict[str, Any]
    path: Optional[Path] = None

    def documents(self, display: str) -> list[tuple]:
        """The documents of file ``display`` as ``(value, line, lines, spans)`` tuples, fresh objects
        on every call (a loaded rule set may be changed in place; the entry never is)."""
        packed = self.files.get(display)
        return marshal.loads(packed) if packed is not None else []


def pack_documents(documents: list) -> Optional[bytes]:
    """The parsed documents of one file (:class:`runtime.rules.yamlsrc.SourceDocument`) as the cache
    keeps them, taken before anything validates or links them; None when a value cannot be kept (a
    YAML timestamp or other type ``marshal`` does not write): such rules are not cached."""
    try:
        return marshal.dumps([(d.value, d.line, d.lines, d.spans) for d in documents])
    except ValueError:
        return None


class RulesCache:
    """The compiled-rules cache in ``directory`` (see the module docstring); ``warn`` receives the one
    message of a damaged or foreign entry."""

    def __init__(self, directory: Path | str, warn: Optional[Callable[[str], None]] = None,
                 read_also: tuple[Path | str, ...] = ()):
        self.directory = Path(directory)
        self.read_also = tuple(Path(d) for d in read_also)  # read-only seeds (the image's pre-built entries)
        self.warn = warn or _log_warning

    def key(self, files: list[tuple[str, bytes]]) -> str:
        """The entry key of rule files ``[(display name, bytes), ...]`` in load order (hex SHA-256)."""
        digest = hashlib.sha256(code_identity())
        for display, data in files:
            name = display.encode()
            digest.update(len(name).to_bytes(8, "big") + name + len(data).to_bytes(8, "big") + data)
        return digest.hexdigest()

    def path(self, key: str) -> Path:
        """Where the entry of ``key`` lives."""
        return self.directory / f"{key}{SUFFIX}"

    def load(self, key: str) -> Optional[Entry]:
        """The entry of ``key`` (from the first directory that has one); None when there is none or it is
        damaged or foreign (then one warning)."""
        for directory in (self.directory, *self.read_also):
            path = directory / f"{key}{SUFFIX}"
            try:
                blob = path.read_bytes()
                break
            except (FileNotFoundError, NotADirectoryError):  # no entry (or no directory) here
                continue
            except OSError as exc:
                self.damaged(path, f"cannot be read ({exc.strerror or exc})")
                return None
        else:
            return None
        head = len(MAGIC) + 32
        if len(blob) < head or blob[:len(MAGIC)] != MAGIC:
            self.damaged(path, "is not a compiled-rules entry of this format")
            return None
        payload = blob[head:]
        if hashlib.sha256(payload).digest() != blob[len(MAGIC):head]:
            self.damaged(path, "is truncated or damaged (its checksum does not match)")
            return None
        try:
            data = marshal.loads(payload)
        except (EOFError, ValueError, TypeError) as exc:
            self.damaged(path, f"cannot be decoded ({exc})")
            return None
        if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("key") != key:
            self.damaged(path, "belongs to other rules or another version (foreign entry)")
            return None
        files, code = data.get("files"), data.get("code")
        if not isinstance(files, dict) or not isinstance(code, dict):
            self.damaged(path, "is incomplete")
            return None
        return Entry(files=files, code=code, path=path)

    def damaged(self, path: Path, why: str) -> None:
        """Report a damaged or foreign entry once: it is ignored and the rules compiled again."""
        self.warn(f"compiled-rules cache entry {path} {why}: ignored, compiling the rules again")

    def save(self, key: str, files: dict[str, Optional[bytes]], code: dict[str, Any]) -> Optional[Path]:
        """Write the entry of ``key`` (``files``: display name -> :func:`pack_documents`) atomically;
        returns its path, or None when it is not written (a file that could not be packed, a read-only
        or missing directory): the cache is an optimisation, never a requirement."""
        if any(packed is None for packed in files.values()):
            return None
        try:
            payload = marshal.dumps({"format": FORMAT, "key": key, "files": files, "code": code})
        except ValueError:
            return None
        blob = MAGIC + hashlib.sha256(payload).digest() + payload
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=SUFFIX, dir=self.directory)
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(blob)
                os.chmod(tmp, 0o644)  # as a compiled module: readable by the image's non-root user
                os.replace(tmp, self.path(key))
            except BaseException:
                _remove(Path(tmp))
                raise
        except OSError:
            return None
        self._prune(keep=self.path(key))
        return self.path(key)

    def _prune(self, keep: Path) -> None:
        """Remove the oldest entries beyond :data:`KEEP` (never ``keep``, the one just written)."""
        try:
            entries = [
                (p.stat().st_mtime, p) for p in self.directory.glob(f"*{SUFFIX}")
                if not p.name.startswith(".")]
        except OSError:
            return
        entries.sort(reverse=True)
        for _, path in entries[KEEP:]:
            if path != keep:
                _remove(path)


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def _log_warning(message: str) -> None:
    from loguru import logger

    logger.warning(message)


_configured: Optional[tuple[list[Path], Optional[Callable[[str], None]]]] = None


def configure(directories: "list[Path] | Path | str | None",
              warn: Optional[Callable[[str], None]] = None) -> None:
    """Use ``directories`` (the first written, all read; one directory; None or []: no cache) for this
    process's rule loads; ``warn`` receives the warning of a damaged entry (default: the log). The CLI's
    ``--rules-cache``/``--no-rules-cache``."""
    global _configured
    if directories is None:
        directories = []
    elif isinstance(directories, (str, Path)):
        directories = [Path(directories)]
    _configured = ([Path(d) for d in directories], warn)


def reset() -> None:
    """Back to the default (:func:`default_directories`, read from the environment at each load)."""
    global _configured
    _configured = None


def active() -> Optional[RulesCache]:
    """The cache rule loads use now (None: off)."""
    directories, warn = _configured if _configured is not None else (default_directories(), None)
    return RulesCache(directories[0], warn, tuple(directories[1:])) if directories else None
