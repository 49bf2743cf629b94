"""Benchmark of pool derivation (docs/performance.md "The benchmarks"): not a test, prints figures.

Synthetic clusters of 100, 1,000 and 5,000 nodes are generated in memory with a seeded RNG: 0, 1, 4
or 8 accelerators per node of eight products from four manufacturers (NVIDIA incl. MIG-enabled H100s,
AMD, Huawei Ascend, Cambricon), seven CPU models, amd64 and arm64, both NodeFeatures per node, a
Devices object with a ledger (free, exclusive, shared, sliced and partitioned accelerators) per
accelerated node, and about 8 % unmanaged nodes.

For each size it reports the median wall time of ``derive()`` (warm: rules loaded and compiled
once, one untimed run first), of ``Snapshot.from_objects`` over the same dicts (the "load"), their
ratio, and, for 1,000 nodes, the time to load the same objects from YAML text through
``runtime/snapshots.py``. Goal (docs/performance.md "The benchmarks"): 5,000 nodes <= 2 s, <= 10x load time, growth near linear.

Usage: ``.venv/bin/python benchmarks/derive.py [--sizes 100,1000,5000] [--runs 5] [--seed 7]
[--profile SIZE] [--no-yaml] [--aware]`` (``make bench``). ``--profile`` prints the cProfile top functions of one derive.
"""
from __future__ import annotations

import argparse
import base64
import cProfile
import io
import pstats
import random
import statistics
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime.engine.pools.derive import derive  # noqa: E402
from runtime.engine.policy import Policy  # noqa: E402
from runtime.engine.snapshot import Snapshot  # noqa: E402
from runtime.rules.loader import load_rules  # noqa: E402
from runtime.snapshots import load_snapshot  # noqa: E402

D = 1_600_000
GENERAL = "general.feature.gpustack.ai/"
ACC = "acceleratable.feature.gpustack.ai/"

# gKey, raw CPU name, family, possible core counts, arch
CPUS = [
    ("amd-epyc-7r32", "AMD EPYC 7R32", "23", (4, 16, 48, 96), "amd64"),
    ("amd-epyc-9654", "AMD EPYC 9654 96-Core Processor", "25", (96, 192), "amd64"),
    ("intel-xeon-platinum-8259cl", "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz", "6", (4, 48, 96), "amd64"),
    ("intel-xeon-platinum-8468", "Intel(R) Xeon(R) Platinum 8468", "6", (96, 192), "amd64"),
    ("intel-xeon-gold-6348", "Intel(R) Xeon(R) Gold 6348 CPU @ 2.60GHz", "6", (56, 112), "amd64"),
    ("aws-graviton3", "AWS Graviton3", "", (16, 64), "arm64"),
    ("huawei-kunpeng-920", "HUAWEI Kunpeng 920 5250", "", (96, 192), "arm64"),
]
H100_PROFILES = [  # docs/concepts/four-views.md "The partitioned side"
    ("1g.10gb", 10240, 1, 1, 7, 1, [0, 1, 2, 3, 4, 5, 6]), ("1g.20gb", 20480, 1, 2, 4, 2, [0, 2, 4, 6]),
    ("2g.20gb", 20480, 2, 2, 3, 2, [0, 2, 4]), ("3g.40gb", 40960, 3, 4, 2, 4, [0, 4]),
    ("4g.40gb", 40960, 4, 4, 1, 4, [0]), ("7g.80gb", 81920, 7, 8, 1, 8, [0]),
]


class Product:
    """One accelerator product: its Devices group and node labels."""

    def __init__(self, manufacturer, gid, name, memory_mib, cores, family, comcap, archs, logical, mig=False):
        self.manufacturer, self.gid, self.name = manufacturer, gid, name
        self.memory_mib, self.cores, self.family, self.comcap = memory_mib, cores, family, comcap
        self.archs, self.logical, self.mig = archs, logical, mig

    @property
    def akey(self) -> str:
        return f"{self.manufacturer}-{self.gid}"


PRODUCTS = [
    Product("nvidia", "a10g", "NVIDIA A10G", 24563, 10240, "Ampere", "8.6", ("amd64",), 128),
    Product("nvidia", "tesla-t4", "Tesla T4", 16384, 2560, "Turing", "7.5", ("amd64",), 128),
    Product("nvidia", "h100-80gb-hbm3", "NVIDIA H100 80GB HBM3", 81920, 16896, "Hopper", "9.0", ("amd64",), 128,
            mig=True),
    Product("nvidia", "l40s", "NVIDIA L40S", 46068, 18176, "Ada Lovelace", "8.9", ("amd64",), 128),
    Product("nvidia", "gh200-480gb", "NVIDIA GH200 480GB", 97871, 16896, "Hopper", "9.0", ("arm64",), 128),
    Product("amd", "instinct-mi300x", "AMD Instinct MI300X", 196592, 19456, "CDNA3", "9.4", ("amd64",), 0),
    Product("ascend", "910b", "Ascend 910B", 65536, 0, "", "", ("arm64",), 63),
    Product("cambricon", "mlu370-x8", "MLU370-X8", 49152, 0, "", "", ("amd64",), 16),
]


