"""Where a kind node's kubelet sockets are, as seen from the host."""
from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path


def node_kubelet_dir(node: str) -> Path:
    """The host path of kind node ``node``'s /var/lib/kubelet (kind mounts an anonymous volume on /var).

    Raises ValueError when the container has no /var volume, CalledProcessError when docker fails.
    """
    mounts = json.loads(subprocess.run(["docker", "inspect", "-f", "{{json .Mounts}}", node], check=True,
                                       capture_output=True, text=True).stdout)
    var = next((m["Source"] for m in mounts if m["Destination"] == "/var"), None)
    if var is None:
        raise ValueError(f"container {node} has no /var volume (is it a kind node?)")
    return Path(var) / "lib" / "kubelet"


def short_link(target: Path) -> Path:
    """A fresh short symlink under /tmp to ``target``: unix socket paths are limited to 107 bytes, and a
    docker volume path is longer."""
    link = Path(tempfile.mkdtemp(prefix="kdp", dir="/tmp")) / "d"
    link.symlink_to(target)
    return link
