"""Watching a rules directory (docs/rule-authoring.md "4. Hot reload"): its content hash, and a new set
loaded when it changes.

:class:`RulesWatcher` polls a rules directory for a change of content: a digest of every rule file's
path and bytes, read through symlinks, so an edit in place and a mounted ConfigMap's ``..data``
symlink swap (kubelet writes a new ``..<timestamp>`` directory, then renames ``..data`` to it) both
count, while a half-written directory never does (the swap is one rename). On a change it loads the
set with :func:`runtime.rules.loader.load_rules` (the same static checks as ``accelpolicy lint``):

- success: the new :class:`RuleSet` (a new ``generation``) is handed to ``on_swap`` and becomes
  :attr:`RulesWatcher.current` unless ``on_swap`` returns False (its reload gate refused or holds it); callers
  swap whole objects built from it (one assignment each), so a request sees either the old generation or the
  new one, never a mix;
- failure: ``on_refused`` gets the :class:`RuleLoadError` (every ``file:line:col`` problem) and the
  working generation keeps serving. The same broken content is not retried until it changes.

The watcher does I/O (file reads) but no network; what a change leads to is the caller's
(:class:`runtime.reload.holder.RulesHolder`). A generation is named by its content hash
(:func:`content_hash`, the same in every process that reads the same files; :func:`generation_id` its
short form in Events, metrics and logs), never by a count kept per process.
"""
from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from loguru import logger

from runtime.rules.loader import RuleLoadError, RuleSet, iter_rule_files, load_rules


#: hex digits of the content hash that name a generation (as a short git or image id does)
ID_LENGTH = 12


def content_hash(root: Path) -> str:
    """sha256 (hex) over (relative path, content) of every rule file under ``root`` (ConfigMap ``..``
    entries are read through their symlinks, never listed twice); "" when the directory is missing."""
    if not root.is_dir():
        return ""
    digest = hashlib.sha256()
    for path in iter_rule_files(root):
        try:
            data = path.read_bytes()
        except OSError:
            data = b"\0unreadable"
        digest.update(str(path.relative_to(root)).encode() + b"\0" + data + b"\0")
    return digest.hexdigest()


def generation_id(digest: str) -> str:
    """The name of the generation with content hash ``digest``: its first :data:`ID_LENGTH` hex digits
    (``-`` for none)."""
    return digest[:ID_LENGTH] or "-"


class Periodic:
    """A daemon thread calling :meth:`tick` every ``interval`` seconds until :meth:`stop` (``first``: also
    once at start, as soon as :meth:`ready` returns); an exception in a tick is logged and the next tick
    runs."""

    interval: float = 2.0
    first: bool = False
    name: str = "periodic"

    def tick(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def start(self):
        """Start the thread (nothing when ``interval`` is 0); returns self."""
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        if self.interval > 0:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        if getattr(self, "_thread", None) is not None:
            self._stop.set()
            self._thread.join(5.0)

    def ready(self, stop: threading.Event) -> bool:
        """Wait until the first tick may run (at once here); False when ``stop`` was set meanwhile."""
        return not stop.is_set()

    def _run(self) -> None:
        if not self.ready(self._stop):
            return
        if self.first or not self._stop.wait(self.interval):
            while True:
                try:
                    self.tick()
                except Exception as exc:  # noqa: BLE001 - the next tick retries
                    logger.exception("{}: {}", self.name, exc)
                if self._stop.wait(self.interval):
                    return


class RulesWatcher(Periodic):
    """Poll ``root`` every ``interval`` seconds; see the module docstring.

    ``current`` is the RuleSet in force (``initial``, or loaded at construction); ``seen``: its content
    hash when it was loaded from elsewhere (the serving copy): the directory's differing content is then a
    change at the first poll. ``reloads`` and
    ``failures`` count outcomes; ``last_error`` is the latest refusal (None after a success);
    ``last_seconds`` how long the latest load took.
    """

    def __init__(self, root: Path | str, on_swap: Callable[[RuleSet], None],
                 on_refused: Callable[[RuleLoadError], None] | None = None, interval: float = 2.0,
                 initial: Optional[RuleSet] = None, on_idle: Callable[[], None] | None = None,
                 seen: Optional[str] = None):
        self.root = Path(root)
        self.on_idle = on_idle
        self.on_swap = on_swap
        self.on_refused = on_refused or (lambda exc: None)
        self.interval = interval
        self._seen = content_hash(self.root) if seen is None else seen   # of ``initial`` (another copy)
        self.current = initial if initial is not None else load_rules(self.root)
        self.reloads = 0
        self.failures = 0
        self.last_error: Optional[RuleLoadError] = None
        self.last_seconds = 0.0
        self.name = "rules-watcher"

    @property
    def seen(self) -> str:
        """The content hash of the rules last loaded or refused (during ``on_swap``: the set being tried)."""
        return self._seen

    def poll(self) -> Optional[bool]:
        """Check once: None when nothing changed (or the files changed again while they were read: the
        next check loads them once they hold still), True after a swap, False after a refusal (the
        loader's, or ``on_swap``'s returning False).

        A directory swapped while it is read (a ConfigMap update's ``..data`` link, an operator's
        ``mv``) gives a content hash of neither generation; loading only when the content hash taken
        after the load equals the one before keeps one edit one reload."""
        seen = content_hash(self.root)
        if seen == self._seen:
            return None
        started = time.perf_counter()
        try:
            ruleset = load_rules(self.root)
        except RuleLoadError as exc:
            if content_hash(self.root) != seen:
                return None
            self._seen = seen
            self.last_seconds = time.perf_counter() - started
            self.failures += 1
            self.last_error = exc
            self.on_refused(exc)
            return False
        if content_hash(self.root) != seen:
            return None
        self._seen = seen
        self.last_seconds = time.perf_counter() - started
        self.last_error = None
        if self.on_swap(ruleset) is False:   # the caller's reload gate refused it (or holds it)
            return False
        self.current = ruleset
        self.reloads += 1
        return True

    def tick(self) -> None:
        """One poll; when nothing changed, ``on_idle`` (a generation waiting for its verdict)."""
        if self.poll() is None and self.on_idle is not None:
            self.on_idle()
