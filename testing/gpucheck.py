"""`make gpu-check`: the agent's real NVML backend (pynvml) in a dry run on this machine, compared
with ``nvidia-smi`` (docs/observability.md "Real NVML: `make gpu-check`"), then the agent's metrics for this node.

Compared per GPU: count (``nvidia-smi -L``), UUID, product name, memory (MiB), driver version, CUDA
version (the ``nvidia-smi`` banner), MIG mode and, with MIG on, the profile names
(``nvidia-smi mig -lgip``); and that the Devices object the agent would publish names the same GPUs,
product, driver and CUDA version. Health (docs/concepts/out-of-service.md "Health"): the agent's XID event
thread registers the critical-XID event set on every GPU and waits on it once, and the probe reads the
volatile uncorrectable ECC count (where ECC is on) and the row-remap counters (compute capability 8.0 and
later); each GPU's facts are printed, and a GPU the set could not register or whose counters did not read is a
difference. Exit 0: equal, or skipped (no NVIDIA driver here: the reason is printed); 1: a difference (each
printed); 2: bad arguments. ``--record FILE`` writes the probed facts
as a recorded-facts document (probes/recorded/ format).

    python -m testing.gpucheck [--node NAME] [--record probes/recorded/<node>.yaml]
"""
from __future__ import annotations

import argparse
import csv
import io
import os
import re
import shutil
import socket
import subprocess
import sys

import yaml
from prometheus_client import generate_latest

QUERY = "index,uuid,name,memory.total,driver_version,mig.mode.current"
CUDA_BANNER = re.compile(r"CUDA Version:\s*([0-9.]+)")


def smi_gpus(csv_text: str) -> list[dict]:
    """``nvidia-smi --query-gpu=QUERY --format=csv,noheader,nounits`` rows as dicts (index order)."""
    keys = QUERY.split(",")
    rows = [dict(zip(keys, (c.strip() for c in row))) for row in csv.reader(io.StringIO(csv_text)) if row]
    return sorted(rows, key=lambda r: int(r["index"]))


def cuda_text(version: int) -> str:
    """NVML's CUDA driver version (13000) as nvidia-smi prints it (13.0)."""
    return f"{version // 1000}.{version % 1000 // 10}"


def compare_facts(facts: list[dict], gpus: list[dict], listing: str, banner: str, profiles_text: str = "") -> list[str]:
    """Differences between the probed facts (probes/nvml.py) and nvidia-smi's answers; [] when equal."""
    out = []
    listed = len(re.findall(r"^GPU \d+:", listing, re.M))
    if not len(facts) == len(gpus) == listed:
        out.append(f"count: NVML {len(facts)}, nvidia-smi --query-gpu {len(gpus)}, nvidia-smi -L {listed}")
    cuda = CUDA_BANNER.search(banner)
    listed_profiles = set(profiles_text.split())  # whole names: 1g.10gb is not 1g.10gb+me
    for fact, gpu in zip(sorted(facts, key=lambda f: f["index"]), gpus):
        pairs = [("uuid", fact["uuid"], gpu["uuid"]), ("name", fact["name"], gpu["name"]),
                 ("memory MiB", str(fact["memoryMib"]), gpu["memory.total"]),
                 ("driver", fact["driverVersion"], gpu["driver_version"]),
                 ("MIG mode", "Enabled" if fact.get("migEnabled") else "Disabled",
                  gpu["mig.mode.current"] if gpu["mig.mode.current"] in ("Enabled", "Disabled") else "Disabled")]
        if cuda:
            pairs.append(("CUDA", cuda_text(fact["cudaDriverVersion"]), cuda.group(1)))
        out += [f"GPU {gpu['index']} {what}: NVML {ours!r}, nvidia-smi {theirs!r}"
                for what, ours, theirs in pairs if ours != theirs]
        for profile in fact.get("migProfiles") or []:
            name = profile["name"].removeprefix("MIG ")
            if name not in listed_profiles:
                out.append(f"GPU {gpu['index']} MIG profile {name}: not in nvidia-smi mig -lgip")
    return out


def compare_devices(devices: dict | None, gpus: list[dict], banner: str) -> list[str]:
    """Differences between the Devices object the agent would publish and nvidia-smi's GPUs."""
    groups = ((devices or {}).get("spec") or {}).get("groups") or []
    published = {a["id"]: g for g in groups for a in g.get("accelerators") or []}
    out = []
    if sorted(published) != sorted(g["uuid"] for g in gpus):
        out.append(f"Devices accelerators {sorted(published)} != nvidia-smi UUIDs {sorted(g['uuid'] for g in gpus)}")
    cuda = CUDA_BANNER.search(banner)
    for gpu in gpus:
        group = published.get(gpu["uuid"])
        if group is None:
            continue
        pairs = [("product", group.get("name"), gpu["name"]), ("driver", group.get("driverVersion"),
                                                                gpu["driver_version"])]
        if cuda:
            pairs.append(("CUDA", group.get("runtimeVersion"), cuda.group(1)))
        out += [f"Devices group {group.get('id')} {what}: {ours!r}, nvidia-smi {theirs!r}"
                for what, ours, theirs in pairs if ours != theirs]
    return out


