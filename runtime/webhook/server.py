"""Running the webhook app over HTTPS (uvicorn), in the foreground or in a background thread.

:func:`self_signed` makes a development CA and a serving certificate for 127.0.0.1/localhost with
``trustme`` (built on ``cryptography``) and writes ``ca.crt``, ``tls.crt``, ``tls.key`` into a
directory. :class:`ServerThread` serves on a socket bound to 127.0.0.1 (port 0 = any free port) and
is what the controller serves with (and the tests).
"""
from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Optional

import uvicorn


def self_signed(directory: Path | str, names: tuple[str, ...] = ("127.0.0.1", "localhost")) -> dict[str, Path]:
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


def _config(app, certfile: Optional[str], keyfile: Optional[str], log_level: str) -> uvicorn.Config:
    return uvicorn.Config(app, ssl_certfile=certfile, ssl_keyfile=keyfile, log_level=log_level,
                          access_log=False, lifespan="off", timeout_keep_alive=30)


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


def serve(app, sock, certfile: Optional[str], keyfile: Optional[str], log_level: str = "warning") -> None:
    """Serve ``app`` on the already bound ``sock`` (see :func:`bind`) in the foreground until interrupted."""
    server = uvicorn.Server(_config(app, certfile, keyfile, log_level))
    server.run(sockets=[sock])


class ServerThread:
    """``app`` served over HTTPS (or HTTP without cert) by uvicorn in a daemon thread.

    ``start()`` returns once the server accepts connections (raises RuntimeError after 10 s);
    ``url`` is ``https://127.0.0.1:<port>``; ``stop()`` shuts it down.
    """

    def __init__(self, app, certfile: Optional[str] = None, keyfile: Optional[str] = None,
                 host: str = "127.0.0.1", port: int = 0):
        self.sock = bind(host, port)
        self.port = self.sock.getsockname()[1]
        self.url = f"{'https' if certfile else 'http'}://{host}:{self.port}"
        self.server = uvicorn.Server(_config(app, certfile, keyfile, "warning"))
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

    def stop(self) -> None:
        """Ask uvicorn to exit, join the thread, close the listening socket."""
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()