def sanitize(value: str) -> str:
    """Label-value form of a product name (docs/agent.md "Normalization", enough for these names)."""
    return "-".join(value.split())


def _ledger_entry(rng: random.Random, product: Product, index: int, uuid: str, mig: bool) -> dict:
    """A random but valid ledger row (docs/agent.md "The Devices object and its ledger")."""
    entry = {"id": uuid, "index": index}
    roll = rng.random()
    if mig:
        remaining = {name: count for name, _, _, _, count, _, _ in H100_PROFILES}
        if roll < 0.4:  # one 3g.40gb at slices 0-3
            entry.update(mode=4, allocated=800_000, remaining=800_000,
                         allocatedProfiles=[{"name": "3g.40gb", "count": 1}])
            remaining = {"1g.10gb": 3, "1g.20gb": 2, "2g.20gb": 1, "3g.40gb": 1, "4g.40gb": 0, "7g.80gb": 0}
        else:
            entry.update(mode=0, remaining=D)
        entry["remainingProfiles"] = [{"name": k, "count": v} for k, v in sorted(remaining.items())]
        return entry
    if roll < 0.55:
        entry.update(mode=0, remaining=D)
    elif roll < 0.75:
        entry.update(mode=1, allocated=D)
    elif roll < 0.85:
        holders = rng.randint(1, 9)
        entry.update(mode=2, allocated=holders * 160_000, remaining=D - holders * 160_000)
    elif product.logical:
        pct = rng.choice((10, 20, 25, 50, 75))
        entry.update(mode=3, allocated=pct * 16_000, remaining=D - pct * 16_000, allocatedSlices=1)
    else:
        entry.update(mode=0, remaining=D)
    return entry


def _accelerator_spec(product: Product, index: int, uuid: str, mig: bool, unhealthy: bool) -> dict:
    status: dict = {"unhealthy": unhealthy,
                    "logicalSliced": {"count": 0 if mig else product.logical,
                                      "coresPercentageOvercommit": product.manufacturer == "nvidia"}}
    if mig:
        status["physicalSliced"] = {"count": 7, "profiles": [
            {"name": n, "memoryMib": mib, "computeSlices": cs, "memorySlices": ms, "count": c,
             "placements": [{"start": s, "length": length} for s in starts]}
            for n, mib, cs, ms, c, length, starts in H100_PROFILES]}
    else:
        status["physicalSliced"] = {"count": 0}
    return {"id": uuid, "index": index, "physicalIndexes": [index], "status": status}


def generate(nodes: int, seed: int = 7, aware: bool = False) -> list[dict]:
    """The objects of a synthetic cluster of ``nodes`` Nodes (deterministic for a given seed);
    ``aware`` turns ``instance-type-aware-cpu-manufacturer`` on (one pool per CPU x accelerator)."""
    rng = random.Random(seed)
    objects: list[dict] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        for name in ["default", "gpustack-system", "kube-system"] + [f"team-{i:02d}" for i in range(20)]
    ]
    objects.append({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "gpustack-settings", "namespace": "gpustack-system"},
                    "data": {"instance-type-derived-from-node": base64.b64encode(b"true").decode(),
                             "instance-type-aware-cpu-manufacturer": base64.b64encode(
                                 b"true" if aware else b"false").decode()}})
    for i in range(nodes):
        name = f"node-{i:05d}"
        arch = "arm64" if rng.random() < 0.2 else "amd64"
        gkey, cpu_name, cpu_family, cores_choice, _ = rng.choice([c for c in CPUS if c[4] == arch])
        cores = rng.choice(cores_choice)
        count = rng.choices((0, 1, 4, 8), weights=(30, 20, 25, 25))[0]
        product = rng.choice([p for p in PRODUCTS if arch in p.archs]) if count else None
        managed = "false" if rng.random() < 0.08 else "true"
        worker = {"gpustack.ai/managed": managed, f"{GENERAL}{gkey.split('-', 1)[0]}": "true",
                  f"{GENERAL}{gkey}": "true", f"{GENERAL}{gkey}.count": str(cores)}
        device_labels: dict[str, str] = {}
        if product:
            a = f"{ACC}{product.akey}"
            device_labels = {f"{ACC}{product.manufacturer}": "true", a: "true", f"{a}.count": str(count),
                             f"{a}.memory": f"{round(product.memory_mib / 1024)}Gi", f"{a}.cores": str(product.cores),
                             f"{a}.product": sanitize(product.name),
                             f"{ACC}{product.manufacturer}.driver-version": "580.159.03"}
            if product.family:
                device_labels[f"{a}.family"] = sanitize(product.family)
            if product.comcap:
                device_labels[f"{a}.comcap"] = product.comcap
        node_labels = {"kubernetes.io/os": "linux", "kubernetes.io/arch": arch, "kubernetes.io/hostname": name,
                       **worker, **device_labels}
        objects.append({"apiVersion": "v1", "kind": "Node",
                        "metadata": {"name": name, "labels": node_labels,
                                     "annotations": {"feature.gpustack.ai/cpu-name": cpu_name,
                                                     "feature.gpustack.ai/cpu-family": cpu_family}},
                        "status": {"capacity": {"cpu": str(cores)}, "allocatable": {"cpu": str(cores)}}})
        for suffix, labels in (("worker", worker), ("device-manager", device_labels)):
            if labels:
                objects.append({"apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeature",
                                "metadata": {"name": f"{name}-gpustack-{suffix}", "namespace": "gpustack-system",
                                             "labels": {"nfd.node.kubernetes.io/node-name": name}},
                                "spec": {"labels": labels}})
        if not product:
            continue
        mig_on = product.mig and rng.random() < 0.5
        uuids = [f"GPU-{i:05d}-{j}" for j in range(count)]
        objects.append({
            "apiVersion": "worker.gpustack.ai/v1", "kind": "Devices",
            "metadata": {"name": name, "labels": {
                "kubernetes.io/os": "linux", "kubernetes.io/arch": arch, "gpustack.ai/managed": managed,
                f"{GENERAL}{gkey}": "true", f"{ACC}{product.akey}": "true"}},
            "spec": {"groups": [{
                "id": product.gid, "manufacturer": product.manufacturer, "name": product.name,
                "memory": product.memory_mib, "cores": product.cores, "driverVersion": "580.159.03",
                "family": product.family, "computeCapability": product.comcap,
                "accelerators": [_accelerator_spec(product, j, uuids[j], mig_on, rng.random() < 0.01)
                                 for j in range(count)]}]},
            "status": {"groups": [{"id": product.gid, "manufacturer": product.manufacturer,
                                   "accelerators": [_ledger_entry(rng, product, j, uuids[j], mig_on)
                                                    for j in range(count)]}]},
        })
    return objects


