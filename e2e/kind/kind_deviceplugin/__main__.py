"""Run the stand-in for one kind node until interrupted.

Usage (from the repository root): ``PYTHONPATH=e2e/kind .venv/bin/python -m kind_deviceplugin
--node accelpolicy-worker --facts probes/recorded/node-t4-a.yaml`` — advertises that document's devices
to the node's kubelet (its device-plugins directory is found through ``docker inspect``) and serves
``Allocate`` until SIGINT/SIGTERM.
"""
from __future__ import annotations

import argparse
import signal
import threading

from kind_deviceplugin.kindnode import node_kubelet_dir, short_link
from kind_deviceplugin.plugin import DevicePluginStandIn, advertised_devices
from probes.fake import load_document
from runtime.engine.policy import Policy
from runtime.rules.loader import load_rules


def main(argv: list[str] | None = None) -> None:
    """Parse ``--node``/``--facts``, serve until a signal, then stop (sockets removed)."""
    parser = argparse.ArgumentParser(prog="kind_deviceplugin", description=__doc__.splitlines()[0])
    parser.add_argument("--node", required=True, help="kind node container name, e.g. accelpolicy-worker")
    parser.add_argument("--facts", required=True, help="recorded facts document (probes/recorded/*.yaml)")
    args = parser.parse_args(argv)
    devices = advertised_devices(Policy(load_rules()), load_document(args.facts), args.facts)
    standin = DevicePluginStandIn(short_link(node_kubelet_dir(args.node) / "device-plugins"), devices)
    standin.start()
    for resource, ids in devices.items():
        print(f"kind_deviceplugin: {args.node}: {resource} = {len(ids)} devices", flush=True)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    standin.stop()
    print(f"kind_deviceplugin: {args.node}: stopped; allocations {standin.allocations}", flush=True)


if __name__ == "__main__":
    main()
