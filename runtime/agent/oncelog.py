"""The agent's problem log (:class:`OnceLog`): a problem said once per topic, its recovery once, never a
line per tick; its listeners (the agent's metrics, runtime/agent/metrics.py) hear every occurrence."""
from __future__ import annotations

from typing import Callable

from loguru import logger


class OnceLog:
    """Logs each distinct problem once per topic and its recovery once (never a log per tick)."""

    def __init__(self) -> None:
        self._current: dict[str, str] = {}
        self.listeners: list[Callable[[str, str], None]] = []  # told of every problem (topic, level): metrics

    def problem(self, topic: str, message: str, level: str = "ERROR") -> None:
        for listener in self.listeners:
            listener(topic, level)
        if self._current.get(topic) != message:
            self._current[topic] = message
            logger.log(level, "{}: {}", topic, message)

    def healthy(self, topic: str) -> bool:
        """Whether ``topic`` has no current problem."""
        return topic not in self._current

    def ok(self, topic: str) -> None:
        if self._current.pop(topic, None) is not None:
            logger.info("{}: recovered", topic)
