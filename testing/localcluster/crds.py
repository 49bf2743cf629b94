"""CustomResourceDefinitions the tests and the demo install.

* Ours: the YAML files in ``crds/`` of the checkout (worker.gpustack.ai, gpustack.ai).
* Kueue's (``kueue.x-k8s.io``), NFD's (``nfd.k8s-sigs.io``) and the audit reports' (``openreports.io``,
  installed where the background audit runs): read from those projects' own Go
  modules at the versions pinned in ``e2e/crdsources/go.mod`` (hashes in its go.sum), fetched into
  Go's module cache with ``go mod download``; never copied into this tree.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Iterable

import yaml

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

from .binaries import LocalClusterError, repo_root
from .kubectl import Kubectl

KUEUE_MODULE = "sigs.k8s.io/kueue"
NFD_MODULE = "sigs.k8s.io/node-feature-discovery"
OPENREPORTS_MODULE = "github.com/openreports/reports-api"
#: CRD files inside each module (paths relative to the module root).
KUEUE_CRD_DIR = "config/components/crd/bases"
NFD_CRD_FILE = "deployment/base/nfd-crds/nfd-api-crds.yaml"
OPENREPORTS_CRD_DIR = "config/crd"


def _load_yaml_docs(path: Path) -> list[dict]:
    try:
        docs = [d for d in yaml.load_all(path.read_text(), Loader=_Loader) if d]
    except yaml.YAMLError as e:
        raise LocalClusterError(f"{path}: not valid YAML: {e}") from e
    for d in docs:
        if d.get("kind") != "CustomResourceDefinition":
            raise LocalClusterError(f"{path}: expected CustomResourceDefinition, found kind {d.get('kind')!r}")
    return docs


def module_dirs(sources: Path | None = None, modules: tuple[str, ...] = (KUEUE_MODULE, NFD_MODULE)) -> dict[str, Path]:
    """Download (if needed) the pinned ``modules`` (Kueue and NFD unless named); return
    ``{module path: directory}``.

    Runs ``go mod download -json`` in ``e2e/crdsources`` (``-mod=readonly``: go.sum must already
    hold the hashes). Raises :class:`LocalClusterError` with go's message when go is missing or the
    download fails.
    """
    sources = sources or repo_root() / "e2e" / "crdsources"
    env = dict(os.environ, GOFLAGS="-mod=readonly")
    try:
        proc = subprocess.run(["go", "mod", "download", "-json", *modules],
                              cwd=sources, capture_output=True, text=True, env=env, timeout=600)
    except FileNotFoundError as e:
        raise LocalClusterError("`go` not found on PATH; it is needed to fetch the Kueue/NFD CRDs") from e
    dirs: dict[str, Path] = {}
    decoder, text, pos = json.JSONDecoder(), proc.stdout, 0
    while pos < len(text.rstrip()):
        while text[pos].isspace():
            pos += 1
        info, pos = decoder.raw_decode(text, pos)
        if info.get("Error"):
            raise LocalClusterError(f"go mod download {info.get('Path')}: {info['Error']}")
        dirs[info["Path"]] = Path(info["Dir"])
    if proc.returncode != 0 or set(dirs) != set(modules):
        raise LocalClusterError(f"go mod download in {sources} failed: {proc.stderr.strip()}")
    return dirs


def _strip_conversion_webhook(crd: dict) -> dict:
    # Kueue's kustomize overlay adds a conversion webhook (config/components/crd/patches); the
    # bases we read carry none, but if a version ever does, its webhook cannot run here: serve every
    # version with strategy None instead (in memory only).
    conv = crd.get("spec", {}).get("conversion")
    if conv and conv.get("strategy") == "Webhook":
        crd["spec"]["conversion"] = {"strategy": "None"}
    return crd


def kueue_crds(dirs: dict[str, Path] | None = None) -> list[dict]:
    """Return Kueue's CRDs (ResourceFlavor, ClusterQueue, LocalQueue, AdmissionCheck, Workload, ...)."""
    dirs = dirs or module_dirs()
    base = dirs[KUEUE_MODULE] / KUEUE_CRD_DIR
    files = sorted(base.glob("*.yaml"))
    if not files:
        raise LocalClusterError(f"no CRD files in {base}")
    return [_strip_conversion_webhook(d) for f in files for d in _load_yaml_docs(f)]


def nfd_crds(dirs: dict[str, Path] | None = None) -> list[dict]:
    """Return NFD's CRDs (NodeFeature, NodeFeatureRule, NodeFeatureGroup)."""
    dirs = dirs or module_dirs()
    return _load_yaml_docs(dirs[NFD_MODULE] / NFD_CRD_FILE)


def openreports_crds() -> list[dict]:
    """Return the openreports.io Report and ClusterReport CRDs (what the background audit writes)."""
    directory = module_dirs(modules=(OPENREPORTS_MODULE,))[OPENREPORTS_MODULE] / OPENREPORTS_CRD_DIR
    files = sorted(directory.glob("*.yaml"))
    if not files:
        raise LocalClusterError(f"no CRD files in {directory}")
    return [d for f in files for d in _load_yaml_docs(f)]


def our_crds(directory: Path | None = None) -> list[dict]:
    """Return the CRDs in ``crds/`` (raises :class:`LocalClusterError` naming a bad file)."""
    directory = directory or repo_root() / "crds"
    files = sorted(directory.glob("*.yaml"))
    if not files:
        raise LocalClusterError(f"no CRD files in {directory}")
    return [d for f in files for d in _load_yaml_docs(f)]


def all_crds() -> list[dict]:
    """Kueue's, NFD's and ours, in that order."""
    dirs = module_dirs()
    return kueue_crds(dirs) + nfd_crds(dirs) + our_crds()


def install_crds(kubectl: Kubectl, crds: Iterable[dict], timeout: float = 60.0) -> list[str]:
    """Server-side apply ``crds`` and wait until each is Established; return their names.

    Server-side apply avoids the client-side last-applied annotation, which Kueue's large CRDs
    would overflow. Raises :class:`KubectlError` when apply or the wait fails.
    """
    crds = list(crds)
    stream = yaml.dump_all(crds, Dumper=_Dumper, sort_keys=False)
    kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=accelpolicy-tests",
            "-f", "-", input=stream, timeout=timeout + 60)
    names = [c["metadata"]["name"] for c in crds]
    kubectl("wait", "--for=condition=Established", f"--timeout={int(timeout)}s",
            *[f"crd/{n}" for n in names], timeout=timeout + 30)
    return names
