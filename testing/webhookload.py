"""A webhook server in its own process and hostile-client helpers, for tests and benchmarks/robustness.py.

:class:`WebhookProcess` starts ``accelpolicy webhook --webhook-self-signed`` on 127.0.0.1 (a free port) and
reads its resident memory from ``/proc``. The review builders make *unique* objects (every review
differs, so memos cannot answer from an earlier one). Loopback only; every client is bounded in time.
"""
from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import httpx

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = ROOT / "tests" / "fixtures" / "seed" / "common"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WebhookProcess:
    """``accelpolicy webhook`` in a child process with its own self-signed CA under ``directory``.

    ``extra`` are more command-line options (``--webhook-read-timeout 2``). Use as a context manager.
    """

    def __init__(self, directory: Path, extra: tuple[str, ...] = (), snapshot: Path = SNAPSHOT):
        self.dir = Path(directory)
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        cmd = [str(Path(sys.executable).parent / "accelpolicy"), "webhook", "--webhook-self-signed", str(self.dir),
               "--webhook-port", str(self.port), "--snapshot", str(snapshot), *extra]
        self.stderr = open(self.dir.parent / f"{self.dir.name}.stderr", "w+b") if self.dir.parent.exists() else None
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.stderr or subprocess.DEVNULL, cwd=ROOT)
        self.ctx: Optional[ssl.SSLContext] = None

    def __enter__(self) -> "WebhookProcess":
        self.wait_ready()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def wait_ready(self, timeout: float = 120) -> ssl.SSLContext:
        """Block until ``/readyz`` answers 200; returns an SSL context trusting the server's CA."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"webhook exited with {self.proc.returncode}: {self.log()}")
            if (self.dir / "ca.crt").exists():
                ctx = ssl.create_default_context(cafile=str(self.dir / "ca.crt"))
                try:
                    if httpx.get(self.url + "/readyz", verify=ctx, timeout=2).status_code == 200:
                        self.ctx = ctx
                        return ctx
                except httpx.HTTPError:
                    pass
            time.sleep(0.1)
        raise RuntimeError(f"webhook not ready after {timeout} s")

    def client(self, timeout: float = 30) -> httpx.Client:
        """A keep-alive HTTPS client for this server."""
        return httpx.Client(base_url=self.url, verify=self.ctx, timeout=timeout)

    def rss_bytes(self) -> int:
        """Resident set size of the server process (``VmRSS`` in /proc), in bytes."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def log(self) -> str:
        """What the server wrote to stderr so far."""
        if self.stderr is None:
            return ""
        self.stderr.flush()
        return Path(self.stderr.name).read_text(errors="replace")

    def stop(self) -> None:
        """Terminate the server (kill after 10 s)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.stderr is not None:
            self.stderr.close()


def large_instance_review(i: int, size_bytes: int) -> bytes:
    """A unique Instance CREATE review of about ``size_bytes`` (the bulk in ``spec.env`` values)."""
    per = 16 * 1024
    count = max(1, size_bytes // (per + 32))
    env = [{"name": f"V{j}", "value": f"{i:08d}-{j:04d}-" + "x" * (per - 14)} for j in range(count)]
    obj = {"apiVersion": "worker.gpustack.ai/v1", "kind": "Instance",
           "metadata": {"name": f"big-{i}", "namespace": "default"},
           "spec": {"type": "cpu-4c8g", "image": "ubuntu:24.04", "env": env,
                    "volume": {"ephemeral": {"capacity": "1Gi"}}}}
    return review_bytes(obj, f"big-{i}")


def volumes_instance(count: int, name: str = "vols") -> dict:
    """An Instance with ``count`` configMap ``additionalVolumes`` at distinct mount paths."""
    vols = [{"mountPath": f"/mnt/v{j}", "configMap": {"name": f"cm-{j}"}} for j in range(count)]
    return {"apiVersion": "worker.gpustack.ai/v1", "kind": "Instance",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"type": "cpu-4c8g", "image": "ubuntu:24.04", "additionalVolumes": vols,
                     "volume": {"ephemeral": {"capacity": "1Gi"}}}}


def review_bytes(obj: dict, uid: str, operation: str = "CREATE") -> bytes:
    """The AdmissionReview v1 JSON of ``obj`` as kube-apiserver would send it."""
    group, _, version = obj["apiVersion"].rpartition("/")
    request = {"uid": uid, "kind": {"group": group, "version": version, "kind": obj["kind"]},
               "resource": {"group": group, "version": version, "resource": obj["kind"].lower() + "s"},
               "operation": operation, "name": obj["metadata"]["name"],
               "namespace": obj["metadata"].get("namespace", ""), "userInfo": {"username": "load"},
               "object": obj, "oldObject": None}
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()


def held_seconds(port: int, payload: bytes, limit: float, tls: Optional[ssl.SSLContext] = None) -> float:
    """Connect, send ``payload``, then nothing; seconds until the server closes the connection
    (``inf`` when still open after ``limit`` seconds)."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=limit)
    sock = tls.wrap_socket(raw, server_hostname="127.0.0.1") if tls is not None else raw
    started = time.monotonic()
    sock.settimeout(limit)
    try:
        sock.sendall(payload)
        while sock.recv(4096):
            pass
    except socket.timeout:
        return float("inf")
    except (ConnectionResetError, ssl.SSLError, OSError):
        pass
    finally:
        sock.close()
    return time.monotonic() - started
