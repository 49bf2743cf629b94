"""What the 601-byte YAML alias bomb costs a rules load, bounded (docs/rule-authoring.md "Bounded loading")
and, for comparison, expanded.

Each figure comes from a child process of its own (so its peak resident memory is its own): ``lint`` is
``rule_problems`` on a directory holding the bomb beside a copy of the shipped rules (the CPU seconds of the
call, the process's peak RSS growth over the same process after loading the shipped rules alone);
``refusal`` is :func:`runtime.rules.yamlsrc.load_documents` on the bomb alone (counted, refused);
``expanded`` is the same with the limits lifted, building every value with its line and column as the
loader did before it counted (stopped after ``--cap`` seconds). The figure to read: lint refuses in milliseconds and grows by
nothing measurable, where the expansion took seconds and hundreds of MiB.

Figures, not pass/fail. Usage: ``.venv/bin/python benchmarks/rule_loading.py [--cap 60]``.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.engine.test_bounded_loading import bomb  # noqa: E402

_LINT = """
import json, resource, shutil, sys, tempfile, time
from pathlib import Path
from runtime.rules.loader import rule_problems
with tempfile.TemporaryDirectory() as tmp:
    rules = Path(tmp) / "rules"
    shutil.copytree(sys.argv[1], rules, ignore=shutil.ignore_patterns("tests"))
    rule_problems(rules, cache=None)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    (rules / "bomb.yaml").write_text(sys.argv[2])
    started = time.process_time()
    found = rule_problems(rules, cache=None)[0]
    seconds = time.process_time() - started
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"seconds": seconds, "grown_kib": grown, "findings": [str(p) for p in found]}))
"""
_REFUSAL = """
import json, sys, time
from runtime.rules.yamlsrc import YamlSourceError, load_documents
started = time.process_time()
try:
    load_documents(sys.argv[1])
except YamlSourceError:
    pass
print(json.dumps({"seconds": time.process_time() - started}))
"""
_EXPANDED = """
import json, resource, sys, time
from runtime.rules.yamlsrc import YamlLimits, load_documents
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.process_time()
load_documents(sys.argv[1], YamlLimits(nodes=10**9, aliases=10**9, depth=10**6))
seconds = time.process_time() - started
print(json.dumps({"seconds": seconds, "grown_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before}))
"""


def child(code: str, *args: str, cap: float) -> dict | None:
    """The JSON a child process running ``code`` prints; None when it ran past ``cap`` seconds."""
    try:
        done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=cap,
                              cwd=ROOT, check=True)
    except subprocess.TimeoutExpired:
        return None
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    """Print the figures (see the module docstring)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--cap", type=float, default=60.0, help="seconds the expansion may run")
    args = parser.parse_args()
    text = bomb()
    lint = child(_LINT, str(ROOT / "rules"), text, cap=args.cap)
    print(f"bomb: {len(text.encode())} bytes")
    refusal = child(_REFUSAL, text, cap=args.cap)
    print(f"  refusal of the file (counted): {refusal['seconds'] * 1000:.2f} ms CPU")
    print(f"  lint of the shipped rules with it: {lint['seconds'] * 1000:.0f} ms CPU, peak RSS grew "
          f"{lint['grown_kib']} KiB; {len(lint['findings'])} finding: {lint['findings'][0]}")
    expanded = child(_EXPANDED, text, cap=args.cap)
    if expanded is None:
        print(f"  expanded (limits lifted): > {args.cap:g} s (stopped)")
    else:
        print(f"  expanded (limits lifted): {expanded['seconds']:.2f} s CPU, peak RSS grew "
              f"{expanded['grown_kib'] / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
