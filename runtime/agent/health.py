"""The agent's health endpoints for kubelet probes (the DaemonSet's liveness/readiness).

``/healthz``: 200 while the reconcile loop keeps passing (the last pass, good or bad, ended less
than ``stale_seconds`` ago; 200 during the first ``stale_seconds`` after start too), else 503.
``/readyz``: 200 once the last pass succeeded (its objects were written), else 503. Plain HTTP from
the standard library's threading server: the Pod network only carries the kubelet's probes here.
``/metrics``: the agent's Prometheus metrics (:mod:`runtime.agent.metrics`) when a registry is given.
"""
from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest


class PassClock:
    """When the agent's reconcile passes ended and whether the last one succeeded (monotonic s)."""

    def __init__(self, stale_seconds: float):
        self.stale_seconds = stale_seconds
        self.started = time.monotonic()
        self.last_end: float | None = None
        self.last_ok = False

    def passed(self, ok: bool) -> None:
        """Record the end of one pass."""
        self.last_end, self.last_ok = time.monotonic(), ok

    def live(self) -> tuple[bool, str]:
        """Whether the loop is alive, and why (one line)."""
        since = time.monotonic() - (self.last_end if self.last_end is not None else self.started)
        if since < self.stale_seconds:
            return True, f"last pass {since:.0f}s ago" if self.last_end is not None else "starting"
        return False, f"no reconcile pass for {since:.0f}s (limit {self.stale_seconds:g}s)"

    def ready(self) -> tuple[bool, str]:
        """Whether the last pass succeeded, and why (one line)."""
        if self.last_end is None:
            return False, "no reconcile pass yet"
        return (True, "last pass succeeded") if self.last_ok else (False, "last pass failed (see the log)")


def serve_health(clock: PassClock, host: str = "0.0.0.0", port: int = 8081,
                 metrics=None) -> ThreadingHTTPServer:
    """Serve ``/healthz`` and ``/readyz`` of ``clock`` (and ``/metrics`` of the CollectorRegistry
    ``metrics``, when given) in a daemon thread; returns the server (``server_address[1]`` is the bound
    port; ``shutdown()`` stops it). Raises OSError when the port cannot be bound."""
    checks = {"/healthz": clock.live, "/readyz": clock.ready}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            if metrics is not None and self.path.split("?")[0] == "/metrics":
                return self._send(200, CONTENT_TYPE_LATEST, generate_latest(metrics))
            check = checks.get(self.path.split("?")[0])
            ok, why = check() if check else (False, f"unknown path {self.path}")
            self._send(200 if ok else (503 if check else 404), "text/plain; charset=utf-8",
                       (why + "\n").encode())

        def _send(self, code: int, content_type: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # probes every few seconds: no access log
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="agent-health", daemon=True).start()
    return server
