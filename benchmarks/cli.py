"""CLI start-up benchmark (docs/performance.md "Fast to start, light to hold"): figures and ratios, not pass/fail.

Each command of the table runs as a whole process, the way an operator or a CI pipeline runs it, in
turn with the floor ``python -c 'import click, yaml'`` (same interpreter): one untimed warm-up pair,
then ``--runs`` pairs. Per command it prints the median wall and CPU seconds (user + system of the
child, from ``os.wait4``) and the median of the pair-by-pair ratios to the floor, next to the goal.
The compiled-rules cache is a directory of this run's own, warmed by the warm-up run (``--cold``
adds the rows of a first load: ``--no-rules-cache``). The checkout's modules are byte-compiled first
(``compileall``), as pip does when it installs the wheel, so a run measures what an installed
accelpolicy does even where ``PYTHONDONTWRITEBYTECODE`` is set.

Then the rules: how long ``load_rules`` of the shipped rules takes in a fresh process without and
with the cache (what ``accelpolicy controller`` does at start), and a hot reload
(:class:`runtime.reload.watcher.RulesWatcher`) to an edited set first seen (compiled) and to a set the
cache holds (goal: <= 0.3 s with the cache warm).

Usage: ``.venv/bin/python benchmarks/cli.py [--runs 5] [--cold] [--rules-only] [--json]`` (``make bench``).
"""
from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEP1 = "tests/fixtures/seed/step1"
FLOOR = [sys.executable, "-c", "import click, yaml"]
# (row name, arguments, goal as a ratio to the floor or None); the table of docs/performance.md "The CLI, before and after", in its order.
COMMANDS = [
    ("--help", ["--help"], 3.0),
    ("get instancetypes (seed step 1)", ["get", "instancetypes", "--snapshot", STEP1], 6.0),
    ("lint rules", ["lint", "rules"], 8.0),
    ("admit privileged-demo (seed step 1)", ["admit", "-f", "demo/privileged-demo.yaml", "--snapshot", STEP1], None),
    ("test rules", ["test", "rules"], 10.0),
]
COLD = [
    ("lint rules, no cache", ["lint", "rules", "--no-rules-cache"], None),
    ("get instancetypes, no cache", ["get", "instancetypes", "--snapshot", STEP1, "--no-rules-cache"], None),
]


def timed(argv: list[str], env: dict) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one whole process; its output is discarded."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = 0  # reaped by wait4
    return wall, usage.ru_utime + usage.ru_stime


def paired(argv: list[str], runs: int, env: dict) -> dict:
    """Medians of ``argv`` and of the floor, run in turn, and of their pair-by-pair ratios."""
    timed(argv, env), timed(FLOOR, env)  # warm-up (fills the compiled-rules cache)
    rows = []
    for _ in range(runs):
        a, b = timed(argv, env), timed(FLOOR, env)
        rows.append((a, b))
    med = statistics.median
    return {"wall_s": round(med(a[0] for a, _ in rows), 3), "cpu_s": round(med(a[1] for a, _ in rows), 3),
            "floor_wall_s": round(med(b[0] for _, b in rows), 3), "floor_cpu_s": round(med(b[1] for _, b in rows), 3),
            "wall_ratio": round(med(a[0] / b[0] for a, b in rows), 2),
            "cpu_ratio": round(med(a[1] / b[1] for a, b in rows), 2)}


RULES_LOAD = """
import json, sys, time
from runtime.rules.loader import load_rules
t = time.perf_counter()
load_rules()
print(json.dumps(time.perf_counter() - t))
"""

HOT_RELOAD = """
import json, shutil, sys, time
from pathlib import Path
from runtime.rules.loader import DEFAULT_RULES_DIR
from runtime.reload.watcher import RulesWatcher
root = Path(sys.argv[1]) / "rules"
shutil.copytree(DEFAULT_RULES_DIR, root, ignore=shutil.ignore_patterns("tests", "__pycache__", "*.py", "*.md"))
constants = root / "constants.yaml"
original = constants.read_text()
watcher = RulesWatcher(root, on_swap=lambda rules: None)
out = {}
edit = f"\\n# edited {time.time_ns()}\\n"  # a set never seen before: compiled
for label, text in (("edited (compiled)", original + edit), ("back to a cached set", original)):
    time.sleep(0.01)
    constants.write_text(text)
    assert watcher.poll() is True, watcher.last_error
    out[label] = watcher.last_seconds
print(json.dumps(out))
"""


def rules_ready(env: dict, runs: int) -> dict:
    """Seconds ``load_rules`` takes in a fresh process without and with the cache, and hot reloads."""
    out = {}
    for label, cache in (("start, no cache", "off"), ("start, cache warm", env["ACCELPOLICY_RULES_CACHE"])):
        seconds = [json.loads(subprocess.run([sys.executable, "-c", RULES_LOAD], cwd=ROOT, check=True,
                                             capture_output=True, text=True,
                                             env={**env, "ACCELPOLICY_RULES_CACHE": cache}).stdout)
                   for _ in range(runs)]
        out[label] = round(statistics.median(seconds), 3)
    with tempfile.TemporaryDirectory(prefix="accelpolicy-reload-") as tmp:
        reloads = [json.loads(subprocess.run([sys.executable, "-c", HOT_RELOAD, tmp + f"/{i}"], cwd=ROOT, check=True,
                                             capture_output=True, text=True, env=env).stdout) for i in range(runs)]
    for label in reloads[0]:
        out[f"hot reload, {label}"] = round(statistics.median(r[label] for r in reloads), 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed pairs per command (median quoted)")
    parser.add_argument("--cold", action="store_true", help="also the rows of a load without the cache")
    parser.add_argument("--rules-only", action="store_true", help="only the rules-ready figures")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    compileall.compile_dir(str(ROOT / "runtime"), quiet=1)
    compileall.compile_dir(str(ROOT / "probes"), quiet=1)
    accelpolicy = str(Path(sys.executable).parent / "accelpolicy")
    cache = tempfile.mkdtemp(prefix="accelpolicy-bench-rules-cache-")
    env = {**os.environ, "ACCELPOLICY_RULES_CACHE": cache}
    env.pop("ACCELPOLICY_RULES", None)
    try:
        table = []
        for name, argv, goal in [] if args.rules_only else COMMANDS + (COLD if args.cold else []):
            figures = paired([accelpolicy, *argv], args.runs, env)
            table.append({"command": name, "goal_ratio": goal, **figures})
        ready = rules_ready(env, args.runs)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    result = {"load_average": os.getloadavg()[0], "commands": table, "rules_ready_s": ready}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    if table:
        floor = statistics.median(row["floor_wall_s"] for row in table)
        print(f"CLI start-up, whole processes, median of {args.runs} pairs with the floor `python -c 'import click, "
              f"yaml'` (its wall median {floor:.3f} s); load average {result['load_average']:.1f}")
        print(f"  {'command':<38} {'wall s':>7} {'cpu s':>7} {'wall/floor':>10} {'cpu/floor':>9}  goal")
    for row in table:
        goal = f"<= {row['goal_ratio']:g}x" if row["goal_ratio"] else ""
        print(f"  {row['command']:<38} {row['wall_s']:>7.3f} {row['cpu_s']:>7.3f} {row['wall_ratio']:>9.2f}x "
              f"{row['cpu_ratio']:>8.2f}x  {goal}")
    print("rules ready (load_rules of the shipped rules; goal with the cache warm: <= 0.3 s):")
    for label, seconds in ready.items():
        print(f"  {label:<38} {seconds:>7.3f} s")


if __name__ == "__main__":
    main()