def _median_seconds(fn, runs: int) -> tuple[float, float]:
    """Median wall and median process-CPU seconds of ``runs`` calls of ``fn``.

    CPU time is printed too because this machine is shared: wall time swings with the load of
    other processes, CPU time much less.
    """
    walls, cpus = [], []
    for _ in range(runs):
        start, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print one row per size, then the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,1000,5000")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--profile", type=int, default=0, help="cProfile one derive of this size and print the top")
    parser.add_argument("--aware", action="store_true", help="CPU-manufacturer awareness on (more pools)")
    parser.add_argument("--no-yaml", action="store_true", help="skip the (slow) YAML-text load of the 1k snapshot")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]

    start = time.perf_counter()
    policy = Policy(load_rules())
    print(f"rules loaded and compiled once in {(time.perf_counter() - start) * 1000:.0f} ms; "
          f"median of {args.runs} warm runs per size (python {sys.version.split()[0]})")

    if args.profile:
        snapshot = Snapshot.from_objects(generate(args.profile, args.seed, args.aware))
        derive(policy, snapshot)
        profiler = cProfile.Profile()
        profiler.enable()
        derive(policy, snapshot)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
        return 0

    header = (f"{'nodes':>6} {'objects':>8} {'devices':>8} {'types':>6} {'flavors':>8} | {'derive ms':>10} "
              f"{'load ms':>9} {'ratio':>6} | {'derive cpu':>10} {'load cpu':>9} {'ratio':>6}")
    print(header)
    print("-" * len(header))
    wall: dict[int, float] = {}
    cpu: dict[int, float] = {}
    for size in sizes:
        objects = generate(size, args.seed, args.aware)
        snapshot = Snapshot.from_objects(objects)
        state = derive(policy, snapshot)  # warm-up, untimed
        load, load_cpu = _median_seconds(lambda: Snapshot.from_objects(objects), args.runs)
        took, took_cpu = _median_seconds(lambda: derive(policy, snapshot), args.runs)
        wall[size], cpu[size] = took * 1000, took_cpu * 1000
        print(f"{size:>6} {len(objects):>8} {snapshot.count('Devices'):>8} {len(state.instance_types):>6} "
              f"{len(state.resource_flavors):>8} | {took * 1000:>10.1f} {load * 1000:>9.1f} {took / load:>5.1f}x | "
              f"{took_cpu * 1000:>10.1f} {load_cpu * 1000:>9.1f} {took_cpu / load_cpu:>5.1f}x")
        if size == 1000 and not args.no_yaml:
            text = yaml.safe_dump_all(objects, sort_keys=False)
            yaml_load, _ = _median_seconds(lambda: load_snapshot(["-"], stdin=io.StringIO(text)),
                                           max(1, min(args.runs, 3)))
            print(f"{'':>6} load of the same objects from YAML text ({len(text) // 1024} KiB) via "
                  f"runtime/snapshots.py: {yaml_load * 1000:.0f} ms (derive/YAML-load {took / yaml_load:.2f}x)")
    if 1000 in wall and 5000 in wall:
        print(f"5k/1k derive ratio: wall {wall[5000] / wall[1000]:.2f}, cpu {cpu[5000] / cpu[1000]:.2f} (linear = 5.00)")
    if 5000 in wall:
        print(f"goal 5,000 nodes <= 2000 ms: {'met' if wall[5000] <= 2000 else 'MISSED'} ({wall[5000]:.0f} ms wall)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
