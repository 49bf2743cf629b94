"""Locate the control-plane binaries that ``make controlplane`` builds.

``e2e/controlplane/build.sh`` builds kube-apiserver, kube-controller-manager, kube-scheduler and etcd
from the Go modules
pinned in ``e2e/controlplane/go.mod`` into ``$ACCELPOLICY_CACHE/bin/<version>/`` where
``<version>`` is ``k8s-<kubernetes version>_etcd-<etcd version>`` and ``ACCELPOLICY_CACHE``
defaults to ``~/.cache/accelpolicy``. This module computes the same directory.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

#: Version key of the pinned control plane; must match e2e/controlplane/go.mod (a test checks it).
CONTROLPLANE_VERSION = "k8s-v1.37.2_etcd-v3.7.0"

#: Environment variable naming a directory that holds the three binaries (overrides the cache).
BIN_DIR_ENV = "ACCELPOLICY_CONTROLPLANE_BIN"


class LocalClusterError(RuntimeError):
    """The local control plane could not be prepared, started or used."""


class MissingBinariesError(LocalClusterError):
    """kube-apiserver or etcd is not built yet; the message says to run ``make controlplane``."""


def repo_root() -> Path:
    """Return the accelpolicy checkout this package was imported from (holds ``e2e/controlplane``)."""
    return Path(__file__).resolve().parents[2]


def cache_dir() -> Path:
    """Return ``$ACCELPOLICY_CACHE`` or its default ``~/.cache/accelpolicy``."""
    return Path(os.environ.get("ACCELPOLICY_CACHE") or Path.home() / ".cache" / "accelpolicy")


def pinned_version(go_mod: Path | None = None) -> str:
    """Read the version key ``k8s-vX_etcd-vY`` from ``e2e/controlplane/go.mod``.

    Falls back to :data:`CONTROLPLANE_VERSION` when the go.mod is not there (an installed package
    without its checkout). Raises :class:`LocalClusterError` when the file exists but does not
    require both ``k8s.io/kubernetes`` and ``go.etcd.io/etcd/server/v3``.
    """
    path = go_mod or repo_root() / "e2e" / "controlplane" / "go.mod"
    if not path.is_file():
        return CONTROLPLANE_VERSION
    text = path.read_text()
    k8s = re.search(r"^\s*k8s\.io/kubernetes\s+(v\S+)", text, re.M)
    etcd = re.search(r"^\s*go\.etcd\.io/etcd/server/v3\s+(v\S+)", text, re.M)
    if not (k8s and etcd):
        raise LocalClusterError(f"{path}: does not require k8s.io/kubernetes and go.etcd.io/etcd/server/v3")
    return f"k8s-{k8s.group(1)}_etcd-{etcd.group(1)}"


@dataclass(frozen=True)
class ControlPlaneBinaries:
    """Paths of the built control-plane programs.

    ``kube_scheduler`` and ``kube_controller_manager`` are ``None`` when that binary is absent
    (both are optional for an API-only cluster).
    """

    etcd: Path
    kube_apiserver: Path
    kube_scheduler: Path | None
    directory: Path
    kube_controller_manager: Path | None = None


def binaries_dir() -> Path:
    """Directory the binaries are expected in: ``$ACCELPOLICY_CONTROLPLANE_BIN`` or the cache."""
    override = os.environ.get(BIN_DIR_ENV)
    if override:
        return Path(override)
    return cache_dir() / "bin" / pinned_version()


def find_binaries(directory: Path | None = None) -> ControlPlaneBinaries:
    """Return the control-plane binaries in ``directory`` (default :func:`binaries_dir`).

    Raises :class:`MissingBinariesError` naming the directory and the missing programs, with the
    instruction ``run `make controlplane``` when etcd or kube-apiserver is missing or not
    executable.
    """
    d = Path(directory) if directory else binaries_dir()
    found = {name: d / name for name in ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager")}
    missing = [n for n in ("etcd", "kube-apiserver") if not os.access(found[n], os.X_OK)]
    if missing:
        raise MissingBinariesError(
            f"control-plane binaries missing in {d}: {', '.join(missing)}; "
            f"run `make controlplane` (builds them from e2e/controlplane/go.mod) "
            f"or point {BIN_DIR_ENV} at a directory that has them"
        )
    optional = {n: found[n] if os.access(found[n], os.X_OK) else None
                for n in ("kube-scheduler", "kube-controller-manager")}
    return ControlPlaneBinaries(etcd=found["etcd"], kube_apiserver=found["kube-apiserver"],
                                kube_scheduler=optional["kube-scheduler"], directory=d,
                                kube_controller_manager=optional["kube-controller-manager"])


# -- cluster components (Kueue, nfd-master, kwok): e2e/components/build.sh ---------------------------

#: Component programs ``make controlplane`` builds (e2e/components/versions.txt), in start order.
COMPONENTS = ("kwok", "nfd-master", "kueue")

#: Version key of the pinned components; must match e2e/components/versions.txt (a test checks it).
COMPONENTS_VERSION = "kueue-v0.17.0_nfd-master-v0.19.0_kwok-v0.8.0"

#: Environment variable naming a directory that holds the component binaries (overrides the cache).
COMPONENTS_DIR_ENV = "ACCELPOLICY_COMPONENTS_BIN"


def components_version(versions_txt: Path | None = None) -> str:
    """Read the version key ``<binary>-<version>_...`` from ``e2e/components/versions.txt``.

    The key is the binary names and versions joined in file order, as ``build.sh`` names its output
    directory. Falls back to :data:`COMPONENTS_VERSION` when the file is absent (an installed
    package without its checkout). Raises :class:`LocalClusterError` naming the file and line
    when a line does not have the five fields ``<module> <version> <package> <binary> <ldflag|->``.
    """
    path = versions_txt or repo_root() / "e2e" / "components" / "versions.txt"
    if not path.is_file():
        return COMPONENTS_VERSION
    parts = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = line.split()
        if len(fields) != 5:
            raise LocalClusterError(
                f"{path}:{number}: expected '<module> <version> <package> <binary> <ldflag var|->', got {line!r}")
        parts.append(f"{fields[3]}-{fields[1]}")
    if not parts:
        raise LocalClusterError(f"{path}: lists no components")
    return "_".join(parts)


def components_dir() -> Path:
    """Directory the component binaries are expected in: ``$ACCELPOLICY_COMPONENTS_BIN`` or the cache
    (``$ACCELPOLICY_CACHE/bin/components-<version key>``)."""
    override = os.environ.get(COMPONENTS_DIR_ENV)
    if override:
        return Path(override)
    return cache_dir() / "bin" / f"components-{components_version()}"


@dataclass(frozen=True)
class ComponentBinaries:
    """Paths of the built components and the module files ``build.sh`` copied beside them.

    ``programs`` maps a name of :data:`COMPONENTS` to its executable; ``kwok_stages`` are kwok's
    default Node and Pod Stage files; ``kueue_webhook_dir`` holds Kueue's ``manifests.yaml`` and
    ``kustomization.yaml`` (config/components/webhook of the Kueue module).
    """

    programs: dict[str, Path]
    kwok_stages: tuple[Path, ...]
    kueue_webhook_dir: Path
    directory: Path


def find_component_binaries(names: tuple[str, ...] | list[str] = COMPONENTS,
                            directory: Path | None = None) -> ComponentBinaries:
    """Return the component programs ``names`` (a subset of :data:`COMPONENTS`) in ``directory``.

    ``directory`` defaults to :func:`components_dir`. Raises :class:`LocalClusterError` for an
    unknown name and :class:`MissingBinariesError` ("run `make controlplane`") naming the
    directory and what is missing when a requested program or its data files are absent.
    """
    unknown = [n for n in names if n not in COMPONENTS]
    if unknown:
        raise LocalClusterError(f"unknown component(s) {', '.join(unknown)}; known: {', '.join(COMPONENTS)}")
    d = Path(directory) if directory else components_dir()
    programs = {n: d / n for n in names}
    missing = [n for n, p in programs.items() if not os.access(p, os.X_OK)]
    stages = tuple(sorted((d / "kwok-stages").glob("*.yaml")))
    if "kwok" in names and not stages:
        missing.append("kwok-stages/*.yaml")
    if "kueue" in names and not (d / "kueue-webhook" / "manifests.yaml").is_file():
        missing.append("kueue-webhook/manifests.yaml")
    if missing:
        raise MissingBinariesError(
            f"cluster components missing in {d}: {', '.join(missing)}; run `make controlplane` "
            f"(builds them from e2e/components/versions.txt) or point {COMPONENTS_DIR_ENV} at a "
            f"directory that has them")
    return ComponentBinaries(programs=programs, kwok_stages=stages,
                             kueue_webhook_dir=d / "kueue-webhook", directory=d)
