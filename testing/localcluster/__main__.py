"""``python -m testing.localcluster [--full]``: run a local control plane with all CRDs until Ctrl-C
(``--full``: with kube-scheduler, kube-controller-manager, kwok, nfd-master and Kueue)."""

from __future__ import annotations

import argparse
import signal
import sys
import time

from . import COMPONENTS, Kubectl, LocalCluster, LocalClusterError, all_crds, install_crds


def main(argv: list[str] | None = None) -> int:
    """Start the cluster, install CRDs (unless ``--no-crds``), print the kubeconfig, wait for a signal."""
    ap = argparse.ArgumentParser(prog="python -m testing.localcluster", description=__doc__)
    ap.add_argument("--no-crds", action="store_true", help="do not install Kueue/NFD/accelpolicy CRDs")
    ap.add_argument("--once", action="store_true", help="start, report timings, stop (a smoke check)")
    ap.add_argument("--full", action="store_true",
                    help="also run kube-scheduler, kube-controller-manager (garbage collector, namespace "
                         "controller), kwok, nfd-master and Kueue (built by `make controlplane`)")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        options = dict(scheduler=True, controller_manager=True, components=COMPONENTS) if args.full else {}
        with LocalCluster(**options) as cluster:
            print(f"control plane ready in {cluster.start_seconds:.1f}s: {cluster.server}", flush=True)
            for name, seconds in cluster.component_seconds.items():
                print(f"{name} healthy {seconds:.1f}s after its launch; log {cluster.workdir / (name + '.log')}", flush=True)
            if not args.no_crds:
                t = time.monotonic()
                names = install_crds(Kubectl(cluster.kubeconfig), all_crds())
                print(f"{len(names)} CRDs established in {time.monotonic() - t:.1f}s", flush=True)
            print(f"export KUBECONFIG={cluster.kubeconfig}", flush=True)
            if not args.once:
                while cluster.running:
                    time.sleep(1)
                print("a control-plane process exited", file=sys.stderr)
                return 1
    except LocalClusterError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