def health_problems(facts: list[dict], registered: list[str], unregistered: dict[str, str],
                    error: str | None) -> tuple[list[str], list[str]]:
    """(one line per GPU: its health facts and whether its critical XIDs are registered; the differences:
    the event set did not start, a GPU not registered, an ECC count missing where ECC is on, row-remap
    counters missing on compute capability 8.0 or later)."""
    lines, problems = [], []
    if error:
        problems.append(f"XID event set: {error}")
    for fact in sorted(facts, key=lambda f: f["index"]):
        health = fact.get("health") or {}
        shown = " ".join(f"{k}={health[k]}" for k in ("eccUncorrectableVolatile", "retiredPagesPending",
                                                      "remappedRowsPending", "remappedRowsFailure") if k in health)
        lines.append(f"GPU {fact['index']} health: {shown or '(no counter read)'}; critical XID events "
                     f"{'registered' if fact['uuid'] in registered else 'not registered'}")
        if fact["uuid"] in unregistered:
            problems.append(f"GPU {fact['index']} XID events not registered: {unregistered[fact['uuid']]}")
        elif not error and fact["uuid"] not in registered:
            problems.append(f"GPU {fact['index']} XID events not registered")
        if fact.get("eccEnabled") and "eccUncorrectableVolatile" not in health:
            problems.append(f"GPU {fact['index']} ECC is on, its uncorrectable ECC count did not read")
        if tuple(fact.get("computeCapability") or (0, 0)) >= (8, 0) and "remappedRowsPending" not in health:
            problems.append(f"GPU {fact['index']} row-remap counters did not read (compute capability >= 8.0)")
    return lines, problems


def event_check(nv=None, wait_ms: int = 200) -> tuple[list[str], dict[str, str], str | None]:
    """Start the agent's XID event thread (probes/nvmlevents.py) on this machine's NVML, wait once, stop:
    (UUIDs registered, UUID -> why not, the error when it could not start)."""
    import importlib

    from probes.nvmlevents import XidEvents

    events = XidEvents(nv if nv is not None else importlib.import_module("pynvml"), wait_ms)
    events.start()
    events.stop()
    return list(events.registered), dict(events.unregistered), events.error


def _smi(*args: str) -> str:
    return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, check=True, timeout=60).stdout


def skip_reason() -> str | None:
    """Why there is nothing to check here (no nvidia-smi and NVML cannot start), else None."""
    from probes.errors import ProbeError
    from probes.nvml import NvmlBackend

    if shutil.which("nvidia-smi") is not None:
        return None
    try:
        NvmlBackend().accelerators()
    except ProbeError as exc:
        return f"no NVIDIA driver on this machine: nvidia-smi is not on PATH and NVML says: {exc}"
    return None


def run(node: str, record: str | None) -> int:
    """The check itself (see the module docstring); returns the exit code."""
    from probes.cpu import read_cpu
    from probes.nvml import NvmlBackend
    from runtime.agent.metrics import AgentMetrics
    from runtime.agent.runner import NodeAgent
    from runtime.cli.agent import offline_node
    from runtime.engine.policy import Policy
    from runtime.rules.loader import load_rules

    backend = NvmlBackend()
    facts = backend.accelerators()
    gpus, listing, banner = smi_gpus(_smi(f"--query-gpu={QUERY}", "--format=csv,noheader,nounits")), _smi("-L"), _smi()
    mig = any(f.get("migEnabled") for f in facts)
    profiles = _smi("mig", "-lgip") if mig else ""
    policy = Policy(load_rules())
    agent = NodeAgent(policy, backend, node, node=offline_node(policy, node, str(os.cpu_count() or 1), ()),
                      allocation_source="annotation")
    metrics = AgentMetrics().bind(agent)
    plan = agent.reconcile(dry_run=True)
    problems = compare_facts(facts, gpus, listing, banner, profiles)
    problems += compare_devices(plan.devices if plan else None, gpus, banner)
    health_lines, health = health_problems(facts, *event_check())
    problems += health
    for gpu in gpus:
        print(f"GPU {gpu['index']} {gpu['uuid']} {gpu['name']} {gpu['memory.total']} MiB driver "
              f"{gpu['driver_version']} MIG {gpu['mig.mode.current']}")
    for line in health_lines:
        print(line)
    print(generate_latest(metrics.registry).decode(), end="")
    if record:
        doc = {"node": node, "cpu": read_cpu(), "accelerators": facts}
        with open(record, "w") as fh:
            fh.write(f"# Recorded by `make gpu-check` on {node} (nvidia-smi agreed: {not problems}).\n")
            yaml.safe_dump(doc, fh, sort_keys=False)
        print(f"recorded {record}")
    for problem in problems:
        print(f"gpu-check: differs: {problem}", file=sys.stderr)
    print(f"gpu-check: {len(gpus)} GPU(s), {len(problems)} difference(s)")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testing.gpucheck", description=__doc__.split("\n\n")[0])
    parser.add_argument("--node", default=socket.gethostname(), help="node name for the dry run (default: hostname)")
    parser.add_argument("--record", default=None, metavar="FILE", help="write the probed facts document here")
    args = parser.parse_args(argv)
    reason = skip_reason()
    if reason is not None:
        print(f"gpu-check: skipped: {reason}")
        return 0
    return run(args.node, args.record)


if __name__ == "__main__":
    sys.exit(main())
