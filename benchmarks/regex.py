"""What the rules' regexes cost on RE2 against Python's backtracking ``re`` (docs/rule-authoring.md "Regular
expressions").

The operator regex ``^([a-z0-9]+-?)+[a-z0-9]$`` against a label value of n-1 ``a`` and one capital letter:
Python's ``re.fullmatch`` (what ``matches`` ran before RE2) in a child process per length, stopped after
``--cap`` seconds, and RE2 (:func:`runtime.model.regex.search`) up to the 63 characters a label value may
have; then the same match as a CEL evaluation of the rules' evaluator (``v.matches(p)``) beside the floor
of an evaluation that reads the same value (``size(v) > 0``), in one process, best of 5 x 2,000.

Figures, not pass/fail. Usage: ``.venv/bin/python benchmarks/regex.py [--cap 20]``.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runtime.model import regex  # noqa: E402
from runtime.rules.cel.compile import compile_expression  # noqa: E402
from runtime.rules.cel.values import to_cel  # noqa: E402

PATTERN = "^([a-z0-9]+-?)+[a-z0-9]$"
_CHILD = ("import re, sys, time; t = time.perf_counter(); re.fullmatch(sys.argv[1], sys.argv[2]); "
          "print(time.perf_counter() - t)")


def python_re(length: int, cap: float) -> float | None:
    """Seconds Python's ``re.fullmatch`` takes on the label of ``length`` characters; None past ``cap``."""
    text = "a" * (length - 1) + "A"
    try:
        done = subprocess.run([sys.executable, "-c", _CHILD, PATTERN, text], capture_output=True, text=True,
                              timeout=cap)
    except subprocess.TimeoutExpired:
        return None
    return float(done.stdout)


def best(fn, runs: int = 5, repeat: int = 2000) -> float:
    """The fastest of ``runs`` rounds of ``repeat`` calls, seconds per call."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(repeat):
            fn()
        times.append((time.perf_counter() - start) / repeat)
    return min(times)


def main() -> None:
    """Print the figures (see the module docstring)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--cap", type=float, default=20.0, help="seconds a child may run Python's re")
    args = parser.parse_args()
    print(f"pattern {PATTERN!r}, label 'a' * (n - 1) + 'A'")
    for length in (16, 18, 20, 22, 24, 26):
        seconds = python_re(length, args.cap)
        shown = f"{seconds * 1000:.1f} ms" if seconds is not None else f"> {args.cap:g} s (stopped)"
        print(f"  python re.fullmatch n={length}: {shown}")
        if seconds is None:
            break
    for length in (16, 26, 63):
        text = "a" * (length - 1) + "A"
        print(f"  RE2 search          n={length}: {best(lambda: regex.search(PATTERN, text)) * 1e6:.2f} us")
    value = {"v": to_cel("a" * 62 + "A"), "p": to_cel(PATTERN)}
    match = compile_expression("v.matches(p)", "bench")
    floor = compile_expression("size(v) > 0", "bench")
    on, off = best(lambda: match.evaluate_cel(value)), best(lambda: floor.evaluate_cel(value))
    print(f"  CEL v.matches(p), n=63: {on * 1e6:.2f} us per evaluation; floor size(v) > 0: {off * 1e6:.2f} us "
          f"({on / off:.2f}x)")


if __name__ == "__main__":
    main()
