"""A real Kubernetes control plane on 127.0.0.1 for tests and demos.

Public API:

* :class:`LocalCluster` — start/stop etcd + kube-apiserver with generated certificates and an
  admin kubeconfig (context manager; also cleaned up at exit).
* :func:`find_binaries` / :class:`ControlPlaneBinaries` — the binaries ``make controlplane`` builds
  into ``$ACCELPOLICY_CACHE/bin/<version>/``.
* :func:`find_component_binaries` / :class:`ComponentBinaries` — Kueue, nfd-master and kwok, which
  ``make controlplane`` also builds; ``LocalCluster(components=...)`` runs them
  (:mod:`testing.localcluster.components`, :func:`fake_node` for kwok-managed Nodes).
* :class:`Kubectl` — a kubectl runner bound to a kubeconfig.
* :func:`all_crds`, :func:`our_crds`, :func:`kueue_crds`, :func:`nfd_crds`, :func:`install_crds` —
  our CRDs plus Kueue's and NFD's from their pinned Go modules.
* Errors: :class:`LocalClusterError` (base), :class:`MissingBinariesError`, :class:`KubectlError`.

``python -m testing.localcluster`` starts a cluster with all CRDs, prints the kubeconfig path and
runs until interrupted.
"""

from .binaries import (COMPONENTS, CONTROLPLANE_VERSION, ComponentBinaries, ControlPlaneBinaries,
                       LocalClusterError, MissingBinariesError, binaries_dir, components_dir,
                       find_binaries, find_component_binaries, pinned_version)
from .cluster import LocalCluster
from .components import fake_node
from .crds import all_crds, install_crds, kueue_crds, nfd_crds, our_crds
from .kubectl import Kubectl, KubectlError, find_kubectl

__all__ = [
    "COMPONENTS", "CONTROLPLANE_VERSION", "ComponentBinaries", "ControlPlaneBinaries", "components_dir",
    "fake_node", "find_component_binaries", "LocalCluster", "LocalClusterError",
    "MissingBinariesError", "Kubectl", "KubectlError", "all_crds", "binaries_dir", "find_binaries",
    "find_kubectl", "install_crds", "kueue_crds", "nfd_crds", "our_crds", "pinned_version",
]
