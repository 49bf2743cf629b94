"""The reviews a webhook server answered recently, kept in memory for the reload gate to replay a new
rules generation on (docs/rule-authoring.md "How a rules change goes live").

:class:`ReviewSample` holds the parsed AdmissionReview bodies (the ones the engine judged; malformed
bodies are not kept), most recent last, bounded by a count and by the bytes of their request bodies:
the oldest go first. It is never logged, written or served: :meth:`reviews` hands copies of the
references to the gate, in process. The bounds are the ``ReloadGate`` entries ``sampleReviews`` and
``sampleBytes`` of rules/reload.yaml (:meth:`resize` when a generation changes them).
"""
from __future__ import annotations

import threading
from collections import deque


class ReviewSample:
    """At most ``max_reviews`` reviews and ``max_bytes`` bytes of request bodies (0: keep none)."""

    def __init__(self, max_reviews: int = 200, max_bytes: int = 4 * 1024 * 1024):
        self.max_reviews, self.max_bytes = max_reviews, max_bytes
        self._held: deque[tuple[str, dict, int]] = deque()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._held)

    @property
    def bytes(self) -> int:
        """The request bytes held now."""
        return self._bytes

    def record(self, webhook: str, review: dict, size: int) -> None:
        """Keep ``review`` (parsed, ``size`` bytes as received) as answered by ``webhook`` (the policy name);
        a body larger than the whole bound is not kept."""
        if size > self.max_bytes or self.max_reviews <= 0:
            return
        with self._lock:
            self._held.append((webhook, review, size))
            self._bytes += size
            self._trim()

    def _trim(self) -> None:
        while self._held and (len(self._held) > self.max_reviews or self._bytes > self.max_bytes):
            self._bytes -= self._held.popleft()[2]

    def resize(self, max_reviews: int, max_bytes: int) -> None:
        """New bounds (the oldest reviews past them are dropped at once)."""
        with self._lock:
            self.max_reviews, self.max_bytes = max_reviews, max_bytes
            self._trim()

    def reviews(self) -> list[tuple[str, dict]]:
        """``(webhook, review)`` of every review held, oldest first."""
        with self._lock:
            return [(webhook, review) for webhook, review, _ in self._held]
