"""Critical XID events from NVML (docs/concepts/out-of-service.md "Health"): an NVML event set registered for
``nvmlEventTypeXidCriticalError`` on every device, waited on with a timeout by the agent's own thread.

:class:`XidEvents` runs that thread; :meth:`XidEvents.drain` hands the probe the XIDs read since the last
call, per device UUID (rules/health.yaml decides which of them make a device unhealthy). The thread holds
its own ``nvmlInit`` (NVML counts them, so the probe's own init and shutdown do not disturb it), checks its
stop flag between waits and frees the set and shuts NVML down when it stops. A device that cannot register
(``NVML_ERROR_NOT_SUPPORTED``: an old GPU) is left out and named in :attr:`XidEvents.unregistered`; a
failing wait is logged once and retried after a pause.
"""
from __future__ import annotations

import threading
from typing import Any

from loguru import logger


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def is_timeout(exc: BaseException) -> bool:
    """Whether a pynvml error is ``NVML_ERROR_TIMEOUT`` (the wait's ordinary end)."""
    return type(exc).__name__ == "NVMLError_Timeout" or getattr(exc, "value", None) == 10


class XidEvents:
    """The XID event thread of one process. ``nv``: the pynvml module (a stand-in in tests);
    ``wait_ms``: one wait's timeout (rules/health.yaml ``nvml.waitMilliseconds``)."""

    def __init__(self, nv: Any, wait_ms: int = 1000):
        self.nv, self.wait_ms = nv, wait_ms
        self.registered: list[str] = []     # device UUIDs whose critical XIDs the set receives
        self.unregistered: dict[str, str] = {}   # device UUID -> why it could not register
        self.error: str | None = None       # why the thread could not start or stopped
        self._events: dict[str, list[int]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, timeout: float = 10.0) -> bool:
        """Start the thread and wait until the set is registered; False (and :attr:`error` says why) when
        NVML or the event set cannot start."""
        self._thread = threading.Thread(target=self._run, name="nvml-xid-events", daemon=True)
        self._thread.start()
        self._ready.wait(timeout)
        return self.error is None and self._ready.is_set()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread (it ends within one wait)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def drain(self) -> dict[str, list[int]]:
        """UUID -> the XIDs read since the last call (read once)."""
        with self._lock:
            out, self._events = self._events, {}
        return out

    def _register(self, event_set: Any) -> None:
        nv = self.nv
        for index in range(int(nv.nvmlDeviceGetCount())):
            handle = nv.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(nv.nvmlDeviceGetUUID(handle))
            try:
                nv.nvmlDeviceRegisterEvents(handle, nv.nvmlEventTypeXidCriticalError, event_set)
                self.registered.append(uuid)
            except Exception as exc:  # NVML_ERROR_NOT_SUPPORTED on GPUs without XID events
                self.unregistered[uuid] = str(exc)
                logger.warning("NVML device {} ({}): critical XID events not registered: {}", index, uuid,
                               exc)

    def _run(self) -> None:
        nv = self.nv
        try:
            nv.nvmlInit()
        except Exception as exc:
            self.error = f"nvmlInit failed: {exc}"
            self._ready.set()
            return
        event_set = None
        try:
            event_set = nv.nvmlEventSetCreate()
            self._register(event_set)
            self._ready.set()
            self._loop(event_set)
        except Exception as exc:
            self.error = f"NVML event set: {exc}"
            logger.warning("NVML critical XID events not read: {}", exc)
            self._ready.set()
        finally:
            if event_set is not None:
                try:
                    nv.nvmlEventSetFree(event_set)
                except Exception:  # freeing a half-made set is best effort
                    pass
            try:
                nv.nvmlShutdown()
            except Exception:
                pass

    def _loop(self, event_set: Any) -> None:
        nv, failing = self.nv, None
        while not self._stop.is_set():
            try:
                data = nv.nvmlEventSetWait_v2(event_set, self.wait_ms)
            except Exception as exc:
                if is_timeout(exc):
                    continue
                if str(exc) != failing:
                    failing = str(exc)
                    logger.warning("NVML event wait failed, retrying: {}", exc)
                self._stop.wait(self.wait_ms / 1000)
                continue
            failing = None
            try:
                uuid = _text(nv.nvmlDeviceGetUUID(data.device))
            except Exception:
                uuid = ""
            with self._lock:
                self._events.setdefault(uuid, []).append(int(data.eventData))
            logger.warning("NVML device {}: critical XID {}", uuid or "(unknown)", int(data.eventData))
