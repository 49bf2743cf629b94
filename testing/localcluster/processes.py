"""Child processes of the local cluster: a free loopback port, and a program run with its log file that
dies with its parent (Linux ``PR_SET_PDEATHSIG``)."""
from __future__ import annotations

import ctypes
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Mapping, Sequence


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    except OSError:
        pass


class ChildProcess:
    """One child process with its log file."""

    def __init__(self, name: str, argv: Sequence[str], log: Path, env: Mapping[str, str] | None = None):
        self.name, self.argv, self.log = name, list(argv), log
        self._log_file = open(log, "wb")
        self.popen = subprocess.Popen(
            self.argv, stdin=subprocess.DEVNULL, stdout=self._log_file, stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )

    def exited(self) -> int | None:
        return self.popen.poll()

    def stop(self, grace: float) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)
        self._log_file.close()
