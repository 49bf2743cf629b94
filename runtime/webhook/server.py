"""Running the webhook app over HTTPS (uvicorn on httptools and uvloop) in a background thread
(:class:`ServerThread`; :class:`runtime.webhook.host.WebhookServer` serves with it).

Slow clients: every request must arrive whole (headers and body) within ``read_timeout`` seconds
(default 10, kube-apiserver's own webhook timeout) of its first byte, or of the connection opening
for the first request; otherwise the connection is closed (:class:`ReadDeadlineProtocol`). A request
line plus headers over 64 KiB is answered 400 and closed. Idle
keep-alive connections close after ``timeout_keep_alive`` (120 s: longer than kube-apiserver keeps an
idle webhook connection, :data:`DEFAULT_KEEP_ALIVE`). At most ``max_connections``
(default 512) connections and requests are served at once; beyond that uvicorn answers 503.

:func:`self_signed` makes a development CA and a serving certificate for 127.0.0.1/localhost with
``trustme`` (built on ``cryptography``) and writes ``ca.crt``, ``tls.crt``, ``tls.key`` into a
directory. :class:`ServerThread` serves on a socket bound to 127.0.0.1 by default (port 0 = any free
port).

Shutting down (:meth:`ServerThread.stop` with ``drain_seconds``): kube-apiserver keeps its keep-alive
connections to a Pod after the Pod left the Service's endpoints (an established connection stays with
its Pod), and a server that closes an idle one races the next POST on it (``failed to call webhook:
... EOF``; Go does not retry a POST). So for ``drain_seconds`` first every response carries
``Connection: close`` (:class:`Draining`): each connection still in use is closed by the client after
its answer, and its next review opens a connection to a Pod that stays; then the server stops.
"""
from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Optional

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

DEFAULT_READ_TIMEOUT = 10.0
DEFAULT_MAX_CONNECTIONS = 512
# Idle keep-alive connections close after this many seconds: longer than the 90 s kube-apiserver's webhook
# client keeps an idle connection (client-go's transport takes http.DefaultTransport's IdleConnTimeout,
# k8s.io/apimachinery/pkg/util/net SetTransportDefaults), so the client always closes first. A server that
# closes first races the client's next POST on that connection, which Go does not retry: the review fails
# with "failed to call webhook: ... EOF" (measured by the fault suite: 8 of ~1,300 reviews at 5 s).
DEFAULT_KEEP_ALIVE = 120
MAX_HEADER_BYTES = 64 * 1024  # request line + headers; a review's size is in its body


class ReadDeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a whole-request read deadline and a header size cap.

    The deadline is armed when the connection opens and whenever request bytes arrive or a request
    starts, and disarmed once the request (headers and body) has been received; if it passes first
    the connection is closed (the app sees a disconnect). A request line plus headers over
    :data:`MAX_HEADER_BYTES` is a parse error: uvicorn answers 400 "Invalid HTTP request received."
    and closes, as it does for h11's incomplete-event limit. ``read_timeout`` is a class attribute
    set by :func:`protocol_with_deadline`.
    """

    read_timeout: float = DEFAULT_READ_TIMEOUT

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadline = None
        self._header_bytes = 0
        self._arm()

    def _arm(self) -> None:
        if getattr(self, "_deadline", None) is None:
            self._deadline = self.loop.call_later(self.read_timeout, self._expired)

    def _disarm(self) -> None:
        if getattr(self, "_deadline", None) is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.logger.debug("closing a connection from %s: request not received within %gs",
                              self.client, self.read_timeout)
            self.transport.close()

    def _count_header_bytes(self, size: int) -> None:
        self._header_bytes += size
        if self._header_bytes > MAX_HEADER_BYTES:
            raise ValueError(f"request line and headers exceed {MAX_HEADER_BYTES} bytes")

    def data_received(self, data: bytes) -> None:
        self._arm()
        super().data_received(data)

    def on_message_begin(self) -> None:
        self._arm()
        self._header_bytes = 0
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        self._count_header_bytes(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_header_bytes(len(name) + len(value) + 4)
        super().on_header(name, value)

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)


def protocol_with_deadline(read_timeout: float) -> type[ReadDeadlineProtocol]:
    """A :class:`ReadDeadlineProtocol` subclass whose whole-request read deadline is ``read_timeout`` s."""
    return type("ReadDeadlineProtocol", (ReadDeadlineProtocol,), {"read_timeout": float(read_timeout)})


def self_signed(directory: Path | str,
                names: tuple[str, ...] = ("127.0.0.1", "localhost")) -> dict[str, Path]:
    """Write a fresh CA (``ca.crt``) and a leaf certificate for ``names`` (``tls.crt``, ``tls.key``).

    Returns the three paths by role (``ca``, ``cert``, ``key``).
    """
    import trustme

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    leaf = ca.issue_cert(*names)
    paths = {"ca": out / "ca.crt", "cert": out / "tls.crt", "key": out / "tls.key"}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    leaf.private_key_pem.write_to_path(str(paths["key"]))
    with open(paths["cert"], "wb") as fh:
        for blob in leaf.cert_chain_pems:
            fh.write(blob.bytes())
    paths["key"].chmod(0o600)
    return paths


def server_config(app, certfile: Optional[str], keyfile: Optional[str], log_level: str = "warning",
                  read_timeout: float = DEFAULT_READ_TIMEOUT,
                  max_connections: int = DEFAULT_MAX_CONNECTIONS) -> uvicorn.Config:
    """The uvicorn configuration every webhook server runs with: TLS from ``certfile``/``keyfile``
    (plain HTTP when None), httptools with :class:`ReadDeadlineProtocol`, uvloop, no access log,
    ``max_connections`` (see the module docstring)."""
    return uvicorn.Config(app, ssl_certfile=certfile, ssl_keyfile=keyfile, log_level=log_level,
                          access_log=False, lifespan="off", timeout_keep_alive=DEFAULT_KEEP_ALIVE,
                          http=protocol_with_deadline(read_timeout), limit_concurrency=max_connections,
                          loop="uvloop")


def bind(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A listening TCP socket (SO_REUSEADDR) on ``host:port``.

    ``proto`` must be IPPROTO_TCP: asyncio sets TCP_NODELAY on accepted connections only then, and
    without it every response (headers and body are written separately) waits ~40 ms for a delayed ACK.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    return sock


def check_tls(certfile: str, keyfile: str) -> None:
    """Load the serving certificate and key once, so a missing or malformed file is reported before
    serving. Raises OSError (missing file) or ssl.SSLError (not a PEM certificate/key pair)."""
    import ssl

    ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(certfile, keyfile)


class Draining:
    """ASGI wrapper of ``app``: once :attr:`draining` is set, every HTTP response gets the header
    ``Connection: close`` (uvicorn then closes the connection after sending it, and the client never
    sends another request on it)."""

    def __init__(self, app):
        self.app = app
        self.draining = threading.Event()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not self.draining.is_set():
            return await self.app(scope, receive, send)

        async def send_closing(message):
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers") or [] if k.lower() != b"connection"]
                message = {**message, "headers": headers + [(b"connection", b"close")]}
            await send(message)
        return await self.app(scope, receive, send_closing)


class ServerThread:
    """``app`` served over HTTPS (or HTTP without cert) by uvicorn in a daemon thread.

    ``read_timeout`` and ``max_connections``: see the module docstring.
    ``start()`` returns once the server accepts connections (raises RuntimeError after 10 s);
    ``url`` is ``https://127.0.0.1:<port>``; ``stop()`` shuts it down.
    """

    def __init__(self, app, certfile: Optional[str] = None, keyfile: Optional[str] = None,
                 host: str = "127.0.0.1", port: int = 0, read_timeout: float = DEFAULT_READ_TIMEOUT,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS):
        self.sock = bind(host, port)
        self.port = self.sock.getsockname()[1]
        self.url = f"{'https' if certfile else 'http'}://{host}:{self.port}"
        self.app = Draining(app)
        self.server = uvicorn.Server(server_config(self.app, certfile, keyfile, "warning", read_timeout,
                                                   max_connections))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def start(self) -> "ServerThread":
        """Start serving; returns self once connections are accepted (RuntimeError after 10 s)."""
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("webhook server did not start")
            time.sleep(0.01)
        return self

    def reload_tls(self, cert: Path | str, key: Path | str) -> None:
        """Load a new certificate and key into the running server's SSL context: connections accepted
        afterwards present it (a rotated serving certificate)."""
        self.server.config.ssl.load_cert_chain(str(cert), str(key))

    def stop(self, drain_seconds: float = 0.0) -> None:
        """Answer with ``Connection: close`` for ``drain_seconds`` (see the module docstring), then ask
        uvicorn to exit (requests in flight finish), join the thread, close the listening socket."""
        if drain_seconds > 0 and self.thread.is_alive():
            self.app.draining.set()
            time.sleep(drain_seconds)
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()
