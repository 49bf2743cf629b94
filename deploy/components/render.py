"""Render Kueue's and NFD's own Helm charts, from their Go modules, for a cluster without a registry.

Kueue (``charts/kueue`` of ``sigs.k8s.io/kueue``) and NFD (``deployment/helm/node-feature-discovery``
of ``sigs.k8s.io/node-feature-discovery``) at the versions of e2e/components/versions.txt, located in
Go's module cache with ``go mod download -json`` (the same modules `make controlplane` builds the
binaries from). Images: ``accelpolicy.local/kueue:<version>`` and
``accelpolicy.local/node-feature-discovery:<version>`` (deploy/components/images.sh), never pulled.

Kueue's Configuration is the chart's default with accelpolicy's resource charging merged in
(``accelpolicy kueue-config``: docs/concepts/pools-and-flavors.md "Kueue's resource charging") and the ``pod`` integration; NFD runs nfd-master only
(no worker, gc or topology updater: the agent writes the NodeFeatures), accepting NodeFeatures from the
system namespace only (decision 20: ``restrictions.nodeFeatureNamespaceSelector``).

Usage: python deploy/components/render.py OUTDIR   -> OUTDIR/kueue.yaml, OUTDIR/nfd.yaml
Errors (no go, no helm, a module not found, a chart refusing its values) exit 2 with one message.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
IMAGE_PREFIX = "accelpolicy.local"
KUEUE_NAMESPACE = "kueue-system"
NFD_NAMESPACE = "node-feature-discovery"
SYSTEM_NAMESPACE = "gpustack-system"


class RenderError(RuntimeError):
    """A tool or module is missing, or a chart refused its values."""


def versions() -> dict[str, str]:
    """``{module: version}`` from e2e/components/versions.txt."""
    out = {}
    for line in (REPO / "e2e/components/versions.txt").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            module, version = line.split()[:2]
            out[module] = version
    return out


def module_dir(module: str, version: str) -> Path:
    """The module's directory in Go's module cache (downloaded through the Go proxy when missing)."""
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(["go", "mod", "download", "-json", f"{module}@{version}"], cwd=tmp,
                              capture_output=True, text=True, env=None)
    if proc.returncode != 0:
        raise RenderError(f"go mod download {module}@{version}: {proc.stderr.strip() or proc.stdout.strip()}")
    return Path(json.loads(proc.stdout)["Dir"])


def helm_binary() -> str:
    path = subprocess.run(["bash", str(REPO / "deploy/tools/build.sh"), "--print", "helm"], check=True,
                          capture_output=True, text=True).stdout.strip()
    if not Path(path).is_file():
        raise RenderError(f"helm is not built ({path}): run `make helm`")
    return path


def template(chart: Path, release: str, namespace: str, values: dict) -> list[dict]:
    """``helm template --include-crds`` of ``chart`` with ``values``; the documents, a Namespace first."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as fh:
        yaml.safe_dump(values, fh)
        fh.flush()
        proc = subprocess.run([helm_binary(), "template", release, str(chart), "-n", namespace, "--include-crds", "--no-hooks",
                               "-f", fh.name], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RenderError(f"helm template {chart}: {proc.stderr.strip()}")
    namespace_doc = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    return [namespace_doc] + [d for d in yaml.safe_load_all(proc.stdout) if d]


def kueue_values(chart: Path, version: str) -> dict:
    """Values for Kueue's chart: local image, the chart's Configuration plus accelpolicy's charging."""
    config = yaml.safe_load(yaml.safe_load((chart / "values.yaml").read_text())
                            ["managerConfig"]["controllerManagerConfigYaml"])
    fragment = subprocess.run([str(Path(sys.executable).parent / "accelpolicy"), "kueue-config", "-o", "json"],
                              cwd=REPO, capture_output=True, text=True)
    if fragment.returncode != 0:
        raise RenderError(f"accelpolicy kueue-config: {fragment.stderr.strip()}")
    config.update(json.loads(fragment.stdout))
    config["integrations"] = {"frameworks": ["pod"]}
    return {
        "controllerManager": {"manager": {"image": {"repository": f"{IMAGE_PREFIX}/kueue", "tag": version,
                                                    "pullPolicy": "IfNotPresent"}}},
        "managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(config, sort_keys=False)},
        "enablePrometheus": False,
    }


def nfd_values(version: str) -> dict:
    """Values for NFD's chart: nfd-master only, local image, NodeFeatures from the system namespace only."""
    return {
        "image": {"repository": f"{IMAGE_PREFIX}/node-feature-discovery", "tag": version,
                  "pullPolicy": "IfNotPresent"},
        "master": {"config": {"restrictions": {"nodeFeatureNamespaceSelector": {
            "matchLabels": {"kubernetes.io/metadata.name": SYSTEM_NAMESPACE}}}}},
        "worker": {"enable": False},
        "gc": {"enable": False},
        "topologyUpdater": {"enable": False},
    }


def render(outdir: Path) -> dict[str, Path]:
    """Write ``kueue.yaml`` and ``nfd.yaml`` into ``outdir``; returns their paths by name."""
    pinned = versions()
    kueue_version = pinned["sigs.k8s.io/kueue"]
    nfd_version = pinned["sigs.k8s.io/node-feature-discovery"]
    kueue_chart = module_dir("sigs.k8s.io/kueue", kueue_version) / "charts" / "kueue"
    nfd_chart = module_dir("sigs.k8s.io/node-feature-discovery", nfd_version) / "deployment/helm/node-feature-discovery"
    outdir.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, docs in (("kueue", template(kueue_chart, "kueue", KUEUE_NAMESPACE, kueue_values(kueue_chart, kueue_version))),
                       ("nfd", template(nfd_chart, "node-feature-discovery", NFD_NAMESPACE, nfd_values(nfd_version)))):
        out[name] = outdir / f"{name}.yaml"
        out[name].write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: render.py OUTDIR", file=sys.stderr)
        return 2
    try:
        paths = render(Path(argv[0]))
    except (RenderError, FileNotFoundError) as exc:
        print(f"render: {exc}", file=sys.stderr)
        return 2
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
