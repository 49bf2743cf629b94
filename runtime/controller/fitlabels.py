"""Fit label patches written outside the reconcile that planned them.

A fit label patch (docs/agent.md "Capacity and fit labels") is one independent merge patch of one Node's
labels; a pass over a large cluster plans hundreds (619 at 1,000 nodes, 3,023 at 5,000). Written inside the
pass, they held every event behind them for seconds. :class:`FitLabelWriter` takes them from the
controller's loop and writes them on its own threads, ``workers`` at a time, one batch after the
other, while the loop goes on serving events:

- batches run in the order they were handed over, so two patches of one Node land in that order; a
  patch superseded by a later one for the same Node before its turn is not sent;
- a patch handed over is not planned again by a pass whose snapshot still holds its Node as the
  patch was planned against (:meth:`FitLabelWriter.fresh`): its write or its echo is on its way, and
  a pass in that window writes nothing twice. The snapshot's Node counts, not the watch cache's: a
  pass derives from a snapshot taken when it starts, and echoes reach the cache while it runs (at
  10,000 nodes, judged by the cache, 100-190 echoes a pass were planned again from the pass's older
  snapshot and written twice: about 1,100 extra Node patches at the start);
- a failed patch is forgotten and ``on_error`` is called (the controller marks itself dirty, so the
  next pass plans it again).

Each batch logs one line: ``fit labels: N patches, E errors in S s``.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from loguru import logger

from runtime.engine.plan import Action
from runtime.kube.session import KubeApiError


class FitLabelWriter:
    """Writes fit label patches (``Action``s on kind ``Node``) in the background.

    ``write(action)``: sends one patch (raises ``KubeApiError``/``RuntimeError`` on failure);
    ``workers``: patches in flight at once; ``on_error(message)``: called after a failed patch. The
    ``seen(name)`` arguments of :meth:`fresh` and :meth:`submit` give a Node as the pass that planned
    saw it (its snapshot's object; None when absent).
    """

    def __init__(self, write: Callable[[Action], None], workers: int, on_error: Callable[[str], None]):
        self._write, self._on_error = write, on_error
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="fit-labels")
        self._batches = ThreadPoolExecutor(1, thread_name_prefix="fit-batches")
        self._lock = threading.Lock()
        # Node -> (patch body, resourceVersion planned against)
        self._sent: dict[str, tuple[dict, str | None]] = {}
        self._latest: dict[str, int] = {}  # Node -> sequence number of its latest patch
        self._seq = 0
        self._pending = 0
        self._idle = threading.Condition(self._lock)
        self.written = 0
        self.failed = 0

    @staticmethod
    def _version(seen: Callable[[str], dict | None], name: str) -> str | None:
        return ((seen(name) or {}).get("metadata") or {}).get("resourceVersion")

    def fresh(self, actions: list[Action], seen: Callable[[str], dict | None]) -> list[Action]:
        """``actions`` (planned from the Nodes ``seen`` gives) less the fit label patches already handed
        over with the same body and planned against the same resourceVersion of their Node (their write
        or its echo is on its way). Patches whose Node has moved on in ``seen`` are forgotten."""
        with self._lock:
            for name in [n for n, (_, version) in self._sent.items() if version != self._version(seen, n)]:
                del self._sent[name]
            return [a for a in actions if a.kind != "Node" or self._sent.get(a.name, (None,))[0] != a.body]

    def submit(self, actions: list[Action], seen: Callable[[str], dict | None]) -> int:
        """Hand over one batch of fit label patches, planned from the Nodes ``seen`` gives; returns how
        many (the pass does not wait)."""
        if not actions:
            return 0
        items = []
        with self._lock:
            for action in actions:
                self._seq += 1
                self._latest[action.name] = self._seq
                self._sent[action.name] = (action.body, self._version(seen, action.name))
                items.append((action, self._seq))
            self._pending += 1
        self._batches.submit(self._run_batch, items)
        return len(items)

    def _run_batch(self, items: list[tuple[Action, int]]) -> None:
        t0 = time.monotonic()
        try:
            results = list(self._pool.map(lambda item: self._send(*item), items))
            logger.info("fit labels: {} patches, {} errors in {:.3f}s", results.count(True),
                        results.count(False), time.monotonic() - t0)
        finally:
            with self._lock:
                self._pending -= 1
                self._idle.notify_all()

    def _send(self, action: Action, seq: int) -> bool | None:
        """True written, False failed, None superseded by a later patch of the same Node."""
        with self._lock:
            if self._latest.get(action.name) != seq:
                return None
        try:
            self._write(action)
        except (KubeApiError, RuntimeError) as exc:
            with self._lock:
                self.failed += 1
                if self._latest.get(action.name) == seq:
                    self._sent.pop(action.name, None)
            message = f"{action.verb} Node {action.name}: {exc}"
            logger.warning("fit labels: {}", message)
            self._on_error(message)
            return False
        with self._lock:
            self.written += 1
        return True

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every batch handed over is done; False when ``timeout`` seconds passed first."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def close(self) -> None:
        """Finish the batches handed over, then stop the threads."""
        self._batches.shutdown(wait=True)
        self._pool.shutdown(wait=True)
