"""The operator's commands against a large live cluster (docs/tasks/ask-the-cluster.md): wall time
and API requests of ``accelpolicy get instancetypes`` and ``accelpolicy explain instancetype X``,
each as a ratio to ``kubectl get nodes -o json`` of the same cluster in the same run.

On a bare local control plane (testing/localcluster: kube-apiserver + etcd, every CRD installed) it
writes the synthetic cluster of benchmarks/derive.py (as benchmarks/scale.py does: Nodes with status,
two NodeFeatures per node, a Devices object per accelerated node) plus the derived pools (what the
controller would have written, from an offline derive), then runs each command ``--runs`` times as a
whole process (one untimed warm-up first), in turn with kubectl. Wall time is the median; requests
are every HTTP request the process sent (discovery included): for accelpolicy counted in the process
(``kubernetes.client.rest``'s request method wrapped), for kubectl from its ``-v=6`` log lines, with
a fresh discovery cache each run (``--cache-dir``) so both pay discovery.

Usage: ``.venv/bin/python benchmarks/cli_live.py [--nodes 5000] [--runs 3] [--json]``.
Needs the control-plane binaries (``make controlplane``). Loopback only.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.derive import generate  # noqa: E402
from benchmarks.scale import write_objects  # noqa: E402
from runtime.engine.policy import Policy  # noqa: E402
from runtime.engine.pools import derive  # noqa: E402
from runtime.engine.snapshot import Snapshot  # noqa: E402
from runtime.kube.session import KubeApiError, connect  # noqa: E402
from runtime.rules.loader import load_rules  # noqa: E402
from testing.localcluster import LocalCluster  # noqa: E402
from testing.localcluster.kubectl import find_kubectl  # noqa: E402
from testing.localcluster.testing import with_crds  # noqa: E402

# run as `python benchmarks/cli_live.py --count ARGS...`: the accelpolicy command with its requests counted
COUNTED = """
import sys
from kubernetes.client import rest
sent = [0]
request = rest.RESTClientObject.request
def counted(self, *a, **kw):
    sent[0] += 1
    return request(self, *a, **kw)
rest.RESTClientObject.request = counted
from runtime.cli import main
try:
    main(sys.argv[1:], prog_name="accelpolicy")
finally:
    sys.stderr.write(f"\\nrequests: {sent[0]}\\n")
"""
KUBECTL_REQUEST = re.compile(r'(verb="(GET|POST|PUT|PATCH|DELETE)"|\b(GET|POST|PUT|PATCH|DELETE) https?://)')


def write_derived(session, policy: Policy, objects: list[dict]) -> int:
    """Create what the controller would have written (offline derive of ``objects``); returns the count."""
    state = derive(policy, Snapshot.from_objects(objects))
    derived = state.objects()
    order = ("ResourceFlavor", "AdmissionCheck", "InstanceType", "ClusterQueue", "LocalQueue", "InstanceTypeFlavor")
    for kind in order:
        for obj in (o for o in derived if o["kind"] == kind):
            ref = session.ref(kind)
            body = {k: v for k, v in obj.items() if k != "status"}
            try:
                live = session.call("post", ref.path(namespace=obj["metadata"].get("namespace")), body=body)
            except KubeApiError as exc:
                if exc.status != 409:
                    raise
                continue
            if obj.get("status") and kind == "InstanceType":
                session.call("put", ref.path(name=obj["metadata"]["name"], subresource="status"),
                             body={**obj, "metadata": {**obj["metadata"],
                                                        "resourceVersion": live["metadata"]["resourceVersion"]}})
    return len(derived)


def timed(argv: list[str], env: dict) -> tuple[float, str, int]:
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
    return time.monotonic() - t0, proc.stderr, proc.returncode


def run_ours(args: list[str], kubeconfig: Path) -> tuple[float, int]:
    wall, err, code = timed([sys.executable, "-c", COUNTED, *args, "--kubeconfig", str(kubeconfig)],
                            {**os.environ, "PYTHONPATH": str(ROOT)})
    if code not in (0, 1):
        raise RuntimeError(f"accelpolicy {' '.join(args)} exited {code}: {err[-2000:]}")
    return wall, int(re.findall(r"requests: (\d+)", err)[-1])


def run_kubectl(kubeconfig: Path) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as cache:
        wall, err, code = timed([str(find_kubectl()), "--kubeconfig", str(kubeconfig), "--cache-dir", cache,
                                 "-v=6", "get", "nodes", "-o", "json"], dict(os.environ))
    if code != 0:
        raise RuntimeError(f"kubectl exited {code}: {err[-2000:]}")
    return wall, len(KUBECTL_REQUEST.findall(err))


def measure(nodes: int, runs: int) -> dict:
    """The figures for one cluster size (module docstring)."""
    policy = Policy(load_rules())
    objects = generate(nodes)
    out: dict = {"nodes": nodes, "objects": len(objects), "runs": runs}
    with LocalCluster() as cluster:
        with_crds(cluster)
        session = connect(cluster.kubeconfig)
        out["write_s"] = round(write_objects(session, objects), 1)
        out["derived_objects"] = write_derived(session, policy, objects)
        types = sorted(o["metadata"]["name"] for o in derive(policy, Snapshot.from_objects(objects)).instance_types)
        target = types[0]
        commands = {"get instancetypes": ["get", "instancetypes"],
                    f"explain instancetype ({target})": ["explain", "instancetype", target]}
        run_kubectl(cluster.kubeconfig)   # warm-up
        for args in commands.values():
            run_ours(args, cluster.kubeconfig)
        rows = {name: [] for name in commands}
        base = []
        for _ in range(runs):
            base.append(run_kubectl(cluster.kubeconfig))
            for name, args in commands.items():
                rows[name].append(run_ours(args, cluster.kubeconfig))
        k_wall = statistics.median(w for w, _ in base)
        k_req = base[-1][1]
        out["kubectl get nodes -o json"] = {"wall_s": round(k_wall, 2), "requests": k_req}
        for name, samples in rows.items():
            wall = statistics.median(w for w, _ in samples)
            req = samples[-1][1]
            out[name] = {"wall_s": round(wall, 2), "requests": req, "wall_ratio": round(wall / k_wall, 2),
                         "request_ratio": round(req / k_req, 2)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    ns = parser.parse_args()
    out = measure(ns.nodes, ns.runs)
    if ns.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{out['nodes']} nodes ({out['objects']} objects written in {out['write_s']} s, "
          f"{out['derived_objects']} derived), median of {out['runs']} runs")
    for name, row in out.items():
        if isinstance(row, dict):
            ratio = f"  x{row['wall_ratio']} wall, x{row['request_ratio']} requests" if "wall_ratio" in row else ""
            print(f"  {name}: {row['wall_s']} s, {row['requests']} requests{ratio}")


if __name__ == "__main__":
    main()
